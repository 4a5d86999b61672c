/**
 * The order in which the test files start (vitest.config.ts's sequencer). Pure, so that a unit test
 * can check it (tests/unit/file-order.test.ts).
 */

/**
 * The files that boot microVMs: their own lane (vitest.config.ts's "microvm" project), one at a time, in this
 * order, in a vitest run of its own beside the side-by-side files (scripts/test.sh). Here they run emulated
 * (TCG), each guest a whole core; with each, what it took beside other files on two cores (seconds; session
 * 23's first full run).
 */
export const MICROVM_FILES: ReadonlyArray<readonly [file: string, seconds: number]> = [
  ["tests/security/attacks-microvm.test.ts", 1_015],
  ["tests/integration/microvm-tenant.test.ts", 575],
  ["tests/integration/microvm.test.ts", 230],
];

/**
 * The longest of the side-by-side files, longest first, with their times beside others (seconds; session 23's
 * first full run): they start first, so none of them begins last and keeps the run going alone. vitest's own
 * order (a file's duration in its cache, else its size) would start a short file with long tests last on a
 * fresh clone.
 */
export const LONGEST_FIRST: ReadonlyArray<readonly [file: string, seconds: number]> = [
  ["tests/integration/rollout.test.ts", 660],
  ["tests/integration/warm-pool.test.ts", 600],
  ["tests/integration/api-conformance.test.ts", 250],
  ["tests/security/attacks.test.ts", 240],
  ["tests/integration/sdk.test.ts", 190],
  ["tests/integration/sandbox-image.test.ts", 180],
  ["tests/integration/credential-gateway.test.ts", 115],
  ["tests/integration/schemathesis.test.ts", 110],
];

/**
 * `files` (repository paths, in vitest's order) in the order they should start: the longest known files
 * first, longest first, so that none of them begins last and keeps the run going alone; the microVM files in
 * their lane's order; the rest in vitest's order. A file's time is the tables' (not vitest's cache of the last
 * run, which is empty on a fresh clone): the order is the same on every machine.
 */
export function fileOrder(files: readonly string[]): string[] {
  const ranked = [...MICROVM_FILES, ...LONGEST_FIRST].map(([file]) => file);
  const rank = (file: string) => {
    const at = ranked.indexOf(file);
    return at === -1 ? ranked.length : at;
  };
  return [...files].sort((a, b) => rank(a) - rank(b));
}
