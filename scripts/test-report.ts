// After `npm test`'s vitest run: where the time went. Reads vitest's JSON report, writes each file's and each
// test's wall time to test-artifacts/timings.json, prints the slowest files with their share of the total,
// then the one summary line any CI reads ('N passed, N failed, N skipped').
import { readFileSync, writeFileSync } from "node:fs";
import * as path from "node:path";

interface VitestReport {
  readonly numPassedTests: number;
  readonly numFailedTests: number;
  readonly numPendingTests: number;
  readonly numTodoTests: number;
  readonly testResults: readonly {
    readonly name: string;
    readonly startTime: number;
    readonly endTime: number;
    readonly status: string;
    readonly assertionResults: readonly {
      readonly fullName: string;
      readonly status: string;
      readonly duration?: number | null;
    }[];
  }[];
}

export interface FileTiming {
  readonly file: string;
  readonly seconds: number;
  readonly status: string;
  readonly tests: { readonly name: string; readonly seconds: number; readonly status: string }[];
}

/** Each file's wall time (its start to its end) and its tests', slowest first; paths relative to `root`. */
export function fileTimings(report: VitestReport, root: string): FileTiming[] {
  return report.testResults
    .map((file) => ({
      file: path.relative(root, file.name),
      seconds: Math.max(0, file.endTime - file.startTime) / 1000,
      status: file.status,
      tests: file.assertionResults
        .map((test) => ({ name: test.fullName, seconds: (test.duration ?? 0) / 1000, status: test.status }))
        .sort((a, b) => b.seconds - a.seconds),
    }))
    .sort((a, b) => b.seconds - a.seconds);
}

/** The table of the `count` slowest files: seconds, share of all files' time, and the running share. */
export function slowestTable(timings: readonly FileTiming[], count: number): string {
  const total = timings.reduce((sum, t) => sum + t.seconds, 0);
  let running = 0;
  const rows = timings.slice(0, count).map((t) => {
    running += t.seconds;
    const share = total > 0 ? (100 * t.seconds) / total : 0;
    const cumulative = total > 0 ? (100 * running) / total : 0;
    return `${t.seconds.toFixed(1).padStart(8)} s ${share.toFixed(1).padStart(5)} % ${cumulative.toFixed(1).padStart(5)} %  ${t.file}`;
  });
  return [
    `slowest ${Math.min(count, timings.length)} of ${timings.length} test files (${total.toFixed(0)} s of file time in all):`,
    `${"time".padStart(10)} ${"share".padStart(7)} ${"so far".padStart(7)}  file`,
    ...rows,
  ].join("\n");
}

/** From the first file's start to the last one's end: the run's wall time, files side by side or not. */
export function wallSeconds(report: Pick<VitestReport, "testResults">): number {
  if (report.testResults.length === 0) return 0;
  const start = Math.min(...report.testResults.map((file) => file.startTime));
  const end = Math.max(...report.testResults.map((file) => file.endTime));
  return Math.max(0, end - start) / 1000;
}

function main(): void {
  const root = path.resolve(import.meta.dirname, "..");
  const artifacts = path.join(root, "test-artifacts");
  const report = JSON.parse(readFileSync(path.join(artifacts, "vitest.json"), "utf8")) as VitestReport;
  const timings = fileTimings(report, root);
  writeFileSync(path.join(artifacts, "timings.json"), `${JSON.stringify(timings, null, 2)}\n`);
  console.log(slowestTable(timings, 15));
  const wall = wallSeconds(report);
  const fileTime = timings.reduce((sum, t) => sum + t.seconds, 0);
  if (wall > 0)
    console.log(
      `files ran ${wall.toFixed(0)} s of wall time for ${fileTime.toFixed(0)} s of file time (${(fileTime / wall).toFixed(1)} files at once on average)`,
    );
  const skipped = report.numPendingTests + report.numTodoTests;
  console.log(`tests: ${report.numPassedTests} passed, ${report.numFailedTests} failed, ${skipped} skipped`);
}

if (import.meta.filename === process.argv[1]) main();
