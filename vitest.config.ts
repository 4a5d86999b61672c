import * as path from "node:path";
import { BaseSequencer, type TestSpecification } from "vitest/node";
import { configDefaults, defineConfig } from "vitest/config";
import { fileOrder } from "./tests/file-order.js";

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
  // The cluster's real node: its kubelet sets the host's kernel tunables at its start (put back once it is
  // Ready) and owns the host's /kubepods cgroups, and its Pods are whole sandboxes on this machine's two
  // cores; beside the microVM chain in a full run (session 57) a suspended guest's clock was not stepped
  // within its 20 s, and it booted cold.
  "tests/integration/kubernetes-node.test.ts",
  "tests/integration/kubernetes-real-tenant.test.ts",
  // Not host-global, but each failed once beside other files with the machine's two cores saturated: alone
  // until runs beside others show they hold. terminal-redaction typed a value before its shell had started
  // the command meant to read it (fixed); sbx-cli's cause is not yet found.
  "tests/integration/terminal-redaction.test.ts",
  "tests/integration/sbx-cli.test.ts",
];

/**
 * How many files run at once: most integration files wait on engines, containers and VMs rather than on
 * the CPU, so more than the machine's two cores (measured: tests/README.md, "Side by side").
 */
const workers = Number(process.env.TEST_WORKERS ?? 3);
if (!Number.isInteger(workers) || workers < 1)
  throw new Error(`TEST_WORKERS must be a whole number of files at once, not ${process.env.TEST_WORKERS}`);

const SIDE_BY_SIDE = "side-by-side";

/** The side-by-side files in the order `fileOrder` plans (tests/file-order.ts); the alone ones after them. */
class Planned extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const side = sorted.filter((spec) => spec.project.name === SIDE_BY_SIDE);
    const bySpec = new Map(side.map((spec) => [path.relative(this.ctx.config.root, spec.moduleId), spec]));
    return [
      ...fileOrder([...bySpec.keys()], workers).map((file) => bySpec.get(file)!),
      ...sorted.filter((spec) => spec.project.name !== SIDE_BY_SIDE),
    ];
  }
}

export default defineConfig({
  test: {
    // tests/gcp-host: `npm run test:gcp-host` (vitest.gcp-host.config.ts), a VM boot of its own.
    exclude: [...configDefaults.exclude, "tests/gcp-host/**"],
    globalSetup: ["tests/global-setup.ts"],
    setupFiles: ["tests/setup-worker.ts"],
    // Files run side by side on two cores, and microVMs run emulated here: a bound on a hang, never a goal.
    testTimeout: 300_000,
    hookTimeout: 300_000,
    reporters: ["default"],
    sequence: { sequencer: Planned },
    projects: [
      {
        extends: true,
        test: {
          name: SIDE_BY_SIDE,
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
