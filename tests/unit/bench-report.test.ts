import { mkdtempSync, rmSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { percentile, readReports, table, type BenchFile } from "../bench/report.js";

const dirs: string[] = [];
afterEach(() => dirs.splice(0).forEach((dir) => rmSync(dir, { recursive: true, force: true })));

describe("the bench table", () => {
  it("shows each figure with its tail, its baseline and the ratio to it", () => {
    const reports: BenchFile[] = [
      {
        bench: "exec",
        at: "2026-11-23T00:00:00Z",
        figures: [
          {
            figure: "exec true",
            unit: "ms",
            p50: 50,
            tail: { label: "p99", value: 120 },
            baseline: { label: "docker exec", p50: 100 },
            goal: "≤ 20 ms over",
          },
          { figure: "no baseline", unit: "req/s", p50: 1234.5 },
        ],
      },
    ];
    const lines = table(reports).split("\n");
    expect(lines[0]).toMatch(/^bench\s+\| figure\s+\| p50\s+\| tail/);
    expect(lines[2]).toMatch(
      /exec\s+\| exec true\s+\| 50\.0 ms\s+\| p99 120 ms\s+\| docker exec: 100 ms\s+\| 0\.50x\s+\| ≤ 20 ms over/,
    );
    expect(lines[3]).toMatch(/no baseline\s+\| 1235 req\/s\s+\|\s+\|\s+\|\s+\|/);
  });

  it("takes nearest-rank percentiles and reads what the benches left, none when there is nothing", () => {
    expect(percentile([5, 1, 4, 2, 3], 50)).toBe(3);
    expect(percentile([5, 1, 4, 2, 3], 99)).toBe(5);
    expect(percentile([], 50)).toBeNaN();
    const dir = mkdtempSync(path.join(os.tmpdir(), "bench-"));
    dirs.push(dir);
    expect(readReports(path.join(dir, "missing"))).toEqual([]);
  });
});
