// The CliError a call throws, for the unit tests of the CLI's refusals; any other outcome fails the test.
import { CliError } from "../../cli/errors.js";

export function refusal(run: () => unknown): CliError {
  try {
    run();
  } catch (error) {
    if (error instanceof CliError) return error;
    throw error;
  }
  throw new Error("not refused");
}
