// What the background processes of one project keep (runtime/api/exec-routes.ts): each its newest output up to
// its own bound, all of them together up to the project's, the newest of each kept. A table of ways output can
// come (one chatty process, many quiet ones, processes forgotten), with the bounds checked after every chunk.
// The routes themselves, with a real sandbox: tests/integration/sandbox-exec.test.ts.
import { describe, expect, it } from "vitest";
import { OutputLog, ProjectBackground } from "../../runtime/api/exec/execution.js";

const KiB = 1024;

/** A deterministic stream of chunk sizes (a linear congruential generator), 1 byte to 32 KiB. */
function* sizes(seed: number, count: number): Generator<number> {
  let state = seed;
  for (let i = 0; i < count; i++) {
    state = (state * 1_103_515_245 + 12_345) % 2 ** 31;
    yield 1 + (state % (32 * KiB));
  }
}

/** Everything one log kept, in order, as the route reads it from offset 0. */
const keptBytes = (log: OutputLog) => {
  const since = log.since(0);
  return { offset: since.offset, data: Buffer.concat(since.chunks.map((c) => c.data)) };
};

describe("a project's background output", () => {
  it.each([
    { name: "one process, chattier than its own bound", processes: 1, each: 4 * 1024 * KiB, chunks: 400 },
    { name: "four processes over the project's bound together", processes: 4, each: 1024 * KiB, chunks: 200 },
    { name: "twenty quiet processes", processes: 20, each: 256 * KiB, chunks: 50 },
  ])("$name: each keeps its newest bytes, the project at most its bound", ({ processes, each, chunks }) => {
    const capacity = 2 * 1024 * KiB;
    const project = new ProjectBackground(capacity);
    const logs = Array.from({ length: processes }, () => new OutputLog(each, project));
    const written = logs.map(() => [] as Buffer[]);
    let n = 0;
    for (const size of sizes(processes, chunks * processes)) {
      const which = n++ % processes;
      const chunk = Buffer.alloc(size, n % 251);
      written[which]!.push(chunk);
      logs[which]!.push(which % 2 ? "stderr" : "stdout", chunk);
      const kept = logs.reduce((sum, log) => sum + log.kept, 0);
      expect(project.kept).toBe(kept);
      expect(kept).toBeLessThanOrEqual(capacity);
      for (const log of logs) expect(log.kept).toBeLessThanOrEqual(each);
    }
    for (const [which, log] of logs.entries()) {
      const all = Buffer.concat(written[which]!);
      expect(log.total).toBe(all.length);
      // What is kept is the end of what was written, from the first offset not dropped.
      const { offset, data } = keptBytes(log);
      expect(offset).toBe(log.dropped);
      expect(data.equals(all.subarray(log.dropped))).toBe(true);
    }
  });

  it("a log forgotten gives its share back: a later one may keep up to the whole bound", () => {
    const project = new ProjectBackground(64 * KiB);
    const old = new OutputLog(64 * KiB, project);
    old.push("stdout", Buffer.alloc(64 * KiB));
    project.forget(old);
    expect(project.kept).toBe(0);
    const next = new OutputLog(64 * KiB, project);
    next.push("stdout", Buffer.alloc(64 * KiB));
    expect(next.kept).toBe(64 * KiB);
    expect(next.dropped).toBe(0);
  });
});
