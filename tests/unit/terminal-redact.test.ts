import { describe, expect, it } from "vitest";
import {
  MIN_REDACTED_BYTES,
  REDACTION_MARKER as MARK,
  SecretMatcher,
  SecretMatchers,
  secretPatterns,
  secretsFingerprint,
  StreamRedactor,
  type TerminalStream,
} from "../../runtime/terminal/redact.js";

const redactor = (values: readonly string[], stream: TerminalStream = "input") =>
  new StreamRedactor(SecretMatcher.compile(secretPatterns(values, stream)));

/** Feeds `chunks` one by one; what was released after each, and all of it with the flush. */
function run(r: StreamRedactor, chunks: readonly (string | Buffer)[]) {
  const released: string[] = [];
  const held: number[] = [];
  const parts: Buffer[] = [];
  for (const chunk of chunks) {
    const out = r.push(typeof chunk === "string" ? Buffer.from(chunk) : chunk);
    parts.push(out);
    released.push(out.toString("latin1"));
    held.push(r.holding);
  }
  parts.push(r.flush());
  const bytes = Buffer.concat(parts);
  return { released, held, bytes, all: bytes.toString("utf8") };
}
const oneByOne = (text: string) => [...Buffer.from(text)].map((byte) => Buffer.from([byte]));

/** Every occurrence's bytes covered, overlapping ones merged: the redaction done on the whole text at once. */
function reference(text: Buffer, patterns: readonly Buffer[]): string {
  const spans: [number, number][] = [];
  for (let end = 1; end <= text.length; end++) {
    let longest = 0;
    for (const p of patterns)
      if (p.length <= end && text.subarray(end - p.length, end).equals(p))
        longest = Math.max(longest, p.length);
    if (longest === 0) continue;
    let start = end - longest;
    while (spans.length > 0 && spans.at(-1)![1] > start) start = Math.min(start, spans.pop()![0]);
    spans.push([start, end]);
  }
  const parts: Buffer[] = [];
  let from = 0;
  for (const [start, end] of spans) {
    parts.push(text.subarray(from, start), Buffer.from(MARK));
    from = end;
  }
  parts.push(text.subarray(from));
  return Buffer.concat(parts).toString("latin1");
}

describe("terminal audit redaction (issue 15)", () => {
  const key = "sk-ant-api03-Zq8fVx2LmN7pR4tYw0Kd";

  it("a value typed one character per frame leaves only the marker; the text around it is released at once", () => {
    const r = redactor([key]);
    const { released, held, all } = run(r, oneByOne(`export KEY=${key}; ls\r`));
    expect(all).toBe(`export KEY=${MARK}; ls\r`);
    expect(all).not.toContain(key.slice(0, 8));
    // Nothing of "export KEY=" is held: none of it begins the value.
    expect(released.slice(0, 11).join("")).toBe("export KEY=");
    // While the value is typed, its beginning is held (as long as it is one) and nothing of it is let out.
    expect(held.slice(11, 11 + key.length - 1)).toEqual([...Array(key.length - 1).keys()].map((i) => i + 1));
    expect(released.slice(11, 11 + key.length - 1).join("")).toBe("");
    // The last character completes it: the marker goes out in that frame, not one frame later.
    expect(released[11 + key.length - 1]).toBe(MARK);
    expect(released.slice(11 + key.length).join("")).toBe("; ls\r");
    expect(r.holding).toBe(0);
  });

  it("a value pasted in one frame, and split across output chunks anywhere, is replaced the same", () => {
    expect(run(redactor([key]), [`echo ${key}\r`]).all).toBe(`echo ${MARK}\r`);
    const output = `$ echo ${key}\r\n${key}\r\n$ `;
    for (let cut = 0; cut <= output.length; cut++) {
      const r = redactor([key], "output");
      expect(run(r, [output.slice(0, cut), output.slice(cut)]).all, `cut at ${cut}`).toBe(
        `$ echo ${MARK}\r\n${MARK}\r\n$ `,
      );
    }
  });

  it("a multi-byte UTF-8 value split inside its characters, frame by frame", () => {
    const value = "pässwörd-ключ-🔑";
    const bytes = Buffer.from(`a ${value} b`);
    expect(bytes.length).toBeGreaterThan(`a ${value} b`.length); // characters of 2, 3 and 4 bytes
    const { all, held } = run(redactor([value]), oneByOne(`a ${value} b`));
    expect(all).toBe(`a ${MARK} b`);
    expect(Math.max(...held)).toBe(Buffer.byteLength(value) - 1);
  });

  it("a beginning that turns out not to be a value is released unchanged, and no more than it is held", () => {
    const r = redactor([key]);
    const { released, held, all } = run(r, oneByOne("sk-ant-api03-Zq8fVx2LmN7pR4tYw0KX done"));
    expect(all).toBe("sk-ant-api03-Zq8fVx2LmN7pR4tYw0KX done");
    // Held up to the byte that breaks it, then all of it at once, unchanged.
    expect(held[key.length - 2]).toBe(key.length - 1);
    expect(released[key.length - 1]).toBe(key.slice(0, -1) + "X");
    // A value's beginning inside the break ("s" of "sk-" could restart it) is held only while it could.
    const again = run(redactor([key]), ["xxsk-ant", "-sk-ant-a", "pi03-Zq8fVx2LmN7pR4tYw0Kd!"]);
    expect(again.released).toEqual(["xx", "sk-ant-", MARK + "!"]);
    expect(again.held).toEqual([6, 8, 0]);
  });

  it("flush releases what is held: a beginning as typed; an empty stream stays empty", () => {
    const r = redactor([key]);
    expect(r.push(Buffer.from("echo sk-ant-api")).toString()).toBe("echo ");
    expect(r.holding).toBe(10);
    expect(r.flush().toString()).toBe("sk-ant-api");
    expect(r.holding).toBe(0);
    expect(r.flush().length).toBe(0);
    // After a flush the stream goes on from a clean state.
    expect(run(r, oneByOne(`${key}.`)).all).toBe(`${MARK}.`);
  });

  it("overlapping values become one marker, adjacent ones one each, and a value inside a longer one", () => {
    const a = "ABCD1234";
    const b = "1234WXYZ";
    expect(run(redactor([a, b]), oneByOne(`<${a}WXYZ>`)).all).toBe(`<${MARK}>`);
    expect(run(redactor([a, b]), oneByOne(`<${a}${b}>`)).all).toBe(`<${MARK}${MARK}>`);
    expect(run(redactor([a, b]), oneByOne(`<${a}${a}>`)).all).toBe(`<${MARK}${MARK}>`);
    // A value that is a prefix of another: the longer one wins when it completes, the shorter when it does not.
    const short = "tok-abcd";
    const long = "tok-abcdefgh";
    expect(run(redactor([short, long]), oneByOne(`${long} ${short} ${short}efg`)).all).toBe(
      `${MARK} ${MARK} ${MARK}efg`,
    );
    // A chain: the first value's marker goes out while its end is held (it begins the second); a third
    // completes inside the second, which then joins all three: still one marker.
    expect(run(redactor(["abcdef", "defghijk", "ghij"]), oneByOne("<abcdefghijk>")).released.join("")).toBe(
      `<${MARK}>`,
    );
    // A longer value around two shorter ones that each completed first.
    expect(run(redactor(["bcde", "ghij", "abcdefghijk"]), oneByOne("_abcdefghijk_")).all).toBe(`_${MARK}_`);
    expect(run(redactor(["bcde", "ghij", "abcdefghijk"]), oneByOne("_abcdefghijX_")).all).toBe(
      `_a${MARK}f${MARK}X_`,
    );
  });

  it("values shorter than the minimum are not redacted; line breaks match as the terminal carries them", () => {
    expect(MIN_REDACTED_BYTES).toBe(4);
    expect(run(redactor(["abc", "ls"]), ["ls abc\r"]).all).toBe("ls abc\r");
    expect(run(redactor(["abcd"]), ["ls abcd\r"]).all).toBe(`ls ${MARK}\r`);
    const pem = "-----BEGIN KEY-----\nMIIEvQIBADANBgkq\n-----END KEY-----\n";
    // A paste sends CR for each line break; the pty echoes CR LF.
    expect(run(redactor([pem], "input"), [pem.replace(/\n/g, "\r")]).all).toBe(MARK);
    expect(run(redactor([pem], "output"), [pem.replace(/\n/g, "\r\n")]).all).toBe(MARK);
    expect(run(redactor([pem], "output"), [pem]).all).toBe(MARK);
    expect(secretPatterns(["abc", "abcd", "abcd"], "input")).toEqual([Buffer.from("abcd")]);
  });

  it("matches the whole-text redaction for random values, texts and chunkings, holding less than the longest", () => {
    let seed = 7;
    const random = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    const word = (min: number, max: number) =>
      Array.from({ length: min + random(max - min + 1) }, () => "ab€"[random(3)]).join("");
    for (let round = 0; round < 400; round++) {
      const values = Array.from({ length: 1 + random(4) }, () => word(2, 9));
      const patterns = secretPatterns(values, "output");
      const longest = Math.max(0, ...patterns.map((p) => p.length));
      const text = Buffer.from(
        Array.from({ length: 6 }, () => word(0, 12)).join(values[random(values.length)]),
      );
      const chunks: Buffer[] = [];
      for (let at = 0; at < text.length;) {
        const size = 1 + random(8);
        chunks.push(text.subarray(at, at + size));
        at += size;
      }
      const r = new StreamRedactor(SecretMatcher.compile(patterns));
      const { held, bytes } = run(r, chunks);
      const context = JSON.stringify({ values, text: text.toString() });
      expect(bytes.toString("latin1"), context).toBe(reference(text, patterns));
      for (const h of held) expect(h, context).toBeLessThanOrEqual(Math.max(0, longest - 1));
    }
  });

  it("a value of 64 KiB of one byte, and a stream of that byte: linear time, the hold stays bounded", () => {
    const value = "a".repeat(64 * 1024);
    const r = redactor([value, "aaab"], "output");
    const chunk = Buffer.alloc(64 * 1024, 0x61);
    const started = process.hrtime.bigint();
    let out = "";
    for (let i = 0; i < 64; i++) {
      out += r.push(chunk).toString();
      expect(r.holding).toBeLessThan(value.length);
    }
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    // 4 MiB through a 64 KiB pattern: a compare at each offset would be 2^38 byte compares.
    expect(ms).toBeLessThan(2_000);
    out += r.flush().toString();
    // One occurrence overlapping itself all along: one marker, and never an `a`.
    expect(out).toBe(MARK);
  });

  it("a changed set of values rescans what is held; the fingerprint ignores order and duplicates", () => {
    const r = redactor([key]);
    expect(r.push(Buffer.from("new-secret-valu")).toString()).toBe("new-secret-valu");
    expect(r.push(Buffer.from("sk-ant-api03-")).length).toBe(0);
    // The key was removed and another value added: "sk-ant-api03-" is no longer held back.
    expect(r.use(SecretMatcher.compile(secretPatterns(["i03-Zq8f"], "input"))).toString()).toBe("sk-ant-ap");
    expect(r.holding).toBe(4);
    expect(run(r, ["Zq8f!"]).all).toBe(`${MARK}!`);
    expect(secretsFingerprint(["b", "a", "a"])).toBe(secretsFingerprint(["a", "b"]));
    // Compiled once per set: a session's input and output share it unless a value spans lines.
    const matchers = new SecretMatchers();
    const single = matchers.get(secretPatterns([key, "abcd"], "input"));
    expect(matchers.get(secretPatterns(["abcd", key], "output"))).toBe(single);
    const multi = [key, "line one\nline two"];
    expect(matchers.get(secretPatterns(multi, "input"))).not.toBe(
      matchers.get(secretPatterns(multi, "output")),
    );
    expect(matchers.size).toBe(3);
    expect(secretsFingerprint(["ab"])).not.toBe(secretsFingerprint(["a", "b"]));
  });
});
