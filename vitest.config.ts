import { configDefaults, defineConfig } from "vitest/config";

// The microVM tests (issue 19) boot real VMs under TCG. Once in about six runs a VM's console stayed empty for
// its whole 120 s boot budget, cause not yet found (a KVM guest the probe test killed, still dying in the
// kernel, is the suspect): until that is understood they run as `npm run microvm`, not in `npm test`.
const MICROVM = "tests/integration/microvm.test.ts";

export default defineConfig({
  test: {
    include: ["tests/**/*.test.ts"],
    exclude: [...configDefaults.exclude, ...(process.env.MICROVM_TESTS ? [] : [MICROVM])],
    globalSetup: ["tests/global-setup.ts"],
    testTimeout: 120_000,
    hookTimeout: 300_000,
    // Integration tests share one Docker engine, one Squid and host iptables chains; running files
    // in parallel would make their assertions about "nothing left behind" race each other.
    fileParallelism: false,
    reporters: ["default"],
  },
});
