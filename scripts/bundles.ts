// The bundles the platform runs from this checkout (esbuild; node_modules stay external, beside them): the
// provider plugins (dist/plugins/*.mjs, which bin/pulumi-resource-* run) and the runtime service
// (dist/runtime/main.mjs: `npm run local`, the GCP host's unit, the runtimes the tests and benches start). A
// bundle starts without a TypeScript loader in the process (tsx's costs the runtime 34 MiB of resident memory,
// measured in session 34) and without compiling two hundred modules at each start. Each file is written only
// when its text changed, and by rename, so a process starting meanwhile never reads half of one.
// `node --import tsx scripts/bundles.ts` builds them all (`npm run setup` does).
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { build, type BuildOptions } from "esbuild";
import { REPO_ROOT } from "../lib/toolchain.js";

/** The runtime's bundle; its source map beside it (`node --enable-source-maps` reads it for stack traces). */
export const RUNTIME_BUNDLE = path.join(REPO_ROOT, "dist", "runtime", "main.mjs");

/** How the runtime's bundle is started: Node.js with stack traces that name the TypeScript sources. */
export const RUNTIME_ARGV = ["--enable-source-maps", RUNTIME_BUNDLE];

const COMMON: BuildOptions = {
  absWorkingDir: REPO_ROOT,
  outExtension: { ".js": ".mjs" },
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  packages: "external",
  logLevel: "warning",
  write: false,
};

const BUNDLES = {
  plugins: {
    ...COMMON,
    entryPoints: { sandbox: "provider/main-sandbox.ts", command: "provider/main-command.ts" },
    outdir: "dist/plugins",
    sourcemap: "inline",
  },
  // The map apart and without the sources' text: the runtime keeps what it loads for its whole life.
  runtime: {
    ...COMMON,
    entryPoints: { main: "runtime/main.ts" },
    outdir: "dist/runtime",
    sourcemap: "external",
    sourcesContent: false,
  },
} satisfies Record<string, BuildOptions>;

/** Builds the bundles named (all of them by default); answers the files it wrote (unchanged ones are not). */
export async function buildBundles(
  names: readonly (keyof typeof BUNDLES)[] = ["plugins", "runtime"],
): Promise<string[]> {
  const written: string[] = [];
  for (const name of names) {
    const { outputFiles } = await build(BUNDLES[name]);
    for (const file of outputFiles ?? []) {
      let current: Buffer | undefined;
      try {
        current = readFileSync(file.path);
      } catch {
        // not built yet
      }
      if (current?.equals(file.contents)) continue;
      mkdirSync(path.dirname(file.path), { recursive: true });
      const partial = `${file.path}.${process.pid}.partial`;
      writeFileSync(partial, file.contents);
      renameSync(partial, file.path);
      written.push(path.relative(REPO_ROOT, file.path));
    }
  }
  return written;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const started = Date.now();
  const written = await buildBundles();
  console.log(
    `bundles built in ${Date.now() - started} ms: ${written.length > 0 ? written.join(", ") : "none changed"}`,
  );
}
