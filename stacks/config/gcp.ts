import { z } from "zod";
import { GCP, PORTS } from "../../lib/constants.js";
import type { HostConfig } from "./host.js";
import type { RuntimeConfig } from "./runtime.js";
import type { TenantsConfig } from "./tenants.js";

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
 * AMD series), so a host of them runs microVM guests under KVM rather than TCG; the host VM's component checks
 * the same list.
 */
export { NESTED_VIRTUALIZATION_SERIES } from "../../lib/microvm/nested.js";

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
