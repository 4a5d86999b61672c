// npm test's closing report (scripts/test-report.ts): each file's wall time, slowest first, with its share.
import { describe, expect, it } from "vitest";
import { fileTimings, slowestTable, wallSeconds } from "../../scripts/test-report.js";

const file = (name: string, seconds: number, tests: [string, number][]) => ({
  name: `/repo/tests/${name}`,
  startTime: 1_000,
  endTime: 1_000 + seconds * 1000,
  status: "passed",
  assertionResults: tests.map(([fullName, ms]) => ({ fullName, status: "passed", duration: ms })),
});

const report = {
  numPassedTests: 4,
  numFailedTests: 0,
  numPendingTests: 0,
  numTodoTests: 0,
  testResults: [
    file("unit/a.test.ts", 2, [["a one", 500]]),
    file("integration/b.test.ts", 6, [
      ["b one", 1000],
      ["b two", 4000],
    ]),
    file("unit/c.test.ts", 2, [["c one", null as unknown as number]]),
  ],
};

describe("the test timing report", () => {
  it("orders files by wall time and each file's tests by theirs, with paths relative to the checkout", () => {
    const timings = fileTimings(report, "/repo");
    expect(timings.map((t) => [t.file, t.seconds])).toEqual([
      ["tests/integration/b.test.ts", 6],
      ["tests/unit/a.test.ts", 2],
      ["tests/unit/c.test.ts", 2],
    ]);
    expect(timings[0]!.tests.map((t) => [t.name, t.seconds])).toEqual([
      ["b two", 4],
      ["b one", 1],
    ]);
    expect(timings[2]!.tests[0]!.seconds).toBe(0);
  });

  it("prints the slowest files with their share and the running share of the total", () => {
    const table = slowestTable(fileTimings(report, "/repo"), 2).split("\n");
    expect(table[0]).toBe("slowest 2 of 3 test files (10 s of file time in all):");
    expect(table[2]).toBe("     6.0 s  60.0 %  60.0 %  tests/integration/b.test.ts");
    expect(table[3]).toBe("     2.0 s  20.0 %  80.0 %  tests/unit/a.test.ts");
    expect(table).toHaveLength(4);
  });

  it("measures the run's wall time from the first file's start to the last one's end", () => {
    const sideBySide = {
      testResults: [
        { ...file("a.test.ts", 6, []), startTime: 1_000, endTime: 7_000 },
        { ...file("b.test.ts", 4, []), startTime: 2_000, endTime: 6_000 },
        { ...file("c.test.ts", 3, []), startTime: 7_000, endTime: 10_000 },
      ],
    };
    expect(wallSeconds(sideBySide)).toBe(9);
    expect(wallSeconds({ testResults: [] })).toBe(0);
  });
});
