// The figures a benchmark measured, in one shape for every benchmark: `npm run bench` (tests/bench/run.ts)
// prints them as one table and writes them as JSON, so two runs can be compared figure by figure.
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import * as path from "node:path";

/** Where each benchmark leaves its figures (one file per benchmark) and where the run's table goes. */
export const BENCH_DIR = path.resolve("test-artifacts", "bench");

export interface Figure {
  /** What was measured, e.g. "exec `true` round trip through the API". */
  readonly figure: string;
  readonly unit: "ms" | "s" | "MB/s" | "req/s" | "MiB";
  readonly p50: number;
  /** The upper percentile the benchmark has: p99 where it has enough samples, else p95 or max. */
  readonly tail?: { readonly label: "p95" | "p99" | "max"; readonly value: number };
  /** The same thing done the plain way in the same run (a bare `docker exec`, a 404, a `git push`). */
  readonly baseline?: { readonly label: string; readonly p50: number };
  /** The target or moonshot, as text ("≤ 150 ms p99"). */
  readonly goal?: string;
  /** How many samples the percentiles are over. */
  readonly samples?: number;
}

/** How long `what` takes, in milliseconds. */
export async function timed(what: () => Promise<unknown>): Promise<number> {
  const started = performance.now();
  await what();
  return performance.now() - started;
}

/** Milliseconds as the benchmarks print them: `12.3 ms`. */
export const ms = (value: number) => `${value.toFixed(1)} ms`;

/** Percentile over samples (nearest rank). */
export function percentile(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? Number.NaN;
}

/**
 * Records the figures of benchmark `name` (replacing what an earlier run of it left), for the table
 * `npm run bench` prints at its end.
 */
export function report(name: string, figures: readonly Figure[]): void {
  mkdirSync(BENCH_DIR, { recursive: true });
  writeFileSync(
    path.join(BENCH_DIR, `${name}.json`),
    `${JSON.stringify({ bench: name, at: new Date().toISOString(), figures }, null, 2)}\n`,
  );
}

export interface BenchFile {
  readonly bench: string;
  readonly at: string;
  readonly figures: readonly Figure[];
}

/** Every benchmark's figures left in BENCH_DIR (the table's rows). */
export function readReports(dir = BENCH_DIR): BenchFile[] {
  let files: string[];
  try {
    files = readdirSync(dir).filter((file) => file.endsWith(".json"));
  } catch {
    return [];
  }
  return files.sort().map((file) => JSON.parse(readFileSync(path.join(dir, file), "utf8")) as BenchFile);
}

const number = (value: number) =>
  Number.isNaN(value)
    ? "-"
    : value >= 100
      ? value.toFixed(0)
      : value >= 10
        ? value.toFixed(1)
        : value.toFixed(2);

/** The one table: figure, p50, tail, baseline p50, ratio, goal. */
export function table(reports: readonly BenchFile[]): string {
  const rows = [["bench", "figure", "p50", "tail", "baseline (p50)", "ratio", "goal"]];
  for (const { bench, figures } of reports)
    for (const f of figures)
      rows.push([
        bench,
        f.figure,
        `${number(f.p50)} ${f.unit}`,
        f.tail ? `${f.tail.label} ${number(f.tail.value)} ${f.unit}` : "",
        f.baseline ? `${f.baseline.label}: ${number(f.baseline.p50)} ${f.unit}` : "",
        f.baseline && f.baseline.p50 > 0 ? `${(f.p50 / f.baseline.p50).toFixed(2)}x` : "",
        f.goal ?? "",
      ]);
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => row[column]!.length)));
  return rows
    .map((row, index) => {
      const line = row.map((cell, column) => cell.padEnd(widths[column]!)).join(" | ");
      return index === 0 ? `${line}\n${widths.map((w) => "-".repeat(w)).join("-|-")}` : line;
    })
    .join("\n");
}
