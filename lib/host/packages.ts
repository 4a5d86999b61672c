import type { Check, HostPart } from "./check.js";
import { run } from "../process.js";

/** Debian packages the host baseline runs (bookworm names). */
export const HOST_PACKAGES = [
  "docker.io",
  "squid",
  "docker-registry",
  "caddy", // the front door for dev servers (lib/host/caddy.ts)
  "iptables",
  "debootstrap", // the local base of the sandbox image (no registry can be pulled from here)
  "rclone", // the local backup remote
  "openssh-client",
  "runsc", // gVisor: the container backend's `isolation: gvisor` (lib/host/docker-engine.ts registers it)
] as const;

async function missingPackages(packages: readonly string[]): Promise<string[]> {
  const missing: string[] = [];
  for (const name of packages) {
    try {
      const { stdout } = await run("dpkg-query", ["-W", "-f=${Status}", name]);
      if (!stdout.includes("install ok installed")) missing.push(name);
    } catch {
      missing.push(name);
    }
  }
  return missing;
}

export function debianPackages(packages: readonly string[] = HOST_PACKAGES): HostPart {
  const name = "packages";
  const probe = async (): Promise<Check> => {
    const missing = await missingPackages(packages);
    return missing.length === 0
      ? { name, ready: true, detail: packages.join(", ") }
      : { name, ready: false, detail: `not installed: ${missing.join(", ")}` };
  };
  return {
    name,
    probe,
    async ensure(log) {
      const missing = await missingPackages(packages);
      if (missing.length > 0) {
        log(`installing ${missing.join(", ")} (apt-get)`);
        await run("apt-get", ["update", "-qq"], 600_000);
        // policy-rc.d-style refusals to start services are fine: the baseline starts them itself.
        await run(
          "env",
          ["DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq", ...missing],
          1_200_000,
        );
      }
      return probe();
    },
  };
}
