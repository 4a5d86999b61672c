import { z } from "zod";
import { INSTANCE_ID, PORTS } from "../../lib/constants.js";
import { parseCidr } from "../../lib/ipv4.js";
import { TrafficShaperInputs } from "../../provider/resources/traffic-shaper.js";
import { KubernetesBackendSpec } from "./kubernetes/spec.js";

/**
 * What a new project may reach unless its owner says otherwise: the model APIs
 * and sign-in of the three preinstalled agents, and the package registries a coding agent uses. The one
 * list of it; docs/security.md shows it (tests/unit/default-allowlist.test.ts keeps the two equal).
 */
export const DEFAULT_ALLOWLIST = [
  // Claude Code: the API, its console sign-in and claude.ai accounts, feature flags.
  "api.anthropic.com",
  "console.anthropic.com",
  "claude.ai",
  "statsig.anthropic.com",
  // Codex CLI: the API, ChatGPT sign-in and the ChatGPT-plan backend.
  "api.openai.com",
  "auth.openai.com",
  "chatgpt.com",
  // Gemini CLI: the Gemini API, Code Assist, Google sign-in.
  "generativelanguage.googleapis.com",
  "cloudcode-pa.googleapis.com",
  "oauth2.googleapis.com",
  "accounts.google.com",
  // Package registries and source hosts.
  "registry.npmjs.org",
  "pypi.org",
  "files.pythonhosted.org",
  "github.com",
  "codeload.github.com",
  "objects.githubusercontent.com",
  "raw.githubusercontent.com",
  "proxy.golang.org",
  "sum.golang.org",
  "crates.io",
  "index.crates.io",
  "static.crates.io",
  // Backups to GCS and downloads some tools fetch from it.
  "storage.googleapis.com",
] as const;

/** Project ids name stacks, containers, bridges and bucket prefixes: lowercase, short, no dots. */
export const ProjectId = z.string().regex(/^[a-z0-9][a-z0-9-]{0,38}[a-z0-9]$/, {
  message: "must be 2-40 lowercase letters, digits or '-', not starting or ending with '-'",
});

const relativePath = z.string().regex(/^(?!\/)(?!.*(^|\/)\.\.(\/|$))[A-Za-z0-9._/-]+$/, {
  message: "must be a path relative to /home/agent, without '..'",
});

/** A tenant filesystem's size: whole MiB, at least 64 MiB (sandbox:host:Filesystem's minimum). */
const diskBytes = z
  .number()
  .int()
  .min(64 * 1024 * 1024, { message: "must be at least 67108864 (64 MiB)" })
  .refine((n) => n % (1024 * 1024) === 0, { message: "must be a whole number of MiB" });

/**
 * Everything one tenant stack needs; the runtime writes it as the stack's config, the inline program
 * reads it back. Limits default to the seed's (1 GiB, 1 CPU).
 */
export const TenantSpec = z
  .object({
    projectId: ProjectId,
    ownerId: z.string().min(1).max(64),
    /**
     * Whether the owner is a label on the engine's objects. Absent (tenants created before the warm pool):
     * yes. New tenants keep their owner in the platform's records only: a label never changes on a
     * container, network or volume, and a warm-pool sandbox gets its owner when it is claimed.
     */
    ownerLabel: z.boolean().optional(),
    mode: z.enum(["local", "gcp"]),
    image: z.string().min(1),
    subnet: z
      .string()
      .refine((s) => parseCidr(s)?.prefix === 24, { message: "must be an IPv4 /24 such as 10.100.3.0/24" }),
    sshHostPort: z.number().int().min(1024).max(65535),
    allowlist: z
      .array(z.string())
      .min(1)
      .default([...DEFAULT_ALLOWLIST]),
    limits: z
      .object({
        memoryMiB: z.number().int().min(256).max(65536).default(1024),
        cpus: z.number().positive().max(64).default(1),
        pids: z.number().int().min(64).max(65536).default(512),
      })
      .default({ memoryMiB: 1024, cpus: 1, pids: 512 }),
    running: z.boolean().default(true),
    /**
     * The project's SSH public key when the API made the keypair (it returns the private key once and
     * keeps it encrypted); without one, the stack makes a keypair of its own.
     */
    sshPublicKey: z
      .string()
      .regex(/^ssh-ed25519 [A-Za-z0-9+/]+={0,2}( [^\n]*)?$/, {
        message: "must be an OpenSSH ed25519 public key",
      })
      .optional(),
    protectedPaths: z.array(relativePath).default([]),
    /**
     * Dev-server ports reachable through the front door (lib/front-door.ts validates them as the API
     * takes them): one route each, `<label>[-<name>].<domain>` → the sandbox's address and port.
     */
    ports: z
      .array(
        z
          .object({ port: z.number().int().min(1024).max(65535), name: z.string().min(1).max(32).optional() })
          .strict(),
      )
      .max(10)
      .default([]),
    backupIntervalSeconds: z.number().int().min(1).default(300),
    /**
     * A backup also runs this long after the home changed (0: the interval alone). Absent in tenants made
     * before it existed: their sandboxes keep the interval alone (no environment change, no replacement).
     */
    backupAfterChangeSeconds: z.number().int().min(0).optional(),
    /**
     * Local mode: the sizes of the home's and the backup location's own filesystems (sparse ext4 images under
     * `host.disksRoot`, sandbox:host:Filesystem), so the agent can fill neither the host's disk nor the other.
     * Absent in tenants made before them: their home stays the plain volume it is (never replaced).
     */
    homeBytes: diskBytes.optional(),
    backupBytes: diskBytes.optional(),
    /**
     * A fork's home (runtime/tenants/fork.ts): a copy of the source's home image, staged by the runtime at
     * one consistent point, that the new home filesystem (a container's) or home disk (a microVM's) is made
     * from, moved into place at its create. Absent: the home starts empty. Needs `homeBytes` (its size).
     */
    homeCopyFrom: z.string().startsWith("/").optional(),
    host: z.object({
      /**
       * The platform instance the tenant belongs to (runtime/tenants/config.ts `platformInstanceId`): a label
       * on its engine objects and in its rules' comments, so an orphan sweep touches only its own instance's.
       * Absent in tenants created before instances existed; those carry no instance and are never swept.
       */
      instance: z
        .string()
        .regex(INSTANCE_ID, {
          message: "must be 1-32 lowercase letters, digits or '-', not starting with '-'",
        })
        .optional(),
      squidPort: z.number().int().min(1).max(65535).default(PORTS.squid),
      squidConfigFile: z.string().startsWith("/"),
      squidFragmentsDir: z.string().startsWith("/"),
      /** Local backup locations live under here, one directory per project. */
      backupRoot: z.string().startsWith("/"),
      /** Local mode, with `homeBytes`: each project's filesystem images and their mountpoints, under `<root>/<project>`. */
      disksRoot: z.string().startsWith("/").optional(),
      /** Files a sandbox gets that must never be in its image or environment, one directory per project. */
      secretsRoot: z.string().startsWith("/").optional(),
      /**
       * The project's authorized SSH key is a root-owned file under `<root>/<project>`, mounted read-only
       * at /etc/ssh/authorized_keys: a new key (a warm-pool claim) holds from the next login on, the sandbox
       * untouched. Absent (tenants created before it): the key is in the sandbox's environment.
       */
      sshKeysRoot: z.string().startsWith("/").optional(),
      /**
       * The credential gateway's port on each tenant's gateway address (runtime/gateway/): the sandbox may
       * reach it there, and its model-API clients are pointed at it. Absent: the platform runs none.
       */
      gatewayPort: z.number().int().min(1).max(65535).optional(),
      /**
       * The front door (lib/host/caddy.ts): its admin API (loopback), its listen port and domain (for
       * URLs), and the runtime address its forward-auth asks. Absent: no routes are declared.
       */
      frontDoor: z
        .object({
          adminPort: z.number().int().min(1).max(65535),
          port: z.number().int().min(1).max(65535),
          domain: z.string().min(1).default("sandbox.localhost"),
          authUpstream: z.string().min(1),
          /** The front door serves TLS (the GCP target's, on 443): URLs are `https://`, the cookie `Secure`. */
          tls: z.boolean().optional(),
        })
        .optional(),
    }),
    /**
     * Where the sandbox runs: absent or `container` (the default), a container on the host; `microvm`, a
     * QEMU microVM the `microvm` block describes; `kubernetes`, a Pod on the cluster the `kubernetes` block
     * describes (components/tenant/kubernetes/, docs/kubernetes.md); or a backend a runtime registered,
     * whose stack program is its own (runtime/backends/). Absent rather than defaulted, so the recorded spec
     * of every existing tenant stays as it was.
     */
    backend: z
      .string()
      .regex(/^[a-z][a-z0-9-]{0,30}$/, {
        message: "must be a backend's name: lowercase letters, digits, '-'",
      })
      .optional(),
    kubernetes: KubernetesBackendSpec.optional(),
    /**
     * A container's isolation: absent or `runc`, the engine's default runtime (namespaces, cgroups, the
     * seccomp profile, no capabilities beyond the sandbox's); `gvisor`, the container under gVisor's `runsc`,
     * a kernel of its own in user space between the agent and the host's (docs/security.md, "gVisor"). The
     * container backend's alone: a microVM has a kernel of its own, a Pod its cluster's runtime class.
     */
    isolation: z.enum(["runc", "gvisor"]).optional(),
    /**
     * Bandwidth caps in kbit/s (sandbox:host:TrafficShaper, tc on the tenant's bridge): `downloadKbps` what
     * reaches the sandbox, `uploadKbps` what it sends; an absent one is not shaped. The container backend's
     * alone for now. Absent: no caps (every spec before them).
     */
    bandwidth: z
      .object({
        downloadKbps: TrafficShaperInputs.shape.downloadKbps,
        uploadKbps: TrafficShaperInputs.shape.uploadKbps,
      })
      .strict()
      .refine((b) => b.downloadKbps !== undefined || b.uploadKbps !== undefined, {
        message: "needs downloadKbps or uploadKbps",
      })
      .optional(),
    /**
     * Backend `microvm` (docs/microvm.md): the guest kernel and initramfs, the accelerator the
     * host's probe chose, where the VMs keep their disks, and the platform's own key (the terminal and exec
     * log in with it over the guest's sshd). vCPUs and memory are `limits.cpus` (rounded up) and
     * `limits.memoryMiB`; the home disk is `homeBytes` (else 10 GiB), the backup disk `backupBytes`.
     */
    microvm: z
      .object({
        kernel: z.string().startsWith("/"),
        initrd: z.string().startsWith("/"),
        accelerator: z.enum(["kvm", "tcg"]),
        stateRoot: z.string().startsWith("/"),
        platformKey: z.string().regex(/^ssh-ed25519 [A-Za-z0-9+/]+={0,2}( [^\n]*)?$/, {
          message: "must be an OpenSSH ed25519 public key",
        }),
        /**
         * A stop keeps the guest's memory (docs/microvm.md, "Stopped with its memory"): the next start resumes
         * its processes, terminals and open files where they were; a change, or an image that no longer fits,
         * boots cold. Set for the projects the runtime makes; absent in those made before it.
         */
        keepMemory: z.boolean().optional(),
        /**
         * Nested virtualisation (docs/microvm.md, "Nested virtualisation"), where the host's probe offered it:
         * the guest gets the host's CPU with its `cpuFlag` and KVM's modules (`initrd` is the nested
         * initramfs), its vCPUs and memory held to the caps (`tenants.nestedVirtualization`). Under KVM only.
         */
        nested: z
          .object({
            cpuFlag: z.enum(["vmx", "svm"]),
            maxMemoryMiB: z.number().int().min(256),
            maxVcpus: z.number().int().min(1).max(64),
          })
          .strict()
          .optional(),
      })
      .strict()
      .optional(),
    gcp: z
      .object({
        project: z.string().min(1),
        bucket: z.string().regex(/^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$/, { message: "must be a bucket name" }),
      })
      .optional(),
  })
  .superRefine((spec, ctx) => {
    if (spec.mode === "gcp" && !spec.gcp)
      ctx.addIssue({ code: "custom", path: ["gcp"], message: "is required when mode is gcp" });
    // A microVM's home and backup are disks of its own (its state directory), not host filesystems.
    const hostDisks =
      spec.backend !== "microvm" && (spec.homeBytes !== undefined || spec.backupBytes !== undefined);
    if (hostDisks && !spec.host.disksRoot)
      ctx.addIssue({
        code: "custom",
        path: ["host", "disksRoot"],
        message: "is required with homeBytes or backupBytes",
      });
    if (spec.homeCopyFrom !== undefined && spec.homeBytes === undefined)
      ctx.addIssue({
        code: "custom",
        path: ["homeCopyFrom"],
        message: "needs a home of its own disk (homeBytes, the copy's size)",
      });
    if (spec.homeCopyFrom !== undefined && spec.backend === "kubernetes")
      ctx.addIssue({
        code: "custom",
        path: ["homeCopyFrom"],
        message: "is a file of this host: a Pod's home is a volume of its cluster",
      });
    if (spec.isolation === "gvisor" && spec.backend !== undefined && spec.backend !== "container")
      ctx.addIssue({
        code: "custom",
        path: ["isolation"],
        message: `gvisor is a container's isolation, not a ${spec.backend}'s`,
      });
    if (spec.bandwidth && spec.backend !== undefined && spec.backend !== "container")
      ctx.addIssue({
        code: "custom",
        path: ["bandwidth"],
        message: `is shaped on a container's bridge, not a ${spec.backend}'s`,
      });
    if (spec.backend === "kubernetes" && !spec.kubernetes)
      ctx.addIssue({
        code: "custom",
        path: ["kubernetes"],
        message: "is required when backend is kubernetes",
      });
    if (spec.backend === "microvm" && !spec.microvm)
      ctx.addIssue({ code: "custom", path: ["microvm"], message: "is required when backend is microvm" });
    // A guest's VT-x/AMD-V is handed on by the host's KVM: an emulated CPU has none to give.
    if (spec.microvm?.nested && spec.microvm.accelerator !== "kvm")
      ctx.addIssue({
        code: "custom",
        path: ["microvm", "nested"],
        message: `needs accelerator kvm, not ${spec.microvm.accelerator}`,
      });
  });
export type TenantSpec = z.infer<typeof TenantSpec>;

/** A microVM's spec: its `microvm` block is there (the schema requires it with the backend). */
export type MicroVmTenantSpec = TenantSpec & {
  readonly backend: "microvm";
  readonly microvm: NonNullable<TenantSpec["microvm"]>;
};
/**
 * A kubernetes tenant's spec: its `kubernetes` block is there (the schema requires it). In gcp mode its Pod
 * runs as the tenant's Google service account (Workload Identity); in local mode, on a cluster of the
 * operator's own, it has no Google identity and its backups are on the runtime's host.
 */
export type KubernetesTenantSpec = TenantSpec & {
  readonly backend: "kubernetes";
  readonly kubernetes: NonNullable<TenantSpec["kubernetes"]>;
};
export const isMicroVmSpec = <S extends TenantSpec>(spec: S): spec is S & MicroVmTenantSpec =>
  spec.backend === "microvm" && spec.microvm !== undefined;
export const isKubernetesSpec = <S extends TenantSpec>(spec: S): spec is S & KubernetesTenantSpec =>
  spec.backend === "kubernetes" && spec.kubernetes !== undefined;

/** The backends whose sandboxes the platform's tenant program makes (components/tenant/tenant.ts). */
export const PLATFORM_BACKENDS = ["container", "microvm", "kubernetes"] as const;
export type TenantSpecInput = z.input<typeof TenantSpec>;

/**
 * sandbox-backup's schedule (sandbox-image/rootfs/usr/local/sbin/sandbox-backup): the interval, and the delay
 * after a change only when the spec has one (tenants made before it existed keep their environment).
 */
export function backupScheduleEnv(
  intervalSeconds: number,
  afterChangeSeconds?: number,
): Record<string, string> {
  return {
    BACKUP_INTERVAL_SECONDS: String(intervalSeconds),
    ...(afterChangeSeconds === undefined ? {} : { BACKUP_AFTER_CHANGE_SECONDS: String(afterChangeSeconds) }),
  };
}
