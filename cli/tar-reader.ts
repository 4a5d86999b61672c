// The tar format as `sbx sync --artifacts` reads it from a stream the sandbox makes: headers checked (the
// checksum, numbers in octal or base-256), pax records applied, and the stream read block by block with
// nothing taken on trust. What is taken from a member is cli/artifacts.ts's to decide.

export const BLOCK = 512;
/** The longest member name taken (Linux's PATH_MAX). */
export const MAX_NAME_BYTES = 4096;
/** The largest pax extended header read. */
export const MAX_PAX_BYTES = 1 << 20;

/** Member kinds that are never taken. */
export const REFUSED_KINDS: Readonly<Record<string, string>> = {
  "1": "a hard link",
  "2": "a symbolic link",
  "3": "a character device",
  "4": "a block device",
  "6": "a FIFO",
  S: "a sparse file",
  D: "a GNU dump directory",
  M: "a multi-volume continuation",
  V: "a volume label",
  N: "an old GNU long name",
};
/** Regular files: '0', NUL (pre-POSIX) and '7' (contiguous, a regular file everywhere today). */
export const FILE_KINDS = new Set(["0", "\0", "7"]);
export const DIRECTORY_KIND = "5";

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Bytes as UTF-8, or undefined when they are not (a name this CLI could not write back faithfully). */
export function strictUtf8(bytes: Buffer): string | undefined {
  try {
    return utf8.decode(bytes);
  } catch {
    return undefined;
  }
}

/** A header field up to its first NUL. */
export function field(block: Buffer, start: number, length: number): Buffer {
  const raw = block.subarray(start, start + length);
  const nul = raw.indexOf(0);
  return nul < 0 ? raw : raw.subarray(0, nul);
}

/**
 * A header's number: octal digits with spaces or NULs around them, or GNU's base-256 (high bit set).
 * Undefined when it is neither, or negative; a value past 2^53 is Infinity (refused by any limit).
 */
export function headerNumber(raw: Buffer): number | undefined {
  const first = raw[0] ?? 0;
  if (first & 0x80) {
    if (first & 0x40) return undefined; // negative (two's complement)
    let value = BigInt(first & 0x3f);
    for (const byte of raw.subarray(1)) value = (value << 8n) | BigInt(byte);
    return value > BigInt(Number.MAX_SAFE_INTEGER) ? Infinity : Number(value);
  }
  const text = raw
    .toString("latin1")
    .replace(/^[ \0]+/, "")
    .replace(/[ \0]+$/, "");
  if (text === "") return 0;
  return /^[0-7]+$/.test(text) ? parseInt(text, 8) : undefined;
}

/** The header's checksum holds: the sum of its bytes with the checksum field as spaces (unsigned or signed). */
export function checksumHolds(block: Buffer): boolean {
  const stored = headerNumber(block.subarray(148, 156));
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < BLOCK; i++) {
    const byte = i >= 148 && i < 156 ? 0x20 : block[i]!;
    unsigned += byte;
    signed += byte > 127 ? byte - 256 : byte;
  }
  return stored === unsigned || stored === signed;
}

export const isZero = (block: Buffer) => block.every((byte) => byte === 0);

/** pax extended header records (`<length> <key>=<value>\n`), or a string saying what is malformed. */
export function paxRecords(data: Buffer): Map<string, Buffer> | string {
  const records = new Map<string, Buffer>();
  for (let at = 0; at < data.length;) {
    const space = data.indexOf(0x20, at);
    const lengthText = space < 0 ? "" : data.subarray(at, space).toString("latin1");
    if (!/^[1-9][0-9]{0,7}$/.test(lengthText)) return "a pax record without a length";
    const end = at + Number(lengthText);
    if (end > data.length || end <= space + 1 || data[end - 1] !== 0x0a)
      return "a pax record whose length does not match";
    const record = data.subarray(space + 1, end - 1);
    const equals = record.indexOf(0x3d);
    const key = equals > 0 ? strictUtf8(record.subarray(0, equals)) : undefined;
    if (key === undefined) return "a pax record without a key";
    records.set(key, record.subarray(equals + 1));
    at = end;
  }
  return records;
}

/** What the next member's header is overridden with (pax `x`, GNU `L`/`K`). */
export interface Overrides {
  path?: string;
  linkpath?: string;
  size?: number;
}

/** The pax keys that change where or what a member is; any other key (times, owners, xattrs) is not applied. */
export function applyPax(records: Map<string, Buffer>, into: Overrides): string | undefined {
  for (const [key, value] of records) {
    if (key.startsWith("GNU.sparse.")) return "a sparse file (GNU.sparse pax records)";
    if (key === "path" || key === "linkpath") {
      const text = strictUtf8(value);
      if (text === undefined) return `a pax ${key} that is not UTF-8`;
      if (text.includes("\0")) return `a pax ${key} with a NUL in it`;
      if (Buffer.byteLength(text) > MAX_NAME_BYTES) return `a pax ${key} over ${MAX_NAME_BYTES} bytes`;
      if (text === "") delete into[key];
      else into[key] = text;
    } else if (key === "size") {
      const text = value.toString("latin1");
      if (!/^[0-9]{1,16}$/.test(text)) return "a pax size that is not a number";
      into.size = Number(text);
    }
  }
  return undefined;
}

/** Reads a byte stream in exact pieces. */
export class StreamReader {
  private chunk: Buffer = Buffer.alloc(0);
  private offset = 0;
  private ended = false;

  constructor(private readonly iterator: AsyncIterator<Buffer | string>) {}

  /** Up to `max` bytes; an empty buffer once the stream has ended. */
  private async next(max: number): Promise<Buffer> {
    while (this.offset >= this.chunk.length) {
      if (this.ended) return Buffer.alloc(0);
      const step = await this.iterator.next();
      if (step.done) {
        this.ended = true;
        return Buffer.alloc(0);
      }
      this.chunk = Buffer.isBuffer(step.value) ? step.value : Buffer.from(step.value);
      this.offset = 0;
    }
    const piece = this.chunk.subarray(this.offset, this.offset + max);
    this.offset += piece.length;
    return piece;
  }

  /** Exactly `n` bytes, or undefined when the stream ends first. */
  async read(n: number): Promise<Buffer | undefined> {
    const pieces: Buffer[] = [];
    for (let got = 0; got < n;) {
      const piece = await this.next(n - got);
      if (piece.length === 0) return undefined;
      pieces.push(piece);
      got += piece.length;
    }
    return pieces.length === 1 ? pieces[0]! : Buffer.concat(pieces, n);
  }

  /** `n` bytes handed to `sink` piece by piece; false when the stream ends first. */
  async forward(n: number, sink: (piece: Buffer) => Promise<void>): Promise<boolean> {
    for (let left = n; left > 0;) {
      const piece = await this.next(Math.min(left, 1 << 16));
      if (piece.length === 0) return false;
      await sink(piece);
      left -= piece.length;
    }
    return true;
  }

  /** Reads to the end; false when a byte is not zero or more than `limit` bytes remain. */
  async restIsZeros(limit: number): Promise<boolean> {
    for (let read = 0; ;) {
      const piece = await this.next(1 << 16);
      if (piece.length === 0) return true;
      read += piece.length;
      if (read > limit || !isZero(piece)) return false;
    }
  }
}

export const padding = (size: number) => (BLOCK - (size % BLOCK)) % BLOCK;
