// Whether the Pulumi Kubernetes provider the engine would run for kubernetes tenant stacks is the one pinned:
// found where the set-up or `pulumi plugin install` puts it (lib/toolchain.ts), and asked its version.
import { findKubernetesProvider, kubernetesProviderMissing } from "./toolchain.js";
import { knownPluginVersion, pluginVersion } from "./resource-plugin.js";

/** Why a found provider is not the one pinned: what it reports (or why it could not say), and the fix. */
export function kubernetesProviderOtherVersion(
  found: string,
  version: string,
  reports: { version: string } | { error: Error },
): string {
  const what =
    "version" in reports
      ? `reports v${reports.version} where v${version} is pinned (package.json's @pulumi/kubernetes)`
      : `did not say its version (v${version} is pinned): ${reports.error.message}`;
  return (
    `Pulumi's Kubernetes provider at ${found} ${what}: scripts/setup.sh builds v${version} (npm run setup), ` +
    `or \`pulumi plugin install resource kubernetes ${version}\``
  );
}

/**
 * The provider kubernetes stacks would run, asked its version (once per binary as it is on disk): why it
 * cannot serve them (missing, another version, no answer), or its path when it can.
 */
export async function checkKubernetesProvider(
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ readonly found: string; readonly version: string } | { readonly problem: string }> {
  const provider = findKubernetesProvider(env);
  if ("missing" in provider) return { problem: kubernetesProviderMissing(provider) };
  try {
    const reports = await pluginVersion(provider.found);
    if (reports === provider.version) return provider;
    return {
      problem: kubernetesProviderOtherVersion(provider.found, provider.version, { version: reports }),
    };
  } catch (error) {
    return {
      problem: kubernetesProviderOtherVersion(provider.found, provider.version, { error: error as Error }),
    };
  }
}

/**
 * What is already known, without waiting, of the provider kubernetes stacks would run: why it cannot serve
 * them (missing, or found of another version when last asked), else undefined (the right one, or not asked
 * yet since it last changed: {@link checkKubernetesProvider} asks).
 */
export function knownKubernetesProviderProblem(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const provider = findKubernetesProvider(env);
  if ("missing" in provider) return kubernetesProviderMissing(provider);
  const reports = knownPluginVersion(provider.found);
  if (!reports || ("version" in reports && reports.version === provider.version)) return undefined;
  return kubernetesProviderOtherVersion(provider.found, provider.version, reports);
}
