// What the files routes read back from the sandbox's helper: its status line, a bounded listing, and how
// each failure it reports is answered.
import { MAX_ENTRY_BYTES } from "../../sandbox/files.js";
import type { SandboxProcess } from "../../sandbox/process.js";
import type { SandboxRunner } from "../../sandbox/runner.js";

/**
 * The script's answers: its status line's code, as the API's. A path the document allows is never a 400
 * for what it finds in the sandbox: leading out of the home and workspace is a 403 (the agent may not act
 * there), a directory where a file is asked for, a path that names the root itself or a write the sandbox's
 * file system refuses is a 409 (the sandbox's state, not the request, is in the way).
 */
export const FAILURES: Record<string, { status: number; code: string; what: (path: string) => string }> = {
  missing: { status: 404, code: "not_found", what: (p) => `${p}: no such file or directory` },
  outside: {
    status: 403,
    code: "path_outside",
    what: (p) => `resolves to ${p}, outside /home/agent and /workspace`,
  },
  denied: { status: 403, code: "permission_denied", what: (p) => `${p}: the agent may not do that there` },
  isdir: { status: 409, code: "is_directory", what: (p) => `${p} is a directory` },
  invalid: { status: 409, code: "invalid_path", what: (p) => `${p} names no file` },
  toolarge: { status: 413, code: "too_large", what: (p) => p },
  tar: { status: 400, code: "bad_archive", what: (p) => `the archive could not be unpacked: ${p}` },
  io: { status: 409, code: "write_failed", what: (p) => `${p} could not be written` },
};

/** What is read and dropped of a body past the limit before the connection is reset instead. */
export const DRAIN_BYTES = 64 * 1024 * 1024;

/** The most of the files script's stderr kept while its status line comes: more than any it prints. */
export const STATUS_LINE_BYTES = 16 * 1024;

/**
 * The files script's status: the first line of its stderr. What follows that line is dropped as it comes
 * (a tar's complaint about each file it cannot read can be many), and a first line longer than
 * STATUS_LINE_BYTES is a failure of its own: at most that much is ever kept, each byte copied at most twice.
 */
export class StatusLine {
  private parts: Buffer[] = [];
  private length = 0;
  private done = false;

  /** The bytes held now. */
  get keptBytes(): number {
    return this.length;
  }

  /** Takes a chunk of stderr: the status line once it is whole (and never again). */
  push(chunk: Buffer): string | undefined {
    if (this.done) return undefined;
    const end = chunk.indexOf(10);
    const part = end >= 0 ? chunk.subarray(0, end) : chunk;
    if (this.length + part.length > STATUS_LINE_BYTES) {
      this.finish();
      return `err exit the file operation's status line is longer than ${STATUS_LINE_BYTES} bytes`;
    }
    this.parts.push(Buffer.from(part));
    this.length += part.length;
    if (end < 0) return undefined;
    const line = Buffer.concat(this.parts, this.length).toString();
    this.finish();
    return line;
  }

  private finish(): void {
    this.done = true;
    this.parts = [];
    this.length = 0;
  }
}

/**
 * A listing's records as they come, up to `records` whole ones (and their bytes' bound): what comes
 * after them is dropped. `push` answers whether it takes more.
 */
export class ListingBuffer {
  private readonly chunks: Buffer[] = [];
  private bytes = 0;
  private records = 0;
  full = false;
  /** Settles once it is full. */
  readonly filled: Promise<void>;
  private fill!: () => void;

  constructor(
    private readonly maxRecords: number,
    private readonly maxBytes = maxRecords * MAX_ENTRY_BYTES,
  ) {
    this.filled = new Promise((resolve) => (this.fill = resolve));
  }

  push(chunk: Buffer): boolean {
    if (this.full) return false;
    let take = Math.min(chunk.length, this.maxBytes - this.bytes);
    for (let at = chunk.indexOf(0); at >= 0 && at < take; at = chunk.indexOf(0, at + 1))
      if (++this.records === this.maxRecords) take = at + 1;
    this.chunks.push(Buffer.from(chunk.subarray(0, take)));
    this.bytes += take;
    this.full = this.records === this.maxRecords || this.bytes === this.maxBytes;
    if (this.full) this.fill();
    return !this.full;
  }

  get output(): Buffer {
    return Buffer.concat(this.chunks, this.bytes);
  }
}

/** One run of the files script: its status line, its stdout, its end. */
export interface FilesRun {
  readonly process: SandboxProcess;
  readonly status: Promise<string>;
  readonly id: string;
  /** Where it runs (to signal it). */
  readonly sandbox: SandboxRunner;
}
