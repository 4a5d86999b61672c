import { PassThrough, type Duplex } from "node:stream";
import type Docker from "dockerode";
import { isNotFound } from "../../lib/docker-client.js";

export interface ExecResult {
  readonly exitCode: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** The sandbox is not there or not running: what an API answers with 409, not 500. */
export class SandboxNotRunningError extends Error {
  /** What its backend calls the sandbox ("container", "Pod"), once the backend registry has said it. */
  sandboxNoun?: string;
  /** `reason`: why it cannot be reached when that is not its being stopped (this runtime cannot reach it). */
  constructor(
    readonly container: string,
    readonly reason?: string,
  ) {
    super(reason ?? `sandbox ${container} is not running`);
    this.name = "SandboxNotRunningError";
  }
}

/**
 * An exec in a running sandbox. The engine refuses one in a stopped container (409) or a missing one
 * (404): both are {@link SandboxNotRunningError}, with no separate inspect first.
 */
export async function createSandboxExec(
  docker: Docker,
  container: string,
  options: Docker.ExecCreateOptions,
): Promise<Docker.Exec> {
  try {
    return await docker.getContainer(container).exec(options);
  } catch (error) {
    if (isNotFound(error) || (error as { statusCode?: number }).statusCode === 409)
      throw new SandboxNotRunningError(container);
    throw error;
  }
}

/** Output kept per stream; a command that prints more is cut (its exit code still counts). */
const MAX_OUTPUT_BYTES = 1024 * 1024;

/**
 * Runs a command in a running sandbox through the engine's exec API (no shell unless the command is
 * one) and collects its output, at most {@link MAX_OUTPUT_BYTES} per stream. What a sandbox answers is
 * the tenant's to shape, so every exec has a deadline: past `timeoutMs` its process is killed (the
 * engine cannot kill an exec, so by its host pid: the runtime runs beside the engine) and an
 * {@link ExecTimeoutError} thrown.
 */
export async function execInSandbox(
  docker: Docker,
  container: string,
  command: readonly string[],
  options: { user?: string; timeoutMs?: number; env?: readonly string[]; stdin?: Buffer } = {},
): Promise<ExecResult> {
  const exec = await createSandboxExec(docker, container, {
    Cmd: [...command],
    User: options.user ?? "agent",
    Env: options.env ? [...options.env] : undefined,
    AttachStdin: options.stdin !== undefined,
    AttachStdout: true,
    AttachStderr: true,
  });
  const stream = (await exec.start({ hijack: true, stdin: options.stdin !== undefined })) as Duplex;
  if (options.stdin !== undefined) stream.end(options.stdin);
  const collected = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
  const sizes = { stdout: 0, stderr: 0 };
  const sink = (name: "stdout" | "stderr") => {
    const through = new PassThrough();
    through.on("data", (chunk: Buffer) => {
      if (sizes[name] >= MAX_OUTPUT_BYTES) return;
      collected[name].push(chunk);
      sizes[name] += chunk.length;
    });
    return through;
  };
  docker.modem.demuxStream(stream, sink("stdout"), sink("stderr"));
  const timeoutMs = options.timeoutMs ?? 60_000;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      stream.destroy();
      void killExec(exec);
      reject(new ExecTimeoutError(command, container, timeoutMs));
    }, timeoutMs);
    stream.on("end", () => (clearTimeout(timer), resolve()));
    stream.on("close", () => (clearTimeout(timer), resolve()));
    stream.on("error", (error) => (clearTimeout(timer), reject(error)));
  });
  const { ExitCode } = await exec.inspect();
  return {
    exitCode: ExitCode ?? -1,
    stdout: Buffer.concat(collected.stdout).toString("utf8"),
    stderr: Buffer.concat(collected.stderr).toString("utf8"),
  };
}

/** An exec that did not finish by its deadline (its process was killed). */
export class ExecTimeoutError extends Error {
  constructor(command: readonly string[], container: string, timeoutMs: number) {
    super(`'${command.join(" ")}' in ${container} did not finish within ${Math.round(timeoutMs / 1000)} s`);
    this.name = "ExecTimeoutError";
  }
}

/** Kills an exec's process (SIGKILL by its host pid); an exec that has already ended is left alone. */
export async function killExec(exec: Docker.Exec): Promise<void> {
  const info = await exec.inspect().catch(() => undefined);
  if (!info?.Running || !(info.Pid > 0)) return;
  try {
    process.kill(info.Pid, "SIGKILL");
  } catch {
    // it ended meanwhile
  }
}
