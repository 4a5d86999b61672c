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
  trafficShaper: "sandbox:host:TrafficShaper",
  squidTenant: "sandbox:host:SquidTenant",
  hostDirectory: "sandbox:host:Directory",
  sshKeyPair: "sandbox:crypto:SshKeyPair",
  firewallBaseline: "sandbox:host:FirewallBaseline",
  containerEngine: "sandbox:host:ContainerEngine",
  squidService: "sandbox:host:SquidService",
  registryService: "sandbox:host:RegistryService",
  frontDoorRoute: "sandbox:host:FrontDoorRoute",
  caddyService: "sandbox:host:CaddyService",
  hostFilesystem: "sandbox:host:Filesystem",
  microVm: "sandbox:vm:MicroVM",
} as const;

/** Label keys put on every engine object the platform creates, so orphans can be found and swept. */
export const LABELS = {
  managedBy: "dev.agent-sandbox.managed-by",
  tenant: "dev.agent-sandbox.tenant",
  owner: "dev.agent-sandbox.owner",
  stack: "dev.agent-sandbox.stack",
  /**
   * Which platform instance made the object (runtime/tenants/config.ts `platformInstanceId`): several
   * instances (the operator's, every integration test's) share one engine and the host's chains, and an
   * orphan sweep may only ever touch its own instance's objects.
   */
  instance: "dev.agent-sandbox.instance",
} as const;

/** A platform instance id: what `platformInstanceId` derives (12 hex digits), or any short lowercase name. */
export const INSTANCE_ID = /^[a-z0-9][a-z0-9-]{0,31}$/;

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

/** Default local ports: API 8000, terminal 9000, Squid 3128. */
export const PORTS = {
  api: 8000,
  terminal: 9000,
  squid: 3128,
  registry: 5000,
  /** The front door (Caddy) for dev servers, and its admin API (loopback only). */
  frontDoor: 8080,
  frontDoorAdmin: 2019,
} as const;

/**
 * Capabilities a sandbox container gets back after all are dropped: what its entrypoint and supervisor
 * need (chown the home volume, drop to the agent user, sshd's privilege separation), and AUDIT_WRITE: sshd
 * (Debian's, built with Linux audit) records a login with a terminal in the kernel's audit log and ends the
 * session when the kernel refuses it, so on a kernel with audit (GCP's, this machine's since session 48) no
 * `ssh -t` into a container got a shell without it. Docker's own default set has it for the same reason.
 * Only the container's root processes (the entrypoint, sshd) hold any of these; the agent's have none. The
 * image declares the same list in its `dev.agent-sandbox.required-capabilities` label; a test keeps the two
 * equal.
 */
export const SANDBOX_CAPABILITIES = [
  "CHOWN",
  "DAC_OVERRIDE",
  "FOWNER",
  "SETUID",
  "SETGID",
  "SYS_CHROOT",
  "KILL",
  "AUDIT_WRITE",
] as const;

/** sshd's port inside the sandbox (no NET_BIND_SERVICE needed); the host maps a port of its range to it. */
export const SANDBOX_SSH_PORT = 2222;

/** The sandbox image's one login: the agent's user, whose authorized key the platform provides. */
export const SANDBOX_SSH_USER = "agent";

/** The agent user's uid/gid in the sandbox image (owner of the home volume and the backup location). */
export const AGENT_UID = 1000;
/**
 * `nobody`: who the runtime's backups of Pods run their rclone as (runtime/kubernetes/backup.ts), and so who owns
 * a local kubernetes tenant's backup directory on the runtime's host.
 */
export const NOBODY_UID = 65534;

/** Identifiers of the GCP platform (stacks/platform/gcp.ts) that the runtime and the policy pack rely on. */
export const GCP = {
  /** Network tag of the host VM: every ingress firewall rule targets it. */
  hostTag: "agent-sandbox-host",
  /** Artifact Registry repository of sandbox images and snapshots. */
  registryRepository: "sandboxes",
  /** Bucket prefixes: tenant stacks' Pulumi state, runtime releases, tenant data (all in one bucket). */
  statePrefix: "state/",
  releasesPrefix: "releases/",
  projectsPrefix: "projects/",
  /** Where the data disk is mounted on the host VM (Postgres, Docker's data root, tenant work dirs). */
  dataMount: "/mnt/disks/agent-sandbox",
  /**
   * The front door's public ports on the host VM (Caddy: the API, terminals and dev servers over TLS, and
   * plain HTTP, which only redirects and answers ACME's HTTP challenge).
   */
  httpPort: 80,
  httpsPort: 443,
} as const;
