import { createWriteStream, mkdirSync, promises as fs, type WriteStream } from "node:fs";
import * as path from "node:path";
import { StringDecoder } from "node:string_decoder";
import { recordTerminalAudit, type TerminalAuditKind } from "../store/audit.js";
import type { Queryable } from "../store/db.js";
import type { TerminalSize } from "./attach.js";

/** Where the runtime keeps session recordings: `<dir>/<project>/<session>.cast`. */
export const recordingsDir = (dataDir: string): string => path.join(dataDir, "terminal-sessions");

/** Removes every recording of a project (its delete: recordings do not outlive their project). */
export async function deleteProjectRecordings(dir: string, projectId: string): Promise<void> {
  if (!/^[a-z0-9-]+$/.test(projectId)) throw new Error(`not a project id: ${JSON.stringify(projectId)}`);
  await fs.rm(path.join(dir, projectId), { recursive: true, force: true });
}

/**
 * Deletes recordings last written more than `maxAgeMs` ago (the retention policy; the audit rows are
 * kept, see docs). Returns how many files went.
 */
export async function pruneRecordings(dir: string, maxAgeMs: number, now = Date.now()): Promise<number> {
  let removed = 0;
  for (const project of await fs.readdir(dir).catch(() => [] as string[])) {
    const projectDir = path.join(dir, project);
    for (const file of await fs.readdir(projectDir).catch(() => [] as string[])) {
      const cast = path.join(projectDir, file);
      const stat = await fs.lstat(cast).catch(() => undefined);
      if (stat?.isFile() && now - stat.mtimeMs > maxAgeMs) {
        await fs.rm(cast, { force: true });
        removed += 1;
      }
    }
  }
  return removed;
}

/**
 * An asciinema v2 recording (https://docs.asciinema.org/manual/asciicast/v2/): a JSON header line, then
 * one `[seconds, code, data]` line per event: "o" output, "i" input, "r" resize ("COLSxROWS").
 * Output is decoded as a stream, so a UTF-8 character split across two reads stays whole.
 */
export class CastRecorder {
  private readonly file: WriteStream;
  private readonly started = process.hrtime.bigint();
  private readonly outputDecoder = new StringDecoder("utf8");
  private readonly inputDecoder = new StringDecoder("utf8");
  private closed = false;
  /** Bytes written to the file so far (the session's cap is checked against it). */
  bytes = 0;

  constructor(
    readonly filePath: string,
    size: TerminalSize,
    meta: { title: string },
  ) {
    mkdirSync(path.dirname(filePath), { recursive: true, mode: 0o700 });
    this.file = createWriteStream(filePath, { flags: "wx", mode: 0o600 });
    this.line({
      version: 2,
      width: size.cols,
      height: size.rows,
      timestamp: Math.floor(Date.now() / 1000),
      title: meta.title,
      env: { TERM: "xterm-256color", SHELL: "/bin/bash" },
    });
  }

  private elapsed(): number {
    return Math.round(Number(process.hrtime.bigint() - this.started) / 1e3) / 1e6;
  }

  /** False when the file's buffer is full: the writer should wait for {@link onDrain}. */
  private line(value: unknown): boolean {
    if (this.closed) return true;
    const text = `${JSON.stringify(value)}\n`;
    this.bytes += Buffer.byteLength(text);
    return this.file.write(text);
  }

  /** Records output; false when the disk is behind and the source should pause until {@link onDrain}. */
  output(data: Buffer): boolean {
    const text = this.outputDecoder.write(data);
    return text ? this.line([this.elapsed(), "o", text]) : true;
  }

  onDrain(listener: () => void): void {
    this.file.once("drain", listener);
  }

  input(data: Buffer): void {
    const text = this.inputDecoder.write(data);
    if (text) this.line([this.elapsed(), "i", text]);
  }

  resize(size: TerminalSize): void {
    this.line([this.elapsed(), "r", `${size.cols}x${size.rows}`]);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    const rest = this.outputDecoder.end();
    if (rest) this.line([this.elapsed(), "o", rest]);
    this.closed = true;
    await new Promise<void>((resolve) => this.file.end(resolve));
  }
}

interface AuditEntry {
  readonly at: Date;
  /** `truncated`: the session hit its byte cap here; nothing after it was recorded. */
  readonly kind: TerminalAuditKind;
  data: Buffer;
}

/**
 * The session's input, written outside the sandbox into the append-only `terminal_audit` table. Writes
 * are batched (every `flushMs` or `maxBatch` entries), and input frames that follow one another within a
 * batch share one row (the first frame's time): a typing user, or a client sending one byte per frame,
 * costs at most a row per `flushMs`, not one per key (a row per frame would let a tenant fill the
 * database).
 */
export class AuditLog {
  private pending: AuditEntry[] = [];
  private timer: NodeJS.Timeout | undefined;
  private writing: Promise<void> = Promise.resolve();
  private failure: Error | undefined;

  constructor(
    private readonly db: Queryable,
    private readonly ids: { session: string; project: string; user: string },
    private readonly flushMs = 100,
    private readonly maxBatch = 64,
  ) {}

  record(kind: AuditEntry["kind"], data: Buffer): void {
    const last = this.pending.at(-1);
    if (kind === "input" && last?.kind === "input") last.data = Buffer.concat([last.data, data]);
    else this.pending.push({ at: new Date(), kind, data: Buffer.from(data) });
    if (this.pending.length >= this.maxBatch) void this.flush();
    else this.timer ??= setTimeout(() => void this.flush(), this.flushMs);
  }

  /** The first write error, if any (the proxy ends a session it can no longer audit). */
  get error(): Error | undefined {
    return this.failure;
  }

  flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    const batch = this.pending;
    this.pending = [];
    if (batch.length === 0) return this.writing;
    this.writing = this.writing.then(async () => {
      try {
        await recordTerminalAudit(this.db, this.ids, batch);
      } catch (error) {
        this.failure ??= error as Error;
      }
    });
    return this.writing;
  }
}
