/**
 * Identifiers shared by the Pulumi components, the provider plugin and the runtime service.
 * Changing one of these renames live resources on every host: treat them as released API.
 */

/** The Pulumi package name of the project's own provider plugin (`pulumi-resource-sandbox`). */
export const PROVIDER_PACKAGE = "sandbox";

/** Type tokens served by the provider plugin. Never change one once released; add `aliases` instead. */
export const RESOURCE_TYPES = {
  hostFile: "sandbox:host:File",
  dockerNetwork: "sandbox:docker:Network",
  dockerVolume: "sandbox:docker:Volume",
  dockerContainer: "sandbox:docker:Container",
  tenantFirewall: "sandbox:host:TenantFirewall",
  squidTenant: "sandbox:host:SquidTenant",
} as const;

/** Label keys put on every engine object the platform creates, so orphans can be found and swept. */
export const LABELS = {
  managedBy: "dev.agent-sandbox.managed-by",
  tenant: "dev.agent-sandbox.tenant",
  owner: "dev.agent-sandbox.owner",
  stack: "dev.agent-sandbox.stack",
} as const;

/** Value of the `managed-by` label. */
export const MANAGED_BY = "agent-sandbox";

/**
 * The project's own iptables chains. Rules are only ever added to or flushed from these chains;
 * the host's own chains only get one jump rule each into them.
 */
export const CHAINS = {
  input: "SANDBOX-INPUT",
  forward: "SANDBOX-FORWARD",
} as const;

/** Prefix of every tenant bridge interface name (Linux caps interface names at 15 bytes). */
export const BRIDGE_PREFIX = "sbx-";

/** The cloud metadata address that sandboxes must never reach (GCP, AWS, Azure all use it). */
export const METADATA_ADDRESS = "169.254.169.254";

/** Default local ports (seed 000: API 8000, terminal 9000, Squid 3128). */
export const PORTS = {
  api: 8000,
  terminal: 9000,
  squid: 3128,
  registry: 5000,
} as const;
