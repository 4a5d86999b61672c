import { z } from "zod";
import { RUNTIME_KUBECONFIG } from "../../components/gcp/startup-script.js";
import { KubernetesBackendSpec } from "../../components/tenant/kubernetes/spec.js";
import { parseCidr } from "../../lib/ipv4.js";
import { NESTED_DEFAULT_CAPS } from "../../lib/microvm/nested.js";
import { port } from "./shared.js";

const cidr = z
  .string()
  .regex(/^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/, { message: "must be an IPv4 CIDR such as 10.100.0.0/16" });

/** `agent-sandbox:tenants.credentialGateway`. */
export const CredentialGatewayConfig = z
  .object({
    /** Its port on each tenant's gateway address (the sandbox reaches only its own); 0 runs none. */
    port: z.number().int().min(0).max(65535).default(3180),
    /** Where each provider's API is, when not its public one (e.g. a test's own server, a corporate proxy). */
    upstreams: z
      .object({
        anthropic: z.url({ protocol: /^https$/, message: "must be an https:// URL" }),
        openai: z.url({ protocol: /^https$/, message: "must be an https:// URL" }),
        gemini: z.url({ protocol: /^https$/, message: "must be an https:// URL" }),
      })
      .partial()
      .strict()
      .default({}),
    /** CA certificates (PEM) trusted for upstreams besides the system's. */
    caFile: z.string().startsWith("/").optional(),
    /** Connect to `address:port` instead of what DNS says for these hosts (curl's --resolve). */
    resolve: z
      .record(
        z.string(),
        z.string().regex(/^\d{1,3}(\.\d{1,3}){3}:\d{1,5}$/, { message: "must be an IPv4 address:port" }),
      )
      .default({}),
    /** Requests one project's sandbox may have in flight through the gateway at once; past it, 429. */
    maxConcurrentRequests: z.number().int().min(1).max(10_000).default(32),
    /** Seconds a sandbox has to send a request's headers (a slow client is answered 408 and closed). */
    headersTimeoutSeconds: z.number().int().min(1).max(300).default(20),
  })
  .strict();
export type CredentialGatewayConfig = z.infer<typeof CredentialGatewayConfig>;

/** `agent-sandbox:tenants.warmPool`. */
export const WarmPoolConfig = z
  .object({
    /** Ready members kept while creates come in; 0: no pool. */
    size: z.number().int().min(0).max(256).default(0),
    /** Ready members kept once nothing has been claimed for `idleMinutes`. */
    idleSize: z.number().int().min(0).max(256).default(0),
    idleMinutes: z.number().positive({ message: "must be a positive number of minutes" }).default(60),
    /**
     * The pool's own operations (a member's create, a drain's delete, a claim's update) start no sooner
     * than this after they were queued, so that a burst of claims runs its first commands before the
     * engines those claims queued (docs/tenant-stacks.md, "The warm pool"); 0: at once.
     */
    settleSeconds: z.number().min(0).max(60).default(2),
    /**
     * How many times the host's memory the members' memory limits may add up to (1: each member counted
     * at its whole limit, as a create's default gives it). An idle member holds a few tens of MiB, so an
     * operator who sizes the pool by what members use sets more; the members' limits stay what they are.
     */
    memoryOvercommit: z.number().min(1).max(64).default(1),
  })
  .strict()
  .refine((p) => p.idleSize <= p.size, { message: "idleSize must not exceed size", path: ["idleSize"] });
export type WarmPoolConfig = z.infer<typeof WarmPoolConfig>;

const GIB = 1024 * 1024 * 1024;
/** A tenant filesystem's size: whole MiB, at least 64 MiB (sandbox:host:Filesystem's minimum). */
const diskBytes = z
  .number()
  .int()
  .min(64 * 1024 * 1024, { message: "must be at least 67108864 (64 MiB)" })
  .max(2 ** 44, { message: "must be at most 16 TiB" })
  .refine((n) => n % (1024 * 1024) === 0, { message: "must be a whole number of MiB" });

/** `agent-sandbox:tenants`: what new sandboxes get, and how the reconciler runs their stacks. */
export const TenantsConfig = z
  .object({
    image: z.string().min(1).default("agent-sandbox/sandbox:latest"),
    /** Each tenant gets a /24 of this pool for its bridge. */
    subnetPool: cidr.default("10.100.0.0/16"),
    /** Host ports mapped to the sandboxes' sshd (the seed's 10000-11000). */
    sshPortRange: z.tuple([port, port]).default([10000, 11000]),
    backupIntervalSeconds: z.number().int().min(1).default(300),
    /**
     * New sandboxes also back up this long after their home changed (0: the interval alone): a busy home's
     * recovery point is then about this long, while an unchanged one costs a directory walk per period and
     * no call to the remote.
     */
    backupAfterChangeSeconds: z.number().int().min(0).max(86_400).default(60),
    /**
     * Local mode: each new sandbox's home is a filesystem of its own of this size (a sparse ext4 image under
     * <dataDir>/disks), so an agent fills its home and never the host's disk. Existing sandboxes keep theirs.
     */
    homeBytes: diskBytes.default(10 * GIB),
    /**
     * Local mode: the backup location's own filesystem, a separate image. A fifth larger than the home: the
     * backup is a full copy of the home, and rclone writes a changed file beside the old one before renaming
     * it over (both are there during a sync), with the filesystem's own metadata on top.
     */
    backupBytes: diskBytes.default(12 * GIB),
    /**
     * Where a new project's sandbox runs when its create does not say: `container`, `microvm` (a QEMU
     * microVM with its own kernel: docs/microvm.md), or `kubernetes` (a Pod on the cluster of
     * `tenants.kubernetes`: docs/kubernetes.md). Each can be asked for per project.
     */
    backend: z.enum(["container", "microvm", "kubernetes"]).default("container"),
    /**
     * A new container project's isolation when its create does not say: `runc` (the engine's default
     * runtime) or `gvisor` (gVisor's runsc, where the host's probe found it: docs/security.md, "gVisor").
     * Each can be asked for per project.
     */
    isolation: z.enum(["runc", "gvisor"]).default("runc"),
    /**
     * The largest microVM a project with nested virtualisation gets (docs/microvm.md, "Nested virtualisation"),
     * whatever its limits say: the VMs its agent runs live inside it, so this bounds them all.
     */
    nestedVirtualization: z
      .object({
        memoryMiB: z.number().int().min(256).max(1_048_576).default(NESTED_DEFAULT_CAPS.memoryMiB),
        vcpus: z.number().int().min(1).max(64).default(NESTED_DEFAULT_CAPS.vcpus),
      })
      .strict()
      .default({ ...NESTED_DEFAULT_CAPS }),
    /**
     * The kubernetes backend (gcp target): the cluster's kubeconfig, a file on the host that the runtime and
     * its tenant stacks use (never the ambient ~/.kube/config), and what every kubernetes tenant's spec gets.
     */
    kubernetes: KubernetesBackendSpec.extend({
      /** Default: where the GCP platform writes the cluster it made (`gcp.gke.enabled`). */
      kubeconfigFile: z
        .string()
        .regex(/^\//, { message: "must be an absolute path" })
        .default(RUNTIME_KUBECONFIG),
      /**
       * How the runtime authenticates to the cluster: the kubeconfig user's token, token file or client
       * certificate (`kubeconfig`), or (`gke`) a token it mints for the Project Service account by impersonation,
       * whatever the kubeconfig's user holds (`gke-gcloud-auth-plugin`, for people): docs/kubernetes.md.
       */
      credentials: z.enum(["kubeconfig", "gke"]).default("kubeconfig"),
    }).optional(),
    /**
     * A running project with no terminal, no SSH session and no input for this long is snapshotted and
     * stopped to free the host; a project can opt out. Fractions are allowed (tests use seconds).
     */
    idleMinutes: z.number().positive({ message: "must be a positive number of minutes" }).default(30),
    /**
     * A sandbox paused with its memory (a microVM's image beside its disks) keeps the image this long; then it
     * is dropped, the disks kept, and the next start boots. 0 keeps it until the next start.
     */
    memoryRetentionHours: z
      .number()
      .min(0, { message: "must be 0 or a positive number of hours" })
      .default(168),
    /** What a drift check that finds drift does: tell the owner (`report`) or put it back (`repair`). */
    driftRemediation: z.enum(["report", "repair"]).default("report"),
    /** Failed drift checks in a row after which a project is marked stalled and left alone. */
    driftStallAfter: z.number().int().min(1).max(100).default(3),
    /** The final backup before a stop or snapshot is killed after this long; the operation goes on. */
    finalBackupSeconds: z.number().int().min(1).max(3600).default(120),
    /** A reconciler that has not renewed its lease for this long is presumed dead. */
    leaseSeconds: z.number().int().min(2).default(30),
    maxConcurrent: z.number().int().min(1).max(64).default(4),
    /**
     * Tenant operations attach to one long-lived `sandbox` provider process (runtime/tenants/
     * shared-provider.ts) instead of each starting its own; false: every operation starts its plugin.
     */
    sharedProvider: z.boolean().default(true),
    /**
     * The warm pool (runtime/tenants/pool.ts): sandboxes made ahead of demand, each a reconciled tenant stack
     * running with no owner; a create claims one and answers at once. `size` 0 turns it off.
     */
    warmPool: WarmPoolConfig.default(WarmPoolConfig.parse({})),
    /** Snapshots kept per project (the newest 5 by default); older ones are deleted. */
    snapshotsKept: z.number().int().min(1).max(100).default(5),
    /** The credential gateway (runtime/gateway/): model-API keys are added on the way out, never inside. */
    credentialGateway: CredentialGatewayConfig.default(CredentialGatewayConfig.parse({})),
  })
  .strict()
  .refine((t) => t.sshPortRange[0] <= t.sshPortRange[1], {
    message: "sshPortRange must be [low, high]",
    path: ["sshPortRange"],
  })
  .superRefine((t, ctx) => {
    // Every member holds a /24 and an SSH port like any tenant: a pool the platform cannot hold is refused
    // here, not found out one failed create at a time.
    const prefix = parseCidr(t.subnetPool)?.prefix ?? 24;
    const subnets = prefix <= 24 ? 2 ** (24 - prefix) : 0;
    const ports = t.sshPortRange[1] - t.sshPortRange[0] + 1;
    const room = Math.min(subnets, ports);
    if (t.warmPool.size > room)
      ctx.addIssue({
        code: "custom",
        path: ["warmPool", "size"],
        message: `${t.warmPool.size} members do not fit: subnetPool ${t.subnetPool} holds ${subnets} tenants and sshPortRange ${ports}`,
      });
  });
export type TenantsConfig = z.infer<typeof TenantsConfig>;
