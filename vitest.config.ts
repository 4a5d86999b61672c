import { BaseSequencer, type TestSpecification } from "vitest/node";
import { configDefaults, defineConfig } from "vitest/config";

/**
 * Files that act on what the whole machine has one of, or count it all: they run alone, one at a time,
 * after every other file (each with why). Every other integration file has its own instance, subnet pool,
 * SSH ports, Squid and directories (tests/unit/test-isolation.test.ts checks the pools and ports), and takes
 * the machine's one fake internet in turns (tests/helpers/world.ts), so those run side by side.
 */
export const HOST_GLOBAL = [
  // Kills and restarts dockerd and the processes every platform on the machine uses.
  "tests/chaos/chaos.test.ts",
  "tests/chaos/host-faults.test.ts",
  // Compare the host's whole rule set (every chain) before and after.
  "tests/integration/host-baseline.test.ts",
  "tests/integration/platform-local.test.ts",
  // Run the set-up itself against the machine's cache.
  "tests/integration/scripts.test.ts",
  // Count every provider or plugin process and every Pulumi temporary directory on the machine.
  "tests/integration/shared-provider.test.ts",
  "tests/integration/tenant-stack-proof.test.ts",
  // Not host-global, but each failed once beside other files with the machine's two cores saturated, for a
  // cause not yet found (the note names them): alone until it is.
  "tests/integration/terminal-redaction.test.ts",
  "tests/integration/sbx-cli.test.ts",
];

/**
 * The longest files, longest first (measured side by side: tests/README.md, "Side by side"): they start
 * first, so none of them begins last and keeps the run going alone. vitest's own order (a file's duration
 * in its cache, else its size) would start attacks-microvm.test.ts, five lines long, last on a fresh clone.
 * The three that boot microVMs take turns (tests/helpers/microvm-turn.ts) and are one chain, the run's
 * longest: the first starts at once, and the other two a few container files later, to wait for their turn
 * as little as they can.
 */
const LONGEST_FIRST = [
  "tests/security/attacks-microvm.test.ts",
  "tests/integration/warm-pool.test.ts",
  "tests/integration/rollout.test.ts",
  "tests/integration/schemathesis.test.ts",
  "tests/security/attacks.test.ts",
  "tests/integration/microvm-tenant.test.ts",
  "tests/integration/microvm.test.ts",
  "tests/integration/api-conformance.test.ts",
  "tests/integration/sandbox-image.test.ts",
];

/** vitest's order, with LONGEST_FIRST moved to the front in their order. */
class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (file: TestSpecification) => {
      const at = LONGEST_FIRST.findIndex((name) => file.moduleId.endsWith(`/${name}`));
      return at === -1 ? LONGEST_FIRST.length : at;
    };
    return (await super.sort(files)).sort((a, b) => rank(a) - rank(b));
  }
}

/**
 * How many files run at once: most integration files wait on engines, containers and VMs rather than on
 * the CPU, so more than the machine's two cores (measured: tests/README.md, "Side by side").
 */
const workers = Number(process.env.TEST_WORKERS ?? 3);
if (!Number.isInteger(workers) || workers < 1)
  throw new Error(`TEST_WORKERS must be a whole number of files at once, not ${process.env.TEST_WORKERS}`);

export default defineConfig({
  test: {
    // tests/gcp-host: `npm run test:gcp-host` (vitest.gcp-host.config.ts), a VM boot of its own.
    exclude: [...configDefaults.exclude, "tests/gcp-host/**"],
    globalSetup: ["tests/global-setup.ts"],
    // Files run side by side on two cores, and microVMs run emulated here: a bound on a hang, never a goal.
    testTimeout: 300_000,
    hookTimeout: 300_000,
    reporters: ["default"],
    sequence: { sequencer: LongestFirst },
    projects: [
      {
        extends: true,
        test: {
          name: "side-by-side",
          include: ["tests/**/*.test.ts"],
          exclude: [...configDefaults.exclude, "tests/gcp-host/**", ...HOST_GLOBAL],
          maxWorkers: workers,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: "alone",
          include: HOST_GLOBAL,
          fileParallelism: false,
          maxWorkers: 1,
          sequence: { groupOrder: 1 },
        },
      },
    ],
  },
});
