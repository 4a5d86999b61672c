import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { RUNTIME_KUBECONFIG } from "../components/gcp/startup-script.js";
import { KubernetesBackendSpec } from "../components/tenant/kubernetes/spec.js";
import { GCP, PORTS } from "../lib/constants.js";
import { parseCidr } from "../lib/ipv4.js";
import { DEFAULT_FIREWALL_NAMES, validateFirewallNames } from "../lib/host/render.js";

/** The Pulumi project name, and so the namespace of every config key (`agent-sandbox:<key>`). */
export const PROJECT = "agent-sandbox";

const port = z.number().int().min(1).max(65535);
const absolutePath = z.string().startsWith("/", { message: "must be an absolute path" });

/** `agent-sandbox:target`: which platform the stack builds. */
export const TargetConfig = z.enum(["local", "gcp"]);
export type TargetConfig = z.infer<typeof TargetConfig>;

/** `agent-sandbox:host`: the sandbox host's baseline (this machine for `local`, the VM for `gcp`). */
export const HostConfig = z
  .object({
    dockerSocket: absolutePath.default("/var/run/docker.sock"),
    squidPort: port.default(PORTS.squid),
    registryPort: port.default(PORTS.registry),
    /** The front door (our Caddy): dev servers at `http://<label>[-<name>].sandbox.localhost:<port>`. */
    frontDoorPort: port.default(PORTS.frontDoor),
    /** Caddy's admin API, on 127.0.0.1 only: tenant stacks register their routes through it. */
    frontDoorAdminPort: port.default(PORTS.frontDoorAdmin),
    configDir: absolutePath.default("/etc/agent-sandbox"),
    dataDir: absolutePath.default("/var/lib/agent-sandbox"),
    logDir: absolutePath.default("/var/log/agent-sandbox"),
    runDir: absolutePath.default("/run/agent-sandbox"),
    /**
     * Names of the firewall baseline. Only an isolated test host changes them: the tenant stacks' rules
     * go into the released chains (CHAINS).
     */
    firewall: z
      .object({
        inputChain: z.string().default(DEFAULT_FIREWALL_NAMES.inputChain),
        forwardChain: z.string().default(DEFAULT_FIREWALL_NAMES.forwardChain),
        bridgeMatch: z.string().default(DEFAULT_FIREWALL_NAMES.bridgeMatch),
      })
      .strict()
      .superRefine((names, context) => {
        for (const problem of validateFirewallNames(names))
          context.addIssue({ code: "custom", message: problem });
      })
      .default(DEFAULT_FIREWALL_NAMES),
  })
  .strict();
export type HostConfig = z.infer<typeof HostConfig>;

export const REGISTRATION_MODES = ["open", "invite", "closed"] as const;
export type RegistrationMode = (typeof REGISTRATION_MODES)[number];

/** A token bucket: `burst` requests at once, refilled at `perHour` a hour. */
export const RateLimit = z
  .object({
    burst: z.number().int().min(1).max(100_000),
    perHour: z.number().int().min(1).max(3_600_000),
  })
  .strict();
export type RateLimit = z.infer<typeof RateLimit>;

const DEFAULT_RATE_LIMITS = {
  register: { burst: 10, perHour: 20 },
  createProject: { burst: 10, perHour: 60 },
} as const satisfies Record<string, RateLimit>;

/**
 * `agent-sandbox:runtime.sshGateway`: the runtime's SSH gateway to kubernetes projects' Pods
 * (runtime/kubernetes/ssh-gateway.ts), held to what the container backend's sshd allows before a login.
 */
export const SshGatewayConfig = z
  .object({
    /** A connection that has not finished its key exchange this long after it opened is closed. */
    handshakeTimeoutSeconds: z.number().int().min(1).max(600).default(20),
    /** A connection not logged in this long after it opened is closed (sshd's LoginGraceTime, 120 s there). */
    loginTimeoutSeconds: z.number().int().min(1).max(3600).default(60),
    /** Connections not yet logged in from one address, over every project's port; past it, closed at once. */
    maxUnauthenticatedPerAddress: z.number().int().min(1).max(100_000).default(10),
    /** Connections not yet logged in, in all (sshd's MaxStartups refuses past 100); past it, closed at once. */
    maxUnauthenticated: z.number().int().min(1).max(100_000).default(100),
    /** Sessions (shell, command, SFTP) and forwarded ports one login holds open at once (sshd's MaxSessions). */
    maxChannelsPerConnection: z.number().int().min(1).max(1000).default(10),
  })
  .strict()
  .refine((ssh) => ssh.handshakeTimeoutSeconds <= ssh.loginTimeoutSeconds, {
    message: "handshakeTimeoutSeconds must not be longer than loginTimeoutSeconds",
    path: ["handshakeTimeoutSeconds"],
  })
  .refine((ssh) => ssh.maxUnauthenticatedPerAddress <= ssh.maxUnauthenticated, {
    message: "maxUnauthenticatedPerAddress must not be more than maxUnauthenticated",
    path: ["maxUnauthenticatedPerAddress"],
  });
export type SshGatewayConfig = z.infer<typeof SshGatewayConfig>;

/** `agent-sandbox:runtime`: the runtime service (API, reconciler, terminal proxy). */
export const RuntimeConfig = z
  .object({
    apiPort: port.default(PORTS.api),
    terminalPort: port.default(PORTS.terminal),
    listenHost: z.string().min(1).default("127.0.0.1"),
    /** The host name or address clients reach sandboxes' SSH ports on. */
    publicHost: z.string().min(1).default("127.0.0.1"),
    /**
     * Who may create an account: anyone (`open`), holders of an operator's invite code (`invite`, codes
     * from `npm run invite`), or nobody (`closed`).
     */
    registration: z.enum(REGISTRATION_MODES).default("open"),
    /**
     * Live projects per user (one being deleted counts until its delete has finished): each holds a
     * subnet and an SSH port from pools every user shares.
     */
    projectQuota: z.number().int().min(1).max(10_000).default(5),
    rateLimits: z
      .object({
        /** Account creations per client address. */
        register: RateLimit.default(DEFAULT_RATE_LIMITS.register),
        /** Project creations per user (each one is a Pulumi update of a new stack). */
        createProject: RateLimit.default(DEFAULT_RATE_LIMITS.createProject),
      })
      .strict()
      .default(DEFAULT_RATE_LIMITS),
    /**
     * How long `POST /projects` waits for the new sandbox to run, to answer as synchronous clients expect
     * (201, `running`, `terminal_url`); past it, or at 0, it answers 202 and the client follows the
     * operation. A cold create takes about 4 s here, 25 s ten at once (docs/tenant-stacks.md); keep it under
     * the idle timeout of whatever fronts the API (often 60 s).
     */
    createWaitSeconds: z
      .number({ message: "must be a number of seconds (0 answers at once)" })
      .int({ message: "must be a whole number of seconds" })
      .min(0, { message: "must be 0 (answer at once) or more seconds" })
      .max(300, { message: "must be at most 300 seconds (a client or proxy gives up long before)" })
      .default(30),
    /**
     * Base of every `terminal_url` (default `ws://<publicHost>:<terminalPort>/terminal`); set a `wss://`
     * URL when a TLS proxy fronts the terminal port.
     */
    terminalUrlBase: z
      .string()
      .regex(/^wss?:\/\/[^/\s]+(\/[^\s]*)?$/, { message: "must be a ws:// or wss:// URL" })
      .transform((url) => url.replace(/\/+$/, ""))
      .optional(),
    /** Operators' account emails: they get `/admin/*` (every project, the queue, cancel, jobs). */
    admins: z.array(z.email({ message: "must be an email address" }).toLowerCase()).default([]),
    /** How often the background jobs run (one leader per database runs each). */
    jobs: z
      .object({
        idleCheckSeconds: z.number().int().min(1).max(3600).default(60),
        /** Every tenant stack gets a refresh preview this often (and on demand). */
        driftSweepMinutes: z.number().positive().max(1440).default(15),
        /** The local host's Squid and registry are probed this often and restarted when down (0: never). */
        hostWatchdogSeconds: z.number().int().min(0).max(3600).default(10),
        /** Projects that should run but whose container exited (an engine restart) are started (0: never). */
        sandboxRevivalSeconds: z.number().int().min(0).max(3600).default(15),
      })
      .strict()
      .default({
        idleCheckSeconds: 60,
        driftSweepMinutes: 15,
        hostWatchdogSeconds: 10,
        sandboxRevivalSeconds: 15,
      }),
    /** Commands run through the API (POST /projects/{id}/exec). */
    exec: z
      .object({
        /** The longest `timeout_s` a caller may ask for (a background process's default). */
        maxTimeoutSeconds: z.number().int().min(1).max(86_400).default(3600),
        /** Output kept per stream by a buffered exec's answer; past it, `truncated` (the stream route has none). */
        bufferedOutputBytes: z
          .number()
          .int()
          .min(1024)
          .max(64 * 1024 * 1024)
          .default(1024 * 1024),
        /** Output a background process keeps for reading (both streams, the newest). */
        backgroundOutputBytes: z
          .number()
          .int()
          .min(1024)
          .max(256 * 1024 * 1024)
          .default(4 * 1024 * 1024),
        /** Background processes one project may have running at once; one more is refused (429). */
        maxBackgroundProcesses: z.number().int().min(1).max(1000).default(16),
        /**
         * Output all of one project's background processes keep together, running and finished: past it, the
         * one keeping the most drops its oldest output.
         */
        backgroundOutputBytesPerProject: z
          .number()
          .int()
          .min(1024)
          .max(1024 * 1024 * 1024)
          .default(16 * 1024 * 1024),
      })
      .strict()
      .default({
        maxTimeoutSeconds: 3600,
        bufferedOutputBytes: 1024 * 1024,
        backgroundOutputBytes: 4 * 1024 * 1024,
        maxBackgroundProcesses: 16,
        backgroundOutputBytesPerProject: 16 * 1024 * 1024,
      }),
    /** Files moved through the API (/projects/{id}/files): the largest file or tar stream. */
    files: z
      .object({
        maxBytes: z
          .number()
          .int()
          .min(1024)
          .max(16 * 1024 * 1024 * 1024)
          .default(256 * 1024 * 1024),
        /** Entries one answer of GET /projects/{id}/files holds; a longer listing continues by `next_cursor`. */
        maxListEntries: z.number().int().min(1).max(100_000).default(1000),
      })
      .strict()
      .default({ maxBytes: 256 * 1024 * 1024, maxListEntries: 1000 }),
    /** Terminal recordings are deleted this long after their last write (the audit rows are kept). */
    recordingRetentionDays: z.number().int().min(1).max(3650).default(90),
    /**
     * Reverse proxies whose `X-Forwarded-For` the API believes (addresses or CIDRs): a request from one of
     * them is the client's it names, for login throttling, rate limits and the audit. Default none. The GCP
     * target sets `127.0.0.1`, its front door on the host.
     */
    trustedProxies: z
      .array(
        z.string().regex(/^\d{1,3}(\.\d{1,3}){3}(\/\d{1,2})?$/, {
          message: "must be an IPv4 address or CIDR such as 127.0.0.1",
        }),
      )
      .default([]),
    /**
     * Origins of the web console, the only pages a browser may open terminals from (default: the API's
     * own address, and its localhost alias when that is loopback). Set it when a TLS proxy fronts the API.
     */
    consoleOrigins: z
      .array(
        z.string().regex(/^https?:\/\/[^/\s]+$/, {
          message: "must be an origin such as https://sandbox.example.com (scheme and host, no path)",
        }),
      )
      .min(1)
      .optional(),
    /**
     * Slow and greedy clients, on the API's and the terminal's ports alike: a request's headers must
     * arrive within `headersTimeoutSeconds` and the whole request within `requestTimeoutSeconds` (an
     * upload through the files API included: raise it for large files over slow links), and one address
     * holds at most `maxConnectionsPerAddress` open connections (loopback is exempt: a TLS proxy in front
     * relays everyone from there, and limits them itself). Answers that stream (exec) are not cut.
     */
    http: z
      .object({
        headersTimeoutSeconds: z.number().int().min(1).max(300).default(20),
        requestTimeoutSeconds: z.number().int().min(1).max(86_400).default(300),
        maxConnectionsPerAddress: z.number().int().min(1).max(100_000).default(256),
      })
      .strict()
      .refine((http) => http.headersTimeoutSeconds <= http.requestTimeoutSeconds, {
        message: "headersTimeoutSeconds must not be longer than requestTimeoutSeconds",
        path: ["headersTimeoutSeconds"],
      })
      .default({ headersTimeoutSeconds: 20, requestTimeoutSeconds: 300, maxConnectionsPerAddress: 256 }),
    /** The SSH gateway kubernetes projects are reached through: its deadlines and caps (docs/kubernetes.md). */
    sshGateway: SshGatewayConfig.default(SshGatewayConfig.parse({})),
  })
  .strict();
export type RuntimeConfig = z.infer<typeof RuntimeConfig>;

/** {@link RuntimeConfig.consoleOrigins}, or its default. */
export function consoleOriginsOf(runtime: RuntimeConfig): string[] {
  if (runtime.consoleOrigins) return [...runtime.consoleOrigins];
  const loopback = ["127.0.0.1", "localhost"];
  const hosts = loopback.includes(runtime.publicHost) ? loopback : [runtime.publicHost];
  return hosts.map((host) => `http://${host}:${runtime.apiPort}`);
}

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
  })
  .strict()
  .refine((p) => p.idleSize <= p.size, { message: "idleSize must not exceed size", path: ["idleSize"] });
export type WarmPoolConfig = z.infer<typeof WarmPoolConfig>;

/** `agent-sandbox:tenants`: what new sandboxes get, and how the reconciler runs their stacks. */
const GIB = 1024 * 1024 * 1024;
/** A tenant filesystem's size: whole MiB, at least 64 MiB (sandbox:host:Filesystem's minimum). */
const diskBytes = z
  .number()
  .int()
  .min(64 * 1024 * 1024, { message: "must be at least 67108864 (64 MiB)" })
  .max(2 ** 44, { message: "must be at most 16 TiB" })
  .refine((n) => n % (1024 * 1024) === 0, { message: "must be a whole number of MiB" });

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

/** An IPv4 CIDR with octets ≤ 255 and a prefix ≤ 32 (GCP rejects anything else at apply time, too late). */
export function isIpv4Cidr(value: string): boolean {
  const match = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(value);
  if (!match) return false;
  const [, a, b, c, d, prefix] = match.map(Number) as [number, number, number, number, number, number];
  return [a, b, c, d].every((octet) => octet <= 255) && prefix <= 32;
}

/** True when the address has no bits set past the prefix (`10.10.0.0/24`, not `10.10.0.1/24`). */
export function isNetworkAddress(value: string): boolean {
  const [address, prefixText] = value.split("/");
  const bits = (address ?? "").split(".").reduce((acc, octet) => (acc << 8n) | BigInt(Number(octet)), 0n);
  const hostBits = 32n - BigInt(Number(prefixText));
  return (bits & ((1n << hostBits) - 1n)) === 0n;
}

const gcpCidr = z.string().refine(isIpv4Cidr, { message: "must be an IPv4 CIDR such as 203.0.113.0/24" });
const gcpSubnet = gcpCidr.refine(isNetworkAddress, {
  message: "must be a network address (no host bits set past the prefix, e.g. 10.10.0.0/24)",
});
const gcpSourceRanges = z.array(gcpCidr).min(1, { message: "needs at least one CIDR" });

/** GCP project ids: 6-30 characters, lowercase letters, digits and hyphens, a letter first, no trailing hyphen. */
export const GCP_PROJECT_ID = /^[a-z][a-z0-9-]{4,28}[a-z0-9]$/;
/** A lowercase DNS name of two labels or more, at most 253 characters (the front door's domain). */
const DNS_NAME = /^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]([a-z0-9-]{0,61}[a-z0-9])?$/;
/** Region names such as europe-west1, us-central1, northamerica-northeast2. */
export const GCP_REGION = /^[a-z]+-[a-z]+[0-9]{1,2}$/;
/** Machine types such as e2-standard-4, n2-highmem-8, e2-medium, n2-custom-4-16384, c3-standard-4-lssd. */
export const GCP_MACHINE_TYPE = /^[a-z][a-z0-9]*-[a-z]+(-[0-9]+){0,2}(-[a-z]+)?$/;

/** `agent-sandbox:gcp.gke`: the optional GKE cluster for the future Kubernetes backend. */
export const GkeConfig = z
  .object({
    enabled: z.boolean().default(false),
    /** Machine type of the gVisor (GKE Sandbox) node pool, where sandboxes run. */
    sandboxMachineType: z
      .string()
      .regex(GCP_MACHINE_TYPE, { message: "must be a machine type such as e2-standard-4" })
      .default("e2-standard-4"),
    sandboxNodeCount: z.number().int().min(1).max(100).default(1),
    /** Secondary ranges of the subnet (VPC-native cluster). */
    podsCidr: gcpSubnet.default("10.20.0.0/16"),
    servicesCidr: gcpSubnet.default("10.30.0.0/20"),
  })
  .strict();
export type GkeConfig = z.infer<typeof GkeConfig>;

/**
 * `agent-sandbox:gcp`: the cloud platform (gcp target) and what the tenant stacks use on it. The platform
 * stack creates the bucket, the KMS key, the registry, the network and the host VM from these keys.
 */
export const GcpConfig = z
  .object({
    project: z.string().regex(GCP_PROJECT_ID, {
      message: "must be a GCP project id (6-30 lowercase letters, digits, hyphens; a letter first)",
    }),
    region: z
      .string()
      .regex(GCP_REGION, { message: "must be a GCP region such as europe-west1" })
      .default("europe-west1"),
    /** The host VM's zone; `<region>-b` when omitted. */
    zone: z
      .string()
      .regex(/^[a-z]+-[a-z]+[0-9]{1,2}-[a-z]$/, { message: "must be a GCP zone such as europe-west1-b" })
      .optional(),
    /** The platform bucket: tenant data under projects/<id>/, tenant stack state under state/. */
    bucket: z.string().regex(/^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$/, { message: "must be a bucket name" }),
    /**
     * The bucket is never public: the only accepted value is `enforced` (a key of its own so that a stack
     * file trying anything else is refused by name rather than silently ignored).
     */
    publicAccessPrevention: z
      .literal("enforced", {
        message:
          'must be "enforced": the platform bucket holds tenant data and stack state and is never public',
      })
      .default("enforced"),
    /**
     * `projects/<p>/locations/<l>/keyRings/<r>/cryptoKeys/<k>`: encrypts the tenant stacks' secrets. The
     * platform stack creates this key ring and key; when omitted it is
     * `projects/<project>/locations/<region>/keyRings/agent-sandbox/cryptoKeys/tenant-state`.
     */
    kmsKey: z
      .string()
      .regex(/^projects\/[^/]+\/locations\/[^/]+\/keyRings\/[^/]+\/cryptoKeys\/[^/]+$/, {
        message: "must be projects/<p>/locations/<l>/keyRings/<r>/cryptoKeys/<k>",
      })
      .optional(),
    /** The host VM's machine type. */
    machineType: z
      .string()
      .regex(GCP_MACHINE_TYPE, { message: "must be a machine type such as e2-standard-4" })
      .default("e2-standard-4"),
    /** Boot image of the host VM (Debian 13 ships Node.js 20.19, Docker and Squid as packages). */
    image: z
      .string()
      .regex(/^[a-z0-9-]+\/[a-z0-9-]+$/, { message: "must be <image project>/<family or image>" })
      .default("debian-cloud/debian-13"),
    bootDiskSizeGb: z.number().int().min(20).max(2000).default(30),
    /** The persistent data disk: Postgres, Docker's data root (tenant volumes, images), tenant work dirs. */
    dataDiskSizeGb: z.number().int().min(10).max(65536).default(200),
    /** The subnet the host VM (and GKE nodes) live in. */
    subnetCidr: gcpSubnet.default("10.10.0.0/24"),
    /**
     * The platform's DNS name. The host's front door (Caddy) serves the API and the web console at
     * `https://<domain>`, terminals at `wss://<domain>/terminal`, and dev servers at
     * `https://<label>[-<name>].<domain>`; plain HTTP only redirects. Point `<domain>` and `*.<domain>` at the
     * host's address (the stack's `hostAddress` output) before the first `pulumi up`, so its certificates can
     * be issued.
     */
    domain: z.string().regex(DNS_NAME, {
      message:
        "must be a DNS name such as sandboxes.example.com (lowercase; the API is served at https://<domain>, dev servers at https://<label>.<domain>)",
    }),
    /**
     * Where the front door's certificates come from: `acme` (default: Let's Encrypt, or the ACME directory
     * given; one certificate per host name, issued when the name is first routed), or `internal` (Caddy's
     * own CA on the host: clients must trust its root, `/mnt/disks/agent-sandbox/caddy/pki/authorities/local/root.crt`).
     */
    tls: z
      .object({
        issuer: z.enum(["acme", "internal"]).default("acme"),
        /** The ACME account's contact (expiry and policy notices). */
        email: z.email({ message: "must be an email address" }).optional(),
        /** The ACME directory; default Let's Encrypt's production one. */
        acmeDirectory: z.url({ protocol: /^https$/, message: "must be an https:// URL" }).optional(),
      })
      .strict()
      .superRefine((tls, ctx) => {
        if (tls.issuer === "internal")
          for (const key of ["email", "acmeDirectory"] as const)
            if (tls[key] !== undefined)
              ctx.addIssue({ code: "custom", path: [key], message: "is only for issuer acme" });
      })
      .default({ issuer: "acme" }),
    /** Who may reach port 22 (admin SSH). Default: Google's IAP TCP-forwarding range only. */
    adminSourceRanges: gcpSourceRanges.default(["35.235.240.0/20"]),
    /** Who may reach the front door (HTTPS, HTTP) and the sandboxes' SSH ports (web/mobile clients). */
    clientSourceRanges: gcpSourceRanges.default(["0.0.0.0/0"]),
    /** Base image of the sandbox image built and pushed to Artifact Registry. */
    sandboxBaseImage: z.string().min(1).default("ubuntu:24.04"),
    /**
     * The sandbox image's build context (relative to the checkout, or absolute): sandbox-image/ with its
     * vendor/ staged (Node.js and npm, extra CA certificates), as sandbox-image/build.ts stages it.
     */
    sandboxImageContext: z.string().min(1).default("sandbox-image"),
    /** The Postgres server the runtime uses on the host VM (a container, data on the data disk). */
    postgresImage: z.string().min(1).default("postgres:16-alpine"),
    /**
     * How long a deleted tenant's data (and any overwritten or deleted object) stays in the bucket as a
     * noncurrent version before the lifecycle rule deletes it. A tenant's delete removes every live object
     * under `projects/<id>/` at once; this is what is retained, and for how long.
     */
    deletedDataRetentionDays: z.number().int().min(1).max(3650).default(30),
    /**
     * A monthly budget on the project with alerts to the billing account's admins at each threshold.
     * Optional: it needs the billing account's id and the right to create budgets on it.
     */
    budget: z
      .object({
        billingAccount: z.string().regex(/^[0-9A-F]{6}-[0-9A-F]{6}-[0-9A-F]{6}$/, {
          message: "must be a billing account id (XXXXXX-XXXXXX-XXXXXX)",
        }),
        monthlyAmount: z.number().int().positive().default(300),
        currency: z
          .string()
          .regex(/^[A-Z]{3}$/, { message: "must be an ISO 4217 code such as USD" })
          .default("USD"),
        thresholds: z.array(z.number().gt(0).max(2)).min(1).default([0.5, 0.9, 1]),
      })
      .strict()
      .optional(),
    /**
     * Filled in by the platform stack for the runtime on the VM: the Project Service account the tenant
     * stacks impersonate (the VM's own account holds only the token-creator role on it).
     */
    impersonateServiceAccount: z
      .string()
      .regex(/^[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z][a-z0-9-]{4,28}[a-z0-9]\.iam\.gserviceaccount\.com$/, {
        message: "must be a service account email (<id>@<project>.iam.gserviceaccount.com)",
      })
      .optional(),
    gke: GkeConfig.default(GkeConfig.parse({})),
    /**
     * The host runs microVM sandboxes (docs/microvm.md): the VM gets nested virtualization (KVM for its
     * guests) and its startup script installs QEMU and what the launcher needs. Default: on when
     * `tenants.backend` is microvm. Nested virtualization needs a machine series that has it
     * ({@link NESTED_VIRTUALIZATION_SERIES}).
     */
    microvm: z.boolean().optional(),
  })
  .strict()
  .superRefine((gcp, ctx) => {
    if (gcp.zone !== undefined && !gcp.zone.startsWith(`${gcp.region}-`))
      ctx.addIssue({ code: "custom", path: ["zone"], message: `must be a zone of region ${gcp.region}` });
    const keyProject = gcp.kmsKey?.split("/")[1];
    if (keyProject !== undefined && keyProject !== gcp.project)
      ctx.addIssue({ code: "custom", path: ["kmsKey"], message: `must be a key of project ${gcp.project}` });
    if (gcp.gke.enabled) {
      const ranges = [gcp.subnetCidr, gcp.gke.podsCidr, gcp.gke.servicesCidr];
      if (new Set(ranges).size !== ranges.length)
        ctx.addIssue({
          code: "custom",
          path: ["gke"],
          message: "subnetCidr, podsCidr and servicesCidr must differ",
        });
    }
  })
  .transform((gcp) => ({
    ...gcp,
    zone: gcp.zone ?? `${gcp.region}-b`,
    kmsKey:
      gcp.kmsKey ??
      `projects/${gcp.project}/locations/${gcp.region}/keyRings/agent-sandbox/cryptoKeys/tenant-state`,
  }));
export type GcpConfig = z.infer<typeof GcpConfig>;

/**
 * Compute Engine machine series that can enable nested virtualization (Intel ones: not E2, not Arm, not the
 * AMD series), so a host of them runs microVM guests under KVM rather than TCG.
 */
export const NESTED_VIRTUALIZATION_SERIES = ["n1", "n2", "n4", "c2", "c3", "c4"] as const;

/** Whether the GCP host runs microVMs: `gcp.microvm`, else whether new projects get them by default. */
export function gcpMicroVm(c: { tenants: TenantsConfig; gcp?: { microvm?: boolean | undefined } }): boolean {
  return c.gcp?.microvm ?? c.tenants.backend === "microvm";
}

/**
 * The ports the GCP firewall opens to clients, and the config key to blame when one of them would expose
 * Squid: the front door's HTTP and HTTPS (the API and the terminal listen on loopback behind it), and the
 * sandboxes' SSH ports.
 */
export function gcpPublicPorts(c: {
  runtime: RuntimeConfig;
  tenants: TenantsConfig;
}): { key: (string | number)[]; low: number; high: number }[] {
  return [
    { key: ["host", "squidPort"], low: GCP.httpPort, high: GCP.httpPort },
    { key: ["host", "squidPort"], low: GCP.httpsPort, high: GCP.httpsPort },
    { key: ["tenants", "sshPortRange"], low: c.tenants.sshPortRange[0], high: c.tenants.sshPortRange[1] },
  ];
}

/**
 * Squid's port (3128, and whatever `host.squidPort` says) must never be reachable from outside the VM
 * (defense in depth at the GCP firewall): a config whose public ports cover it is refused.
 */
export function gcpFirewallProblems(c: {
  host: HostConfig;
  runtime: RuntimeConfig;
  tenants: TenantsConfig;
}): { path: (string | number)[]; message: string }[] {
  const squidPorts = [...new Set([PORTS.squid, c.host.squidPort])];
  return gcpPublicPorts(c).flatMap(({ key, low, high }) =>
    squidPorts
      .filter((port) => port >= low && port <= high)
      .map((port) => ({
        path: key,
        message: `would open port ${port} (Squid) in the GCP firewall; the egress proxy is never reachable from outside the VM`,
      })),
  );
}

export const StackConfig = z
  .object({
    target: TargetConfig,
    host: HostConfig.default(HostConfig.parse({})),
    runtime: RuntimeConfig.default(RuntimeConfig.parse({})),
    tenants: TenantsConfig.default(TenantsConfig.parse({})),
    gcp: GcpConfig.optional(),
  })
  .refine((c) => c.target !== "gcp" || c.gcp !== undefined, {
    message: "is required when target is gcp",
    path: ["gcp"],
  })
  .superRefine((c, ctx) => {
    if (c.tenants.backend === "kubernetes" && !c.tenants.kubernetes)
      ctx.addIssue({
        code: "custom",
        path: ["tenants", "kubernetes"],
        message:
          "is required when tenants.backend is kubernetes (the cluster's kubeconfigFile and runtimeClassName)",
      });
    if (c.tenants.kubernetes && c.target !== "gcp")
      ctx.addIssue({
        code: "custom",
        path: ["tenants", "kubernetes"],
        message:
          "needs target gcp: a kubernetes tenant's identity is its Google service account (Workload Identity)",
      });
    if (c.target === "gcp")
      for (const issue of gcpFirewallProblems(c)) ctx.addIssue({ code: "custom", ...issue });
    if (c.target !== "gcp" || !c.gcp) return;
    if (c.gcp.microvm === false && c.tenants.backend === "microvm")
      ctx.addIssue({
        code: "custom",
        path: ["gcp", "microvm"],
        message: "must not be false while tenants.backend is microvm (the host would have no QEMU)",
      });
    const series = c.gcp.machineType.split("-")[0]!;
    if (gcpMicroVm(c) && !(NESTED_VIRTUALIZATION_SERIES as readonly string[]).includes(series))
      ctx.addIssue({
        code: "custom",
        path: ["gcp", "machineType"],
        message: `${c.gcp.machineType} cannot enable nested virtualization, which microVM sandboxes need: use a machine type of series ${NESTED_VIRTUALIZATION_SERIES.join(", ")} (e.g. n2-standard-8)`,
      });
  });
export type StackConfig = z.infer<typeof StackConfig>;

/** Thrown with every offending key spelled as it is in the stack file (`agent-sandbox:host.squidPort`). */
export class StackConfigError extends Error {
  constructor(
    readonly file: string,
    readonly problems: readonly string[],
  ) {
    super(`${file}: invalid configuration\n${problems.map((p) => `  - ${p}`).join("\n")}`);
    this.name = "StackConfigError";
  }
}

const CONFIG_KEYS = ["target", "host", "runtime", "tenants", "gcp"];

/** Validates the `config:` map of a stack file (keys namespaced `agent-sandbox:`). */
export function parseStackConfig(config: Record<string, unknown>, file: string): StackConfig {
  const problems: string[] = [];
  const values: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(config)) {
    const [namespace, name, ...rest] = key.split(":");
    if (namespace !== PROJECT) continue; // other namespaces belong to providers (gcp:project, ...)
    if (!name || rest.length > 0 || !CONFIG_KEYS.includes(name)) {
      problems.push(`${key}: unknown key (known: ${CONFIG_KEYS.map((k) => `${PROJECT}:${k}`).join(", ")})`);
      continue;
    }
    values[name] = value;
  }
  const parsed = StackConfig.safeParse(values);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) {
      const [head, ...tail] = issue.path.map(String);
      const key = `${PROJECT}:${head ?? "(config)"}${tail.length ? `.${tail.join(".")}` : ""}`;
      problems.push(`${key}: ${issue.message}`);
    }
  }
  if (problems.length > 0) throw new StackConfigError(file, problems);
  return parsed.data!;
}

/** Reads and validates `Pulumi.<stack>.yaml` without the Pulumi engine (for the runtime and scripts). */
export function readStackConfigFile(file: string): StackConfig {
  let document: unknown;
  try {
    document = parseYaml(readFileSync(file, "utf8"));
  } catch (error) {
    throw new StackConfigError(file, [(error as Error).message]);
  }
  const config = (document as { config?: unknown } | null)?.config;
  if (config === null || typeof config !== "object") {
    throw new StackConfigError(file, ["missing 'config:' section"]);
  }
  return parseStackConfig(config as Record<string, unknown>, file);
}
