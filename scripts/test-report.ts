// After `npm test`'s vitest runs: where the time went. Merges the runs' JSON reports (test-artifacts/vitest-
// *.json: the side-by-side files, the microVM lane beside them, the files that run alone) into
// test-artifacts/vitest.json, writes each file's and each test's wall time to test-artifacts/timings.json,
// prints the slowest files with their share of the total and the failed tests, then the one summary line any
// CI reads ('N passed, N failed, N skipped').
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import * as path from "node:path";

interface VitestReport {
  readonly numPassedTests: number;
  readonly numFailedTests: number;
  readonly numPendingTests: number;
  readonly numTodoTests: number;
  readonly startTime?: number;
  readonly success?: boolean;
  readonly testResults: readonly {
    readonly name: string;
    readonly startTime: number;
    readonly endTime: number;
    readonly status: string;
    readonly message?: string;
    readonly assertionResults: readonly {
      readonly fullName: string;
      readonly status: string;
      readonly duration?: number | null;
      readonly failureMessages?: readonly string[] | null;
    }[];
  }[];
}

/** The reports of runs made one beside or after another, as one: their files, their counts summed. */
export function mergeReports(parts: readonly VitestReport[]): VitestReport {
  const sum = (key: "numPassedTests" | "numFailedTests" | "numPendingTests" | "numTodoTests") =>
    parts.reduce((total, part) => total + part[key], 0);
  const starts = parts.map((part) => part.startTime).filter((t): t is number => typeof t === "number");
  return {
    ...Object.assign({}, ...parts),
    numPassedTests: sum("numPassedTests"),
    numFailedTests: sum("numFailedTests"),
    numPendingTests: sum("numPendingTests"),
    numTodoTests: sum("numTodoTests"),
    ...(starts.length > 0 ? { startTime: Math.min(...starts) } : {}),
    success: parts.every((part) => part.success !== false),
    testResults: parts.flatMap((part) => part.testResults),
  };
}

/**
 * Each failed test as `file > test: the first line of its error`, and each file that failed without a failed
 * test (its hooks, its import) with its message: what a CI log's tail must show, whichever run it was in.
 */
export function failedTests(report: Pick<VitestReport, "testResults">, root: string): string[] {
  const firstLine = (text: string | undefined) =>
    (text ?? "")
      .replace(/\u001b\[[0-9;]*m/g, "")
      .trim()
      .split("\n")[0]!
      .slice(0, 300);
  return report.testResults.flatMap((file) => {
    const name = path.relative(root, file.name);
    const failed = file.assertionResults.filter((test) => test.status === "failed");
    if (failed.length === 0)
      return file.status === "failed" ? [`${name}: ${firstLine(file.message) || "failed"}`] : [];
    return failed.map((test) => `${name} > ${test.fullName}: ${firstLine(test.failureMessages?.[0])}`);
  });
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
  const parts = readdirSync(artifacts)
    .filter((name) => /^vitest-.+\.json$/.test(name))
    .sort()
    .map((name) => JSON.parse(readFileSync(path.join(artifacts, name), "utf8")) as VitestReport);
  const report = mergeReports(parts);
  writeFileSync(path.join(artifacts, "vitest.json"), `${JSON.stringify(report)}\n`);
  const timings = fileTimings(report, root);
  writeFileSync(path.join(artifacts, "timings.json"), `${JSON.stringify(timings, null, 2)}\n`);
  console.log(slowestTable(timings, 15));
  const wall = wallSeconds(report);
  const fileTime = timings.reduce((sum, t) => sum + t.seconds, 0);
  if (wall > 0)
    console.log(
      `files ran ${wall.toFixed(0)} s of wall time for ${fileTime.toFixed(0)} s of file time (${(fileTime / wall).toFixed(1)} files at once on average)`,
    );
  const failed = failedTests(report, root);
  if (failed.length > 0) console.log(["failed:", ...failed.map((line) => `  ${line}`)].join("\n"));
  const skipped = report.numPendingTests + report.numTodoTests;
  console.log(`tests: ${report.numPassedTests} passed, ${report.numFailedTests} failed, ${skipped} skipped`);
}

if (import.meta.filename === process.argv[1]) main();
