import { execFile } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

/**
 * The nearest directory at or above `from` that holds a package.json: the checkout's root, from this file
 * (`lib/toolchain.ts`) as from the runtime's bundle (`dist/runtime/main.mjs`, scripts/bundles.ts) that holds it.
 */
export function checkoutRoot(from: string): string {
  for (let dir = from; ; dir = path.dirname(dir)) {
    if (existsSync(path.join(dir, "package.json"))) return dir;
    if (path.dirname(dir) === dir) throw new Error(`no package.json at or above ${from}: not in a checkout`);
  }
}

/** The checkout's root: every path the platform reads from its checkout starts here. */
export const REPO_ROOT = checkoutRoot(path.dirname(fileURLToPath(import.meta.url)));

/** The platform's version (package.json): what `sbx --version` prints and the MCP server tells its clients. */
export const platformVersion = (): string =>
  (JSON.parse(readFileSync(path.join(REPO_ROOT, "package.json"), "utf8")) as { version: string }).version;

/** Where the toolchain and other build products are cached, outside the repo (scripts/lib.sh agrees). */
export function cacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  return (
    env.AGENT_SANDBOX_CACHE ??
    path.join(env.XDG_CACHE_HOME ?? path.join(os.homedir(), ".cache"), "agent-sandbox")
  );
}

/** The version a wrapper module (`scripts/toolchain/...`) requires of `module` (scripts/lib.sh agrees). */
function pinnedModuleVersion(goModFile: string, module: string): string {
  const goMod = readFileSync(path.join(REPO_ROOT, goModFile), "utf8");
  const line = goMod.split("\n").find((text) => text.startsWith(`require ${module} v`));
  const version = line?.slice(`require ${module} v`.length).trim();
  if (!version || !/^[0-9.]+$/.test(version)) throw new Error(`${goModFile} does not pin ${module}`);
  return version;
}

/** The pinned CLI version: the wrapper module's requirement on `pkg/v3` (scripts/toolchain/go.mod). */
export function pinnedPulumiVersion(): string {
  return pinnedModuleVersion("scripts/toolchain/go.mod", "github.com/pulumi/pulumi/pkg/v3");
}

/** The pinned actionlint: its wrapper module's requirement (scripts/toolchain/actionlint/go.mod). */
export function pinnedActionlintVersion(): string {
  return pinnedModuleVersion("scripts/toolchain/actionlint/go.mod", "github.com/rhysd/actionlint");
}

/**
 * The actionlint binary scripts/setup.sh builds into the cache (`actionlint-v<version>/bin`); throws
 * naming the path and the fix when it is not there.
 */
export function actionlintBin(env: NodeJS.ProcessEnv = process.env): string {
  const version = pinnedActionlintVersion();
  const bin = path.join(cacheRoot(env), `actionlint-v${version}`, "bin", "actionlint");
  if (!existsSync(bin))
    throw new Error(`actionlint v${version} not found at ${bin}; run 'npm run setup' (it builds it with Go)`);
  return bin;
}

/** The pinned fake-gcs-server: its wrapper module's requirement (scripts/toolchain/fake-gcs-server/go.mod). */
export function pinnedFakeGcsVersion(): string {
  return pinnedModuleVersion("scripts/toolchain/fake-gcs-server/go.mod", "github.com/fsouza/fake-gcs-server");
}

/**
 * The fake-gcs-server binary scripts/setup.sh builds into the cache (`fake-gcs-server-v<version>/bin`), the
 * GCS API of the tests; throws naming the path and the fix when it is not there.
 */
export function fakeGcsBin(env: NodeJS.ProcessEnv = process.env): string {
  const version = pinnedFakeGcsVersion();
  const bin = path.join(cacheRoot(env), `fake-gcs-server-v${version}`, "bin", "fake-gcs-server");
  if (!existsSync(bin))
    throw new Error(
      `fake-gcs-server v${version} not found at ${bin}; run 'npm run setup' (it builds it with Go)`,
    );
  return bin;
}

/** The pinned Kubernetes control plane: its wrapper module's requirement (scripts/toolchain/kubernetes/go.mod). */
export function pinnedKubernetesVersion(): string {
  return pinnedModuleVersion("scripts/toolchain/kubernetes/go.mod", "k8s.io/kubernetes");
}

/** The pinned kwok (scripts/toolchain/kwok/go.mod). */
export function pinnedKwokVersion(): string {
  return pinnedModuleVersion("scripts/toolchain/kwok/go.mod", "sigs.k8s.io/kwok");
}

/** A binary scripts/setup.sh built into `<cache>/<dir>/bin`; throws naming the path and the fix when missing. */
function cachedBin(dir: string, command: string, env: NodeJS.ProcessEnv): string {
  const bin = path.join(cacheRoot(env), dir, "bin", command);
  if (!existsSync(bin))
    throw new Error(`${command} (${dir}) not found at ${bin}; run 'npm run setup' (it builds it with Go)`);
  return bin;
}

/** The pinned Pebble, Let's Encrypt's ACME test server (scripts/toolchain/pebble/go.mod). */
export function pinnedPebbleVersion(): string {
  return pinnedModuleVersion("scripts/toolchain/pebble/go.mod", "github.com/letsencrypt/pebble/v2");
}

/** Pebble's ACME server or its DNS stand-in, built by scripts/setup.sh into `pebble-v<version>/bin`. */
export function pebbleBin(
  command: "pebble" | "pebble-challtestsrv",
  env: NodeJS.ProcessEnv = process.env,
): string {
  return cachedBin(`pebble-v${pinnedPebbleVersion()}`, command, env);
}

/** A command of the tests' Kubernetes control plane, built by scripts/setup.sh into `kubernetes-v<version>/bin`. */
export function kubernetesBin(
  command: "kube-apiserver" | "kube-controller-manager" | "kube-scheduler",
  env: NodeJS.ProcessEnv = process.env,
): string {
  return cachedBin(`kubernetes-v${pinnedKubernetesVersion()}`, command, env);
}

/** The tests' real node's kubelet: the control plane's version, in a module of its own (scripts/toolchain/kubelet). */
export function pinnedKubeletVersion(): string {
  return pinnedModuleVersion("scripts/toolchain/kubelet/go.mod", "k8s.io/kubernetes");
}

/**
 * The kubelet of the tests' real node, or its Pods' pause binary (Kubernetes' own pause.c, compiled static by
 * scripts/test.sh), in `kubelet-v<version>/bin`.
 */
export function kubeletBin(command: "kubelet" | "pause", env: NodeJS.ProcessEnv = process.env): string {
  return cachedBin(`kubelet-v${pinnedKubeletVersion()}`, command, env);
}

/** kwok, the tests' fake kubelet, built by scripts/setup.sh into `kwok-v<version>/bin`. */
export function kwokBin(env: NodeJS.ProcessEnv = process.env): string {
  return cachedBin(`kwok-v${pinnedKwokVersion()}`, "kwok", env);
}

/** The @pulumi/kubernetes release package.json pins: the version Pulumi's Kubernetes provider is built as. */
export function pinnedKubernetesProviderVersion(): string {
  const pkg = JSON.parse(readFileSync(path.join(REPO_ROOT, "package.json"), "utf8")) as {
    dependencies?: Record<string, string>;
  };
  const version = pkg.dependencies?.["@pulumi/kubernetes"];
  if (!version || !/^[0-9.]+$/.test(version))
    throw new Error("package.json does not pin @pulumi/kubernetes to one version");
  return version;
}

/**
 * Pulumi's Kubernetes provider as scripts/setup.sh builds it (`pulumi-kubernetes-v<version>/bin`), which the
 * engine finds on the toolchain's PATH; the path whether or not it is there.
 */
export function kubernetesProviderBin(env: NodeJS.ProcessEnv = process.env): string {
  return path.join(
    cacheRoot(env),
    `pulumi-kubernetes-v${pinnedKubernetesProviderVersion()}`,
    "bin",
    "pulumi-resource-kubernetes",
  );
}

/**
 * Where the engine will find Pulumi's Kubernetes provider at the pinned version: the set-up's build (on the
 * toolchain's PATH), else Pulumi's own release installed by `pulumi plugin install` (the GCP host's startup
 * script) under PULUMI_HOME. `missing` lists where it looked.
 */
export function findKubernetesProvider(
  env: NodeJS.ProcessEnv = process.env,
):
  | { readonly found: string; readonly version: string }
  | { readonly missing: string[]; readonly version: string } {
  const version = pinnedKubernetesProviderVersion();
  const pulumiHome = env.PULUMI_HOME ?? path.join(os.homedir(), ".pulumi");
  const places = [
    kubernetesProviderBin(env),
    path.join(pulumiHome, "plugins", `resource-kubernetes-v${version}`, "pulumi-resource-kubernetes"),
  ];
  const found = places.find((place) => existsSync(place));
  return found ? { found, version } : { missing: places, version };
}

/** Why a kubernetes project cannot be made here: the provider's version, where it was looked for, the fix. */
export function kubernetesProviderMissing(provider: { missing: readonly string[]; version: string }): string {
  return (
    `Pulumi's Kubernetes provider v${provider.version} is not installed (looked at ${provider.missing.join(" and ")}): ` +
    "scripts/setup.sh builds it (npm run setup), or `pulumi plugin install resource kubernetes " +
    `${provider.version}\``
  );
}

export interface Toolchain {
  /** Pass as `PulumiCommand.get({ root })`; the CLI is `${pulumiRoot}/bin/pulumi`. */
  readonly pulumiRoot: string;
  readonly pulumiBin: string;
  readonly pulumiVersion: string;
  /** Environment for the engine: plugins on PATH, no plugin downloads, no update checks. */
  readonly env: Record<string, string>;
}

export function toolchain(env: NodeJS.ProcessEnv = process.env): Toolchain {
  const pulumiVersion = pinnedPulumiVersion();
  const pulumiRoot = path.join(cacheRoot(env), `pulumi-v${pulumiVersion}`);
  const binDirs = [
    path.join(pulumiRoot, "bin"),
    path.join(REPO_ROOT, "bin"),
    path.dirname(kubernetesProviderBin(env)),
  ];
  return {
    pulumiRoot,
    pulumiBin: path.join(pulumiRoot, "bin", "pulumi"),
    pulumiVersion,
    env: {
      PATH: [...binDirs, env.PATH ?? "/usr/local/bin:/usr/bin:/bin"].join(path.delimiter),
      // Plugins are ours (on PATH) or absent: a missing one must fail at once, not try a download.
      PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION: "true",
      PULUMI_SKIP_UPDATE_CHECK: "true",
    },
  };
}

/** Runs `pulumi version`; throws naming the path and the fix when the CLI is missing. */
export async function pulumiCliVersion(chain: Toolchain = toolchain()): Promise<string> {
  if (!existsSync(chain.pulumiBin)) {
    throw new Error(`Pulumi CLI not found at ${chain.pulumiBin}; run 'npm run setup'`);
  }
  const { stdout } = await promisify(execFile)(chain.pulumiBin, ["version"], { timeout: 10_000 });
  return stdout.trim();
}
