import { z } from "zod";
import { parseCidr } from "../../../lib/ipv4.js";

const dnsLabel = z.string().regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, {
  message: "must be a DNS-1123 label (lowercase letters, digits, '-', at most 63)",
});

/** The widest range `frontDoorFrom` may admit. */
export const FRONT_DOOR_MIN_PREFIX = 24;

/**
 * The `kubernetes` block of a tenant spec (backend `kubernetes`): where the sandbox runs. Its egress proxy
 * is its own (components/tenant/kubernetes/egress-proxy.ts), with the spec's allowlist. The kubeconfig is
 * not here: the spec is recorded in the clear, so the kubeconfig comes beside it (like the project's
 * secrets) or from the stack's secret config `kubeconfig`.
 */
export const KubernetesBackendSpec = z
  .object({
    /** The RuntimeClass sandboxes run under: `gvisor` on GKE Sandbox. No default: never the node's runc. */
    runtimeClassName: z
      .string({ error: "is required: the RuntimeClass sandboxes run under (gvisor on GKE Sandbox)" })
      .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/, {
        message: "must be a RuntimeClass name such as gvisor",
      }),
    /**
     * The cluster's DNS Pods, which the tenant's egress proxy asks (the sandbox asks none): GKE's kube-dns by
     * default. A cluster whose DNS is elsewhere names its namespace and Pod labels here.
     */
    clusterDns: z
      .object({
        namespace: dnsLabel,
        podLabels: z
          .record(z.string(), z.string())
          .refine((labels) => Object.keys(labels).length > 0, { message: "must select the DNS Pods" }),
      })
      .strict()
      .optional(),
    /**
     * Where the platform's front door reaches the cluster's Pods from (IPv4 CIDRs: the front door's host as
     * the Pods see it). Each sandbox Pod then admits them on its agent's ports (1024 and up) and the front door
     * routes to its dev servers (docs/kubernetes.md, "How the runtime is wired to it"); absent, a Pod admits
     * nothing at all.
     * At most a /24 each: a range wide enough to hold other tenants' Pods would let them past the front door.
     */
    frontDoorFrom: z
      .array(
        z
          .string()
          .refine((cidr) => parseCidr(cidr) !== undefined, {
            message: "must be an IPv4 CIDR such as 10.128.0.2/32",
          })
          .refine((cidr) => (parseCidr(cidr)?.prefix ?? 32) >= FRONT_DOOR_MIN_PREFIX, {
            message: `must be at most a /${FRONT_DOOR_MIN_PREFIX} (the front door's hosts, not a network other Pods are in)`,
          }),
      )
      .min(1)
      .max(8)
      .optional(),
    homeSize: z
      .string()
      .regex(/^[1-9][0-9]*(Ki|Mi|Gi|Ti)$/, { message: "must be a size such as 10Gi" })
      .default("10Gi"),
    storageClassName: z.string().min(1).optional(),
  })
  .strict();
export type KubernetesBackendSpec = z.infer<typeof KubernetesBackendSpec>;
