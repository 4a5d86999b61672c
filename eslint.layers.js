// The project's layers, bottom to top. A file may import its own layer and those below it, never one above:
//   lib/         host primitives: Docker client, IP arithmetic, files, processes, daemons, host config
//   provider/    the Pulumi provider plugin (resource CRUD against the host)        → lib
//   sandbox-image/ the sandbox image's build                                        → lib
//   components/  Pulumi ComponentResources and the provider's resource classes     → provider (types), lib
//   stacks/, policy/  Pulumi programs (platform, tenant), config schemas, policies  → components, provider, lib
//   runtime/     the service: API, reconciler, terminal proxy                        → everything below
// tests/, scripts/ and web/ stand outside the layers. Used by eslint.config.js and tests/unit/layering.test.ts.
//
// Inside runtime/, the same rule between its folders, bottom to top (RUNTIME_LAYERS):
//   store/         every SQL statement of the runtime: the database, its migrations, one module per aggregate
//   runtime/*.ts   the foundations: secrets, errors, limits, the microVM probe, the stack file (main.ts,
//                  server.ts, health.ts, metrics.ts and stack-state.ts stand above the folders they read)
//   sandbox/       reaching a sandbox: exec, files, processes, SSH, its backup daemon
//   gcp/, terminal/  the cloud's clients; terminals (attachments and the proxy)
//   kubernetes/    the cluster: its client, exec, Pods, backups from outside, the SSH gateway
//   tenants/       the domain: desired state and stacks, the warm pool, drift, snapshots, secrets, orphans
//   backends/, gateway/, host/   one seam per backend; the credential gateway; the local platform's bring-up
//   reconciler/, jobs/           the workers that carry operations out, and the background jobs
//   api/           the HTTP API

/** Each layer with the folders it must never import from. */
export const LAYERS = [
  { layer: "lib", forbidden: ["provider", "sandbox-image", "components", "stacks", "policy", "runtime"] },
  { layer: "provider", forbidden: ["sandbox-image", "components", "stacks", "policy", "runtime"] },
  { layer: "sandbox-image", forbidden: ["provider", "components", "stacks", "policy", "runtime"] },
  { layer: "components", forbidden: ["sandbox-image", "stacks", "policy", "runtime"] },
  { layer: "stacks", forbidden: ["sandbox-image", "runtime"] },
  { layer: "policy", forbidden: ["sandbox-image", "runtime"] },
];

/** runtime/'s folders, bottom to top; folders of one level may not import each other either. */
const RUNTIME_LEVELS = [
  ["store"],
  ["sandbox"],
  ["gcp", "terminal"],
  ["kubernetes"],
  ["tenants"],
  ["backends", "gateway", "host"],
  ["reconciler", "jobs"],
  ["api"],
];
const RUNTIME_FOLDERS = RUNTIME_LEVELS.flat();

/** runtime/'s files that import no folder of it but the store (everything else there imports them). */
export const RUNTIME_FOUNDATIONS = [
  "errors",
  "http-limits",
  "microvm-support",
  "process-errors",
  "secrets",
  "stack-file",
];

/** Each of runtime/'s folders with the folders of runtime/ it must never import from. */
export const RUNTIME_LAYERS = RUNTIME_LEVELS.flatMap((level, i) =>
  level.map((folder) => ({
    layer: `runtime/${folder}`,
    forbidden: [...level.filter((f) => f !== folder), ...RUNTIME_LEVELS.slice(i + 1).flat()],
  })),
);

/** One `no-restricted-imports` block: `files` (`who`) may not reach into any of `forbidden` by a relative import. */
function restricted(files, who, forbidden, above = "a layer above or beside it") {
  return {
    files,
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: forbidden.map((folder) => ({
            // A relative path that climbs into the folder: ../runtime/x, ../../runtime/x, ./api/x.
            regex: `^(\\.\\./)+${folder}(/|$)|^\\./${folder}/`,
            message: `${who} may not import ${folder}/, ${above} (see eslint.layers.js)`,
          })),
        },
      ],
    },
  };
}

/** One ESLint config block per layer: `no-restricted-imports` with a regex per forbidden folder. */
export const layerRules = [
  ...LAYERS.map(({ layer, forbidden }) => restricted([`${layer}/**/*.ts`], `${layer}/`, forbidden)),
  ...RUNTIME_LAYERS.map(({ layer, forbidden }) => restricted([`${layer}/**/*.ts`], `${layer}/`, forbidden)),
  restricted(
    RUNTIME_FOUNDATIONS.map((file) => `runtime/${file}.ts`),
    "runtime/'s foundations",
    RUNTIME_FOLDERS.filter((folder) => folder !== "store"),
    "a folder above them",
  ),
];
