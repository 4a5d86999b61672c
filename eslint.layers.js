// The project's layers, bottom to top. A file may import its own layer and those below it, never one above:
//   lib/         host primitives: Docker client, IP arithmetic, files, processes, daemons, host config
//   provider/    the Pulumi provider plugin (resource CRUD against the host)        → lib
//   sandbox-image/ the sandbox image's build                                        → lib
//   components/  Pulumi ComponentResources and the provider's resource classes     → provider (types), lib
//   stacks/, policy/  Pulumi programs (platform, tenant), config schemas, policies  → components, provider, lib
//   runtime/     the service: API, reconciler, terminal proxy                        → everything below
// tests/, scripts/ and web/ stand outside the layers. Used by eslint.config.js and tests/unit/layering.test.ts.

/** Each layer with the folders it must never import from. */
export const LAYERS = [
  { layer: "lib", forbidden: ["provider", "sandbox-image", "components", "stacks", "policy", "runtime"] },
  { layer: "provider", forbidden: ["sandbox-image", "components", "stacks", "policy", "runtime"] },
  { layer: "sandbox-image", forbidden: ["provider", "components", "stacks", "policy", "runtime"] },
  { layer: "components", forbidden: ["sandbox-image", "stacks", "policy", "runtime"] },
  { layer: "stacks", forbidden: ["sandbox-image", "runtime"] },
  { layer: "policy", forbidden: ["sandbox-image", "runtime"] },
];

/** One ESLint config block per layer: `no-restricted-imports` with a regex per forbidden folder. */
export const layerRules = LAYERS.map(({ layer, forbidden }) => ({
  files: [`${layer}/**/*.ts`],
  rules: {
    "no-restricted-imports": [
      "error",
      {
        patterns: forbidden.map((folder) => ({
          // A relative path that climbs out of the layer into the folder: ../runtime/x, ../../runtime/x.
          regex: `^(\\.\\./)+${folder}(/|$)`,
          message: `${layer}/ may not import ${folder}/, a layer above or beside it (see eslint.layers.js)`,
        })),
      },
    ],
  },
}));
