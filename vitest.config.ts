import * as path from "node:path";
import { BaseSequencer, type TestSpecification } from "vitest/node";
import { configDefaults, defineConfig } from "vitest/config";
import { fileOrder, MICROVM_FILES } from "./tests/file-order.js";

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
  // Not host-global, but each failed once beside other files with the machine's two cores saturated: alone
  // until runs beside others show they hold. terminal-redaction typed a value before its shell had started
  // the command meant to read it (fixed); sbx-cli's cause is not yet found.
  "tests/integration/terminal-redaction.test.ts",
  "tests/integration/sbx-cli.test.ts",
];

/**
 * How many files run at once: most integration files wait on engines, containers and VMs rather than on
 * the CPU, so more than the machine's two cores (measured: tests/README.md, "Side by side"). `npm test` runs
 * the microVM lane beside the side-by-side files and gives those one worker fewer (scripts/test.sh).
 */
const workers = Number(process.env.TEST_WORKERS ?? 3);
if (!Number.isInteger(workers) || workers < 1)
  throw new Error(`TEST_WORKERS must be a whole number of files at once, not ${process.env.TEST_WORKERS}`);

/**
 * The files that boot microVMs (emulated here, each guest a whole core): one at a time, in a lane of their
 * own. `npm test` runs the lane as a vitest run of its own beside the side-by-side files; a plain `vitest
 * run` runs it after them.
 */
const MICROVM_LANE = MICROVM_FILES.map(([file]) => file);

/** The files in the order `fileOrder` plans (tests/file-order.ts), each project's after the one before. */
class Planned extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const byProject = new Map<string, TestSpecification[]>();
    for (const spec of sorted)
      byProject.set(spec.project.name, [...(byProject.get(spec.project.name) ?? []), spec]);
    return [...byProject.values()].flatMap((specs) => {
      const bySpec = new Map(specs.map((spec) => [path.relative(this.ctx.config.root, spec.moduleId), spec]));
      return fileOrder([...bySpec.keys()]).map((file) => bySpec.get(file)!);
    });
  }
}

export default defineConfig({
  test: {
    // tests/gcp-host: `npm run test:gcp-host` (vitest.gcp-host.config.ts), a VM boot of its own.
    exclude: [...configDefaults.exclude, "tests/gcp-host/**"],
    globalSetup: ["tests/global-setup.ts"],
    // Files run side by side on two cores, and microVMs run emulated here: a bound on a hang, never a goal.
    testTimeout: 300_000,
    hookTimeout: 300_000,
    reporters: ["default"],
    sequence: { sequencer: Planned },
    projects: [
      {
        extends: true,
        test: {
          name: "side-by-side",
          include: ["tests/**/*.test.ts"],
          exclude: [...configDefaults.exclude, "tests/gcp-host/**", ...HOST_GLOBAL, ...MICROVM_LANE],
          maxWorkers: workers,
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: "microvm",
          include: MICROVM_LANE,
          fileParallelism: false,
          maxWorkers: 1,
          sequence: { groupOrder: 1 },
        },
      },
      {
        extends: true,
        test: {
          name: "alone",
          include: HOST_GLOBAL,
          fileParallelism: false,
          maxWorkers: 1,
          sequence: { groupOrder: 2 },
        },
      },
    ],
  },
});
