import { spawn } from "node:child_process";
import { z } from "zod";
import { changedKeys, type ResourceHandler } from "../handler.js";

/**
 * `command:local:Command`, the resource of `@pulumi/command`, for machines where its Go provider
 * cannot be built (the module proxy here serves no version of github.com/pulumi/pulumi-command).
 * Same inputs and outputs as upstream for local commands; asset and archive capture is not offered
 * and is refused at `check` rather than ignored.
 */
export const LocalCommandInputs = z.object({
  create: z.string().optional(),
  update: z.string().optional(),
  delete: z.string().optional(),
  dir: z.string().optional(),
  environment: z.record(z.string(), z.string()).optional(),
  interpreter: z.array(z.string()).min(1).optional(),
  stdin: z.string().optional(),
  triggers: z.array(z.unknown()).optional(),
  addPreviousOutputInEnv: z.boolean().optional(),
  logging: z.enum(["stdout", "stderr", "stdoutAndStderr", "none"]).optional(),
  assetPaths: z
    .array(z.string())
    .max(0, { message: "asset capture is not supported by this provider build" })
    .optional(),
  archivePaths: z
    .array(z.string())
    .max(0, { message: "archive capture is not supported by this provider build" })
    .optional(),
});
export type LocalCommandInputs = z.infer<typeof LocalCommandInputs>;
export type LocalCommandOutputs = LocalCommandInputs & { stdout: string; stderr: string };

interface RunResult {
  stdout: string;
  stderr: string;
}

/** Upstream drops one trailing newline from captured output; keep outputs byte-compatible. */
const trimNewline = (text: string): string => text.replace(/\r?\n$/, "");

export async function runCommand(
  command: string,
  inputs: LocalCommandInputs,
  previous?: RunResult,
): Promise<RunResult> {
  const [program, ...args] = inputs.interpreter ?? ["/bin/sh", "-c"];
  const env: NodeJS.ProcessEnv = { ...process.env, ...inputs.environment };
  if (previous && inputs.addPreviousOutputInEnv !== false) {
    env.PULUMI_COMMAND_STDOUT = previous.stdout;
    env.PULUMI_COMMAND_STDERR = previous.stderr;
  }
  return new Promise((resolve, reject) => {
    const child = spawn(program!, [...args, command], {
      cwd: inputs.dir,
      env,
      stdio: ["pipe", "pipe", "pipe"],
    });
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    child.stdout.on("data", (chunk: Buffer) => stdout.push(chunk));
    child.stderr.on("data", (chunk: Buffer) => stderr.push(chunk));
    child.on("error", (error) => reject(new Error(`cannot start ${program}: ${error.message}`)));
    // A command that exits without reading all of its stdin closes the pipe under us (EPIPE): an
    // ordinary outcome, whose result is the exit status reported on "close" below.
    child.stdin.on("error", () => undefined);
    child.on("close", (code, signal) => {
      const result = {
        stdout: trimNewline(Buffer.concat(stdout).toString("utf8")),
        stderr: trimNewline(Buffer.concat(stderr).toString("utf8")),
      };
      if (code === 0) return resolve(result);
      const why = signal ? `was killed by ${signal}` : `exited with code ${code}`;
      reject(new Error(`command ${why}: '${command}'\nstdout: ${result.stdout}\nstderr: ${result.stderr}`));
    });
    child.stdin.end(inputs.stdin ?? "");
  });
}

const NONE: RunResult = { stdout: "", stderr: "" };

export const localCommandHandler: ResourceHandler<LocalCommandInputs, LocalCommandOutputs> = {
  inputs: LocalCommandInputs,

  async diff(_id, olds, news) {
    const keys = Object.keys(LocalCommandInputs.shape) as (keyof LocalCommandInputs)[];
    const changed = changedKeys(olds, news, keys);
    return { changes: changed.length > 0, replaces: changed.filter((key) => key === "triggers") };
  },

  async create(inputs) {
    const result = inputs.create ? await runCommand(inputs.create, inputs) : NONE;
    return {
      id: `command-${Date.now()}-${Math.random().toString(36).slice(2, 10)}`,
      outs: { ...inputs, ...result },
    };
  },

  // A command's effects cannot be observed; like upstream, refresh keeps the recorded outputs.
  read: async (_id, olds) => olds,

  async update(_id, olds, news) {
    const command = news.update ?? news.create;
    const result = command ? await runCommand(command, news, olds) : NONE;
    return { ...news, ...result };
  },

  async delete(_id, olds) {
    if (olds.delete) await runCommand(olds.delete, olds, olds);
  },
};
