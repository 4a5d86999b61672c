// Bundles the TypeScript provider plugins into dist/plugins/*.mjs; bin/pulumi-resource-* run them.
// node_modules stay external: the plugins run from this checkout, next to its dependencies.
import { build } from "esbuild";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const started = Date.now();
await build({
  absWorkingDir: root,
  entryPoints: { sandbox: "provider/main-sandbox.ts", command: "provider/main-command.ts" },
  outdir: "dist/plugins",
  outExtension: { ".js": ".mjs" },
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  packages: "external",
  sourcemap: "inline",
  logLevel: "warning",
});
console.log(`plugins built into dist/plugins in ${Date.now() - started} ms`);
