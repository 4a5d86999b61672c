/**
 * The order in which the side-by-side files start (vitest.config.ts's sequencer). Pure, so that a unit test
 * can check it (tests/unit/file-order.test.ts).
 */

/**
 * The files that boot microVMs, in the order they take their turns (tests/helpers/microvm-turn.ts), with
 * what each took beside other files on two cores (seconds; session 22's full run and CI's of session 21).
 */
export const MICROVM_FILES: ReadonlyArray<readonly [file: string, seconds: number]> = [
  ["tests/security/attacks-microvm.test.ts", 1_200],
  ["tests/integration/microvm-tenant.test.ts", 600],
  ["tests/integration/microvm.test.ts", 330],
  // A microVM made, paused and woken with the runtime killed in each, and deleted.
  ["tests/chaos/microvm-chaos.test.ts", 150],
];

/**
 * The longest of the other files, longest first, with their times beside others: they start first, so none
 * of them begins last and keeps the run going alone. vitest's own order (a file's duration in its cache,
 * else its size) would start a short file with long tests last on a fresh clone.
 */
export const LONGEST_FIRST: ReadonlyArray<readonly [file: string, seconds: number]> = [
  ["tests/integration/warm-pool.test.ts", 700],
  ["tests/integration/rollout.test.ts", 500],
  ["tests/security/attacks.test.ts", 280],
  ["tests/integration/schemathesis.test.ts", 200],
  // Eleven tenants made and deleted (ten forks at once, then two more); 150 s alone here.
  ["tests/integration/fork.test.ts", 200],
  ["tests/integration/sandbox-image.test.ts", 150],
  ["tests/integration/credential-gateway.test.ts", 120],
  ["tests/integration/api-conformance.test.ts", 90],
];

/** What a file not named above is taken to take (the others' mean beside other files, session 21). */
export const OTHER_FILE_SECONDS = 35;

/**
 * `files` (repository paths, in vitest's order) in the order they should start with `workers` files at
 * once. The microVM files are one chain (one at a time, each waiting for the turn before it): the first
 * starts at once, and each later one is placed where the other files before it should keep the remaining
 * workers busy until the one before it ends, so that it does not hold a worker waiting for its turn and
 * the chain never stands still. A file's time is the tables' (not vitest's cache of the last run, which holds
 * a microVM file's wait for its turn, and is empty on a fresh clone): the order is the same on every machine.
 */
export function fileOrder(files: readonly string[], workers: number): string[] {
  const known = new Map([...MICROVM_FILES, ...LONGEST_FIRST]);
  const time = (file: string) => known.get(file) ?? OTHER_FILE_SECONDS;
  const chain = MICROVM_FILES.map(([file]) => file).filter((file) => files.includes(file));
  const rank = (file: string) => {
    const at = LONGEST_FIRST.findIndex(([name]) => name === file);
    return at === -1 ? LONGEST_FIRST.length : at;
  };
  const others = files.filter((file) => !chain.includes(file)).sort((a, b) => rank(a) - rank(b));
  if (chain.length === 0) return others;
  // With one worker there is nothing beside the chain: it goes first, one file after another.
  const beside = Math.max(1, workers - 1);
  const order = [chain[0]!];
  let chainEnds = time(chain[0]!);
  let othersWall = 0;
  let next = 1;
  for (const file of others) {
    while (next < chain.length && (workers === 1 || othersWall >= chainEnds)) {
      order.push(chain[next]!);
      chainEnds += time(chain[next]!);
      next += 1;
    }
    order.push(file);
    othersWall += time(file) / beside;
  }
  order.push(...chain.slice(next));
  return order;
}
