import { createHash } from "node:crypto";

/**
 * Values shorter than this many bytes are not redacted: a two-letter value would turn every `ls` typed into
 * a marker. The API accepts them; the audit and the recordings keep them as typed (docs/security.md).
 */
export const MIN_REDACTED_BYTES = 4;

/**
 * What stands in a recording for a secret's value. It names no secret and keeps no byte of the value, and is
 * no longer in JSON than the shortest value it replaces is at worst (six bytes each: `\u001b`), so a byte cap
 * checked against the unredacted length still holds for the redacted copy.
 */
export const REDACTION_MARKER = "[redacted secret]";
const MARKER = Buffer.from(REDACTION_MARKER);
const EMPTY = Buffer.alloc(0);

/** Which copy a redactor cleans: what the client typed, or what the sandbox printed. */
export type TerminalStream = "input" | "output";

/**
 * The byte strings a stream's copy is searched for: every value as stored, and a multi-line value also as a
 * terminal carries it. A paste's line breaks reach the pty as CR (xterm.js sends Enter as `\r`); the pty's
 * echo of a line break is CR LF (`onlcr`).
 */
export function secretPatterns(values: readonly string[], stream: TerminalStream): Buffer[] {
  const patterns = new Map<string, Buffer>();
  for (const value of values) {
    const variants = [value];
    if (value.includes("\n")) {
      const lines = value.replace(/\r\n/g, "\n").split("\n");
      variants.push(lines.join(stream === "input" ? "\r" : "\r\n"));
    }
    for (const variant of variants) {
      const bytes = Buffer.from(variant, "utf8");
      if (bytes.length >= MIN_REDACTED_BYTES) patterns.set(bytes.toString("latin1"), bytes);
    }
  }
  return [...patterns.values()];
}

/**
 * A fingerprint of a set of values (order and duplicates aside), so a periodic re-read can tell that nothing
 * changed without keeping a second copy of the values. Kept in memory only.
 */
export function secretsFingerprint(values: readonly string[]): string {
  const hash = createHash("sha256");
  for (const value of [...new Set(values)].sort()) hash.update(`${Buffer.byteLength(value)}:${value}`);
  return hash.digest("base64url");
}

/**
 * An Aho-Corasick automaton over the patterns' bytes (https://doi.org/10.1145/360825.360855). Linear in the
 * bytes scanned whatever the patterns are: an owner who sets a value of 64 KiB of `a` and runs `yes a` in the
 * sandbox must not be able to stall the proxy that every tenant's terminal goes through, which a
 * compare-at-every-offset scan (bytes × value length) would. Each state is the longest suffix of the stream
 * seen so far that is a prefix of some pattern. Built once per set of values; immutable, so the input and
 * output redactors of every session may share one.
 */
export class SecretMatcher {
  /** The longest pattern, in bytes (a redactor never holds more than this less one). */
  readonly longest: number;
  readonly patternCount: number;
  /** The state a failed transition falls back to (the longest proper suffix that is also a state). */
  private readonly fail: Int32Array;
  /** Length of the longest pattern that ends in this state (0: none). */
  readonly matchLength: Int32Array;
  /**
   * Bytes to hold in this state: the longest suffix that is a prefix of some pattern and could still grow into
   * it. A state at a pattern's end with nothing after it holds less than its depth, so a completed value is
   * released at once instead of one frame later.
   */
  readonly holdLength: Int32Array;
  /** The only child of a state with one child (the common case: patterns are long chains). -1: none. */
  private readonly onlyChild: Int32Array;
  /** The byte leading to {@link onlyChild}; -1 no child, -2 several (then {@link children}). */
  private readonly onlyChildByte: Int16Array;
  private readonly children = new Map<number, Map<number, number>>();

  private constructor(patterns: readonly Buffer[]) {
    let capacity = 1;
    for (const pattern of patterns) capacity += pattern.length;
    this.fail = new Int32Array(capacity);
    this.matchLength = new Int32Array(capacity);
    this.holdLength = new Int32Array(capacity);
    this.onlyChild = new Int32Array(capacity).fill(-1);
    this.onlyChildByte = new Int16Array(capacity).fill(-1);
    const depth = new Int32Array(capacity);
    let states = 1;
    for (const pattern of patterns) {
      let state = 0;
      for (const byte of pattern) {
        let next = this.child(state, byte);
        if (next < 0) {
          next = states++;
          depth[next] = depth[state]! + 1;
          this.addChild(state, byte, next);
        }
        state = next;
      }
      this.matchLength[state] = pattern.length;
    }
    this.longest = Math.max(0, ...patterns.map((p) => p.length));
    this.patternCount = patterns.length;

    // Breadth first, so a state's fallback (shallower) is complete before the state is.
    const queue = new Int32Array(states);
    let head = 0;
    let tail = 0;
    this.holdLength[0] = 0;
    this.forEachChild(0, (_byte, next) => {
      this.fail[next] = 0;
      queue[tail++] = next;
    });
    while (head < tail) {
      const state = queue[head++]!;
      const fallback = this.fail[state]!;
      this.matchLength[state] = Math.max(this.matchLength[state]!, this.matchLength[fallback]!);
      this.holdLength[state] = this.onlyChildByte[state] === -1 ? this.holdLength[fallback]! : depth[state]!;
      this.forEachChild(state, (byte, next) => {
        this.fail[next] = this.step(fallback, byte);
        queue[tail++] = next;
      });
    }
  }

  static compile(patterns: readonly Buffer[]): SecretMatcher {
    return new SecretMatcher(patterns);
  }

  private child(state: number, byte: number): number {
    const only = this.onlyChildByte[state]!;
    if (only === byte) return this.onlyChild[state]!;
    if (only === -2) return this.children.get(state)!.get(byte) ?? -1;
    return -1;
  }

  private addChild(state: number, byte: number, next: number): void {
    const only = this.onlyChildByte[state]!;
    if (only === -1) {
      this.onlyChildByte[state] = byte;
      this.onlyChild[state] = next;
      return;
    }
    if (only >= 0) {
      this.children.set(
        state,
        new Map([
          [only, this.onlyChild[state]!],
          [byte, next],
        ]),
      );
      this.onlyChildByte[state] = -2;
      this.onlyChild[state] = -1;
      return;
    }
    this.children.get(state)!.set(byte, next);
  }

  private forEachChild(state: number, visit: (byte: number, next: number) => void): void {
    const only = this.onlyChildByte[state]!;
    if (only >= 0) visit(only, this.onlyChild[state]!);
    else if (only === -2) for (const [byte, next] of this.children.get(state)!) visit(byte, next);
  }

  /** The state after `byte` (amortised constant time: each fallback shortens the state). */
  step(state: number, byte: number): number {
    for (;;) {
      const next = this.child(state, byte);
      if (next >= 0) return next;
      if (state === 0) return 0;
      state = this.fail[state]!;
    }
  }
}

/**
 * Compiled matchers by their patterns, shared while any redactor uses one: the sessions of a project, and a
 * session's input and output when no value spans lines, compile its values once. A few API keys compile in
 * 0.2 ms; the largest set a project may have (100 values of 64 KiB) took 0.7-0.9 s of the event loop and
 * keeps 144 MB (measured on 2 cores). A set no redactor uses any more is left to the garbage collector.
 */
export class SecretMatchers {
  private readonly compiled = new Map<string, WeakRef<SecretMatcher>>();
  private readonly collected = new FinalizationRegistry<string>((key) => {
    if (this.compiled.get(key)?.deref() === undefined) this.compiled.delete(key);
  });

  get(patterns: readonly Buffer[]): SecretMatcher {
    const hash = createHash("sha256");
    for (const pattern of [...patterns].sort(Buffer.compare))
      hash.update(`${pattern.length}:`).update(pattern);
    const key = hash.digest("base64url");
    const cached = this.compiled.get(key)?.deref();
    if (cached) return cached;
    const matcher = SecretMatcher.compile(patterns);
    this.compiled.set(key, new WeakRef(matcher));
    this.collected.register(matcher, key);
    return matcher;
  }

  /** Sets compiled and not yet collected. */
  get size(): number {
    return this.compiled.size;
  }
}

/**
 * Redacts one stream (a session's input, or its output) for the copies that are kept: the audit and the
 * recording. Bytes go in as they arrive (a value typed arrives one character per frame; output in whatever
 * chunks the sandbox wrote) and come out with every occurrence of a value replaced by
 * {@link REDACTION_MARKER}. Only the tail that is still the beginning of some value is held back, never more
 * than the longest value less one byte; the rest is released at once. Works on bytes, so a value's UTF-8
 * character split across frames is still found.
 *
 * Occurrences that overlap (two values sharing bytes, or a value repeated into itself) become one marker;
 * occurrences side by side, one marker each. A value's beginning that never completes (typed, then erased)
 * is released as it is. Only the exact bytes are found: an echo broken up by escape sequences (a line editor
 * redrawing the line, a prompt's colours) or a value the program transformed (masked, base64, split over
 * wrapped lines) is not.
 */
export class StreamRedactor {
  private state = 0;
  /** Bytes seen and not released; `held[0]` is at stream offset {@link heldFrom}. */
  private held: Buffer = EMPTY;
  private heldFrom = 0;
  /** Bytes seen in all. */
  private position = 0;
  /**
   * Stream offsets `[start, end)` covered by occurrences and not yet released: sorted, disjoint. The third
   * field: the occurrence's marker is out already (the hold bound forced its beginning out), so its rest
   * is dropped without another.
   */
  private covered: [number, number, boolean][] = [];

  constructor(private matcher: SecretMatcher = SecretMatcher.compile([])) {}

  /** Bytes held back now. */
  get holding(): number {
    return this.held.length;
  }

  /** The next bytes of the stream in; what can be released, redacted, out (empty while all of it is held). */
  push(chunk: Buffer): Buffer {
    if (this.matcher.patternCount === 0 && this.held.length === 0) {
      this.position += chunk.length;
      this.heldFrom = this.position;
      return chunk;
    }
    const { matchLength, holdLength } = this.matcher;
    for (let i = 0; i < chunk.length; i++) {
      this.state = this.matcher.step(this.state, chunk[i]!);
      this.position += 1;
      const length = matchLength[this.state]!;
      if (length > 0) this.cover(this.position - length, this.position);
    }
    const data = this.held.length === 0 ? chunk : Buffer.concat([this.held, chunk]);
    return this.release(data, this.position - holdLength[this.state]!);
  }

  /** Releases everything held (at the stream's end): a completed value as a marker, a beginning as it is. */
  flush(): Buffer {
    const out = this.release(this.held, this.position);
    this.state = 0;
    return out;
  }

  /**
   * Switches to another set of values (they were re-read and changed). What is held is scanned again with the
   * new set, and whatever that lets go is returned.
   */
  use(matcher: SecretMatcher): Buffer {
    // The rest of an occurrence whose marker is out stays covered: rescanned alone it would match nothing.
    const first = this.covered[0];
    const again = this.held.subarray(first?.[2] ? first[1] - this.heldFrom : 0);
    this.matcher = matcher;
    this.state = 0;
    this.covered = [];
    this.position -= again.length;
    this.heldFrom = this.position;
    this.held = EMPTY;
    return this.push(again);
  }

  private cover(start: number, end: number): void {
    const spans = this.covered;
    const last = spans.at(-1);
    if (last === undefined || last[1] <= start) {
      spans.push([start, end, false]);
      return;
    }
    last[0] = Math.min(last[0], start);
    last[1] = end;
    // A longer value may reach back over several earlier occurrences (shorter values inside it).
    while (spans.length > 1 && spans.at(-2)![1] > last[0]) {
      const [earlier] = spans.splice(-2, 1);
      last[0] = Math.min(last[0], earlier![0]);
      last[2] ||= earlier![2];
    }
  }

  /** Releases the stream up to offset `until` from `data` (which starts at {@link heldFrom}). */
  private release(data: Buffer, until: number): Buffer {
    const parts: Buffer[] = [];
    let from = this.heldFrom;
    const slice = (start: number, end: number) => data.subarray(start - this.heldFrom, end - this.heldFrom);
    while (this.covered.length > 0 && this.covered[0]![0] < until) {
      const span = this.covered[0]!;
      if (span[0] > from) parts.push(slice(from, span[0]));
      if (!span[2]) parts.push(MARKER);
      if (span[1] <= until) {
        from = span[1];
        this.covered.shift();
      } else {
        // An occurrence whose end may still begin another value (overlapping values): the hold bound lets
        // its marker out now; the rest of it stays covered and goes without another marker.
        from = until;
        span[0] = until;
        span[2] = true;
      }
    }
    if (until > from) parts.push(slice(from, until));
    this.held = Buffer.from(slice(until, this.position));
    this.heldFrom = until;
    if (parts.length === 1 && parts[0] !== MARKER) return parts[0]!;
    return parts.length === 0 ? EMPTY : Buffer.concat(parts);
  }
}
