import { z } from "zod";

const dnsLabel = z.string().regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, {
  message: "must be a DNS-1123 label (lowercase letters, digits, '-', at most 63)",
});

/**
 * The `kubernetes` block of a tenant spec (backend `kubernetes`): where the sandbox runs and how it reaches
 * the platform's egress proxy. The kubeconfig is not here: the spec is recorded in the clear, so the
 * kubeconfig comes beside it (like the project's secrets) or from the stack's secret config `kubeconfig`.
 */
export const KubernetesBackendSpec = z
  .object({
    /** The RuntimeClass sandboxes run under: `gvisor` on GKE Sandbox. No default: never the node's runc. */
    runtimeClassName: z
      .string({ error: "is required: the RuntimeClass sandboxes run under (gvisor on GKE Sandbox)" })
      .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/, {
        message: "must be a RuntimeClass name such as gvisor",
      }),
    /** The platform's egress proxy: its namespace, its Pods' labels and port, the address the sandbox uses. */
    egressProxy: z
      .object({
        namespace: dnsLabel,
        podLabels: z
          .record(z.string(), z.string())
          .refine((labels) => Object.keys(labels).length > 0, { message: "must select the proxy's Pods" }),
        port: z.number().int().min(1).max(65535),
        /** The Service's ClusterIP (no DNS allowed) or its DNS name (DNS to the cluster's resolver allowed). */
        address: z.string().min(1),
      })
      .strict(),
    homeSize: z
      .string()
      .regex(/^[1-9][0-9]*(Ki|Mi|Gi|Ti)$/, { message: "must be a size such as 10Gi" })
      .default("10Gi"),
    storageClassName: z.string().min(1).optional(),
  })
  .strict();
export type KubernetesBackendSpec = z.infer<typeof KubernetesBackendSpec>;
