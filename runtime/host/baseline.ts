import type { HostConfig, TargetConfig } from "../../stacks/config.js";
import type { Check, HostPart } from "../../lib/host/check.js";
import { dockerEngine } from "../../lib/host/docker-engine.js";
import { firewallBaseline } from "../../lib/host/iptables.js";
import { debianPackages } from "../../lib/host/packages.js";
import { imageRegistry } from "../../lib/host/registry.js";
import { squidProxy } from "../../lib/host/squid.js";
import { caddyFrontDoor } from "../../lib/host/caddy.js";

/**
 * The sandbox host's baseline, in bring-up order: packages, the container engine (its chains exist
 * before ours are put in front of them), the firewall chains, the egress proxy, the image registry, the front door.
 * The same parts serve the local target here and, later, the GCP host.
 */
export function hostBaseline(config: HostConfig): HostPart[] {
  const dirs = {
    configDir: config.configDir,
    dataDir: config.dataDir,
    logDir: config.logDir,
    runDir: config.runDir,
  };
  return [
    debianPackages(),
    dockerEngine({ socket: config.dockerSocket, logDir: config.logDir, runDir: config.runDir }),
    firewallBaseline(),
    squidProxy({ port: config.squidPort, ...dirs }),
    imageRegistry({ port: config.registryPort, ...dirs }),
    caddyFrontDoor({ port: config.frontDoorPort, adminPort: config.frontDoorAdminPort, ...dirs }),
  ];
}

/**
 * The host parts the runtime's `/healthz` probes (those that fork processes, dpkg and iptables, are too slow
 * for its budget: the bring-up verifies them). The image registry holds snapshots on the local target only: a
 * GCP host runs none, its snapshots go to Artifact Registry.
 */
export function runtimeProbedParts(config: HostConfig, target: TargetConfig): HostPart[] {
  const probed = new Set(["container-engine", "squid", ...(target === "local" ? ["registry"] : [])]);
  return hostBaseline(config).filter((part) => probed.has(part.name));
}

/** Converges every part in order; stops at the first that cannot be brought up, naming it. */
export async function bringUpHost(parts: readonly HostPart[], log: (line: string) => void): Promise<Check[]> {
  const checks: Check[] = [];
  for (const part of parts) {
    let check: Check;
    try {
      check = await part.ensure((line) => log(`[${part.name}] ${line}`));
    } catch (error) {
      throw new Error(`host bring-up failed at ${part.name}: ${(error as Error).message}`);
    }
    checks.push(check);
    if (!check.ready) throw new Error(`host bring-up failed at ${part.name}: ${check.detail}`);
  }
  return checks;
}
