import { createHash } from "node:crypto";

/** Longest DNS-1123 label (namespace names, label values): RFC 1123 via Kubernetes' `IsDNS1123Label`. */
export const DNS1123_LABEL_MAX = 63;
const DNS1123_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
/** Label values: up to 63 of `[A-Za-z0-9._-]`, alphanumeric at both ends, or empty (k8s `IsValidLabelValue`). */
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

export const isDns1123Label = (value: string) =>
  value.length <= DNS1123_LABEL_MAX && DNS1123_LABEL.test(value);
export const isLabelValue = (value: string) => value.length <= DNS1123_LABEL_MAX && LABEL_VALUE.test(value);

const digest = (value: string, length: number) =>
  createHash("sha256").update(value).digest("hex").slice(0, length);

/**
 * Maps any string to a DNS-1123 label (`prefix` + the string), never rejected by the API server: kept as
 * is when it already is one; otherwise lowercased, runs of other characters turned into one `-`, cut to
 * fit, and suffixed with 8 hex digits of the original's digest, so two ids that map alike still differ.
 */
export function dns1123Label(value: string, prefix = ""): string {
  const direct = `${prefix}${value}`;
  if (isDns1123Label(direct)) return direct;
  const suffix = `-${digest(value, 8)}`;
  const cleaned = value
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "");
  const room = DNS1123_LABEL_MAX - prefix.length - suffix.length;
  const head = cleaned.slice(0, Math.max(0, room)).replace(/-+$/, "");
  const label = `${prefix}${head === "" ? suffix.slice(1) : `${head}${suffix}`}`.replace(/^-+/, "");
  // A prefix that itself starts with a non-alphanumeric (or an empty head) can still start badly: the digest
  // alone is always a valid label.
  return isDns1123Label(label) ? label : digest(value, 16);
}

/** Maps any string to a valid label value the same way (label values allow `.`, `_` and upper case). */
export function labelValue(value: string): string {
  if (isLabelValue(value)) return value;
  const suffix = `-${digest(value, 8)}`;
  const cleaned = value.replace(/[^A-Za-z0-9._-]+/g, "-").replace(/^[^A-Za-z0-9]+|[^A-Za-z0-9]+$/g, "");
  const head = cleaned.slice(0, DNS1123_LABEL_MAX - suffix.length).replace(/[^A-Za-z0-9]+$/, "");
  return head === "" ? digest(value, 16) : `${head}${suffix}`;
}

/**
 * Names of one tenant's Kubernetes objects. The namespace is the tenant's; the objects inside it have fixed
 * names, so nothing but the namespace depends on the project id. The StatefulSet's name stays short: its
 * Pods carry a `controller-revision-hash` label of `<name>-<10 chars>`, which must fit in 63.
 */
export function kubernetesTenantNames(projectId: string) {
  return {
    namespace: dns1123Label(projectId, "sbx-"),
    statefulSet: "sandbox",
    pod: "sandbox-0",
    /** The Pod's one container: where the runtime's exec and terminal run (runtime/kubernetes/sandbox.ts). */
    container: "sandbox",
    serviceAccount: "sandbox",
    homeClaim: "home",
    networkPolicy: "sandbox-egress",
    defaultDeny: "default-deny",
    quota: "sandbox-quota",
    /** The tenant's egress proxy: ConfigMap, Deployment, Service and NetworkPolicy share the name. */
    proxy: "egress-proxy",
    proxyContainer: "squid",
  } as const;
}
