// One command run in a sandbox for the API (its process, deadline, counts and audit row), and the output a
// background process keeps for its owner to read.
import type { FastifyRequest } from "fastify";
import { z } from "zod";
import type { Database } from "../../store/db.js";
import { recordExecEnd, recordExecStart } from "../../store/audit.js";
import { SandboxNotRunningError } from "../../sandbox/exec.js";
import type { SandboxRunner } from "../../sandbox/runner.js";
import { inSpan } from "../../../lib/telemetry.js";
import {
  type OutputStream,
  type SandboxCommand,
  type SandboxProcess,
  type SignalName,
} from "../../sandbox/process.js";
import { ProcessBody, type ExecRequest } from "./schemas.js";

/** How often, and how long apart, a kill scans again for a command that has not ended (~10 s in all). */
const KILL_ATTEMPTS = 50;
const KILL_RETRY_MS = 200;

/** One run of a command: its process, its deadline, its counts and its audit row. */
export class Execution {
  readonly startedAt = new Date();
  readonly bytes = { stdout: 0, stderr: 0 };
  exitCode: number | null = null;
  finishedAt: Date | null = null;
  timedOut = false;
  killedBy: string | null = null;
  process!: SandboxProcess;
  /** Settles when the process has exited and its audit row is closed. */
  finished!: Promise<void>;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    readonly id: string,
    readonly projectId: string,
    readonly argv: readonly string[],
    readonly request: ExecRequest,
    private readonly sandbox: SandboxRunner,
    private readonly db: Database,
    private readonly log: FastifyRequest["log"],
  ) {}

  get running(): boolean {
    return this.finishedAt === null;
  }

  /** `io`: a stdin the caller writes as it goes, or a terminal, in place of the request's stdin. */
  async start(
    userId: string,
    timeoutSeconds: number,
    onOutput: (stream: OutputStream, chunk: Buffer) => void,
    io: Pick<SandboxCommand, "stdin" | "tty"> = {},
  ): Promise<void> {
    const { request } = this;
    const stdin = io.stdin ?? (request.stdin === undefined ? undefined : Buffer.from(request.stdin));
    await recordExecStart(this.db, {
      id: this.id,
      projectId: this.projectId,
      userId,
      command: this.argv,
      shell: this.shell,
      cwd: request.cwd,
      envNames: Object.keys(request.env ?? {}),
      background: request.background ?? false,
      stdinBytes: Buffer.isBuffer(stdin) ? stdin.length : 0,
    });
    try {
      this.process = await inSpan("sandbox exec start", { "sandbox.exec_id": this.id }, () =>
        this.sandbox.start(
          this.id,
          { argv: this.argv, cwd: request.cwd, env: request.env, stdin, tty: io.tty },
          (stream, chunk) => {
            this.bytes[stream] += chunk.length;
            onOutput(stream, chunk);
          },
        ),
      );
    } catch (error) {
      await this.end(null, "error");
      throw error;
    }
    this.timer = setTimeout(() => {
      this.timedOut = true;
      void this.kill("timeout");
    }, timeoutSeconds * 1000);
    this.finished = this.process.exited.then(
      (code) => this.end(code, this.killedBy),
      (error: unknown) => {
        this.log.warn({ err: error, exec: this.id }, "exec stream failed");
        return this.end(null, this.killedBy ?? "error");
      },
    );
  }

  get shell(): boolean {
    return this.request.shell ?? typeof this.request.command === "string";
  }

  /**
   * Kills the whole tree (KILL until none is left) unless it has already exited; answers how many
   * processes were killed. Its output is read on (and dropped by a reader that has gone) to its end.
   */
  async kill(reason: string): Promise<number> {
    if (!this.running) return 0;
    this.killedBy ??= reason;
    this.process.resume();
    let killed = 0;
    // A command just started may not be itself yet: the container's launcher reads its command line and then
    // execs it, and a scan for its marker in between finds nothing (a full run's E2B SDK killed a background
    // `sleep 120` right after starting it and waited out its request). KILL again until it has ended.
    for (let attempt = 1; ; attempt++) {
      try {
        killed += await this.sandbox.signal(this.id, "KILL");
      } catch (error) {
        // A sandbox stopped meanwhile took the processes with it.
        if (!(error instanceof SandboxNotRunningError))
          this.log.warn({ err: error, exec: this.id }, "killing an exec's processes failed");
        return killed;
      }
      if (!this.running || attempt >= KILL_ATTEMPTS) return killed;
      const ended = await Promise.race([
        this.finished.then(() => true),
        new Promise<false>((resolve) => setTimeout(() => resolve(false), KILL_RETRY_MS)),
      ]);
      if (ended) return killed;
    }
  }

  /** Sends `signal` to the whole tree (KILL: see {@link kill}); how many processes it found. */
  signal(signal: SignalName): Promise<number> {
    return this.sandbox.signal(this.id, signal);
  }

  private async end(exitCode: number | null, killedBy: string | null): Promise<void> {
    clearTimeout(this.timer);
    this.exitCode = exitCode;
    this.finishedAt = new Date();
    this.killedBy = killedBy;
    await recordExecEnd(this.db, this.id, {
      exitCode,
      durationMs: this.durationMs,
      stdoutBytes: this.bytes.stdout,
      stderrBytes: this.bytes.stderr,
      timedOut: this.timedOut,
      killedBy,
    }).catch((error: unknown) => this.log.error({ err: error, exec: this.id }, "exec audit not closed"));
  }

  get durationMs(): number {
    return (this.finishedAt ?? new Date()).getTime() - this.startedAt.getTime();
  }

  view(): z.infer<typeof ProcessBody> {
    return {
      exec_id: this.id,
      command: [...this.argv],
      shell: this.shell,
      cwd: this.request.cwd ?? null,
      started_at: this.startedAt.toISOString(),
      finished_at: this.finishedAt?.toISOString() ?? null,
      running: this.running,
      exit_code: this.exitCode,
      timed_out: this.timedOut,
      killed_by: this.killedBy,
      stdout_bytes: this.bytes.stdout,
      stderr_bytes: this.bytes.stderr,
    };
  }
}

/**
 * What one project's background processes hold: how many run (or are starting), and the output their logs
 * keep together, at most `capacity` bytes: past it, the log keeping the most drops its oldest output.
 */
export class ProjectBackground {
  running = 0;
  kept = 0;
  readonly logs = new Set<OutputLog>();

  constructor(readonly capacity: number) {}

  /** Drops output until the project's logs keep at most its capacity together. */
  trim(): void {
    while (this.kept > this.capacity) {
      let largest: OutputLog | undefined;
      for (const log of this.logs) if (!largest || log.kept > largest.kept) largest = log;
      if (!largest || largest.dropOldest() === 0) return;
    }
  }

  forget(log: OutputLog): void {
    if (!this.logs.delete(log)) return;
    this.kept -= log.kept;
  }
}

/**
 * A background process's output, the newest `capacity` bytes of both streams (less when its project's
 * other logs take their share), by offset.
 */
export class OutputLog {
  private chunks: { stream: OutputStream; start: number; data: Buffer }[] = [];
  kept = 0;
  total = 0;
  dropped = 0;

  constructor(
    private readonly capacity: number,
    private readonly project: ProjectBackground,
  ) {
    project.logs.add(this);
  }

  push(stream: OutputStream, data: Buffer): void {
    this.chunks.push({ stream, start: this.total, data });
    this.total += data.length;
    this.kept += data.length;
    this.project.kept += data.length;
    while (this.kept > this.capacity && this.dropOldest() > 0);
    this.project.trim();
  }

  /** Drops the oldest chunk kept; how many bytes that freed. */
  dropOldest(): number {
    const oldest = this.chunks.shift();
    if (!oldest) return 0;
    this.kept -= oldest.data.length;
    this.project.kept -= oldest.data.length;
    this.dropped = oldest.start + oldest.data.length;
    return oldest.data.length;
  }

  since(offset: number): { offset: number; chunks: { stream: OutputStream; data: Buffer }[] } {
    const from = Math.max(offset, this.dropped);
    const chunks = this.chunks
      .filter((c) => c.start + c.data.length > from)
      .map((c) => ({ stream: c.stream, data: c.data.subarray(Math.max(0, from - c.start)) }));
    return { offset: Math.min(from, this.total), chunks };
  }
}
