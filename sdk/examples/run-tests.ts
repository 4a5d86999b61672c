// Run a repository's tests in a sandbox and read the exit code (sdk/README.md).
// As a program: SBX_API=… SBX_EMAIL=… SBX_PASSWORD=… npx tsx sdk/examples/run-tests.ts <project-id> <dir> <command>
import { pathToFileURL } from "node:url";
import { Client, Sandbox } from "../src/index.js";

/** Runs `command` (a shell line) in `dir`, its output streamed to `onOutput`; answers the exit code. */
export async function runTests(
  sandbox: Sandbox,
  dir: string,
  command: string,
  onOutput: (chunk: string) => void = (chunk) => process.stdout.write(chunk),
): Promise<number> {
  const { exit_code } = await sandbox.run(
    command,
    { onStdout: onOutput, onStderr: onOutput },
    { shell: true, cwd: dir, timeout_s: 1800 },
  );
  return exit_code;
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  const [id, dir, ...command] = process.argv.slice(2);
  const client = await Client.login(process.env.SBX_API!, process.env.SBX_EMAIL!, process.env.SBX_PASSWORD!);
  const sandbox = await Sandbox.get(client, id!);
  process.exitCode = await runTests(sandbox, dir!, command.join(" "));
}
