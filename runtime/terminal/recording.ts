import { createWriteStream, mkdirSync, type WriteStream } from "node:fs";
import * as path from "node:path";
import { StringDecoder } from "node:string_decoder";
import type { Queryable } from "../db.js";
import type { TerminalSize } from "./attach.js";

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

  private line(value: unknown): void {
    if (!this.closed) this.file.write(`${JSON.stringify(value)}\n`);
  }

  output(data: Buffer): void {
    const text = this.outputDecoder.write(data);
    if (text) this.line([this.elapsed(), "o", text]);
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
  readonly kind: "input" | "resize";
  readonly data: Buffer;
}

/**
 * The session's input, one row per frame with its own time, written outside the sandbox into the
 * append-only `terminal_audit` table. Writes are batched (every `flushMs` or `maxBatch` frames) so a
 * typing user costs a handful of inserts per second, not one per key.
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
    this.pending.push({ at: new Date(), kind, data: Buffer.from(data) });
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
      const values: unknown[] = [];
      const rows = batch.map((entry, i) => {
        values.push(entry.at, entry.kind, entry.data);
        return `($1, $2, $3, $${4 + i * 3}, $${5 + i * 3}, $${6 + i * 3})`;
      });
      try {
        await this.db.query(
          `insert into terminal_audit (session_id, project_id, user_id, at, kind, data) values ${rows.join(", ")}`,
          [this.ids.session, this.ids.project, this.ids.user, ...values],
        );
      } catch (error) {
        this.failure ??= error as Error;
      }
    });
    return this.writing;
  }
}
