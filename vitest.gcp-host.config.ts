import { configDefaults, defineConfig } from "vitest/config";

// `npm run test:gcp-host` (scripts/test-gcp-host.sh): the GCP host's startup script booted for real. Not part of
// `npm test` (vitest.config.ts excludes tests/gcp-host): it takes minutes and a Docker engine of its own.
export default defineConfig({
  test: {
    include: ["tests/gcp-host/**/*.test.ts"],
    exclude: [...configDefaults.exclude],
    globalSetup: ["tests/global-setup.ts"],
    testTimeout: 300_000,
    hookTimeout: 60 * 60_000,
    fileParallelism: false,
    reporters: ["default"],
  },
});
