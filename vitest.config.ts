import { configDefaults, defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["tests/**/*.test.ts"],
    // tests/gcp-host: `npm run test:gcp-host` (vitest.gcp-host.config.ts), a VM boot of its own.
    exclude: [...configDefaults.exclude, "tests/gcp-host/**"],
    globalSetup: ["tests/global-setup.ts"],
    testTimeout: 120_000,
    hookTimeout: 300_000,
    // Integration tests share one Docker engine, one Squid and host iptables chains; running files
    // in parallel would make their assertions about "nothing left behind" race each other.
    fileParallelism: false,
    reporters: ["default"],
  },
});
