import { describe, expect, it } from "vitest";
import { parseStackConfig, StackConfigError } from "../../stacks/config.js";

const valid = {
  "agent-sandbox:target": "gcp",
  "agent-sandbox:gcp": {
    project: "sandbox-prod",
    bucket: "sandbox-prod-data",
    domain: "sandboxes.example.test",
  },
};

/** The problems a stack file with `overrides` merged into the valid gcp config is refused with. */
const problemsOf = (overrides: Record<string, unknown>): readonly string[] => {
  try {
    parseStackConfig({ ...valid, ...overrides }, "Pulumi.gcp.yaml");
  } catch (error) {
    expect(error).toBeInstanceOf(StackConfigError);
    return (error as StackConfigError).problems;
  }
  throw new Error("expected the config to be rejected");
};

const gcp = (fields: Record<string, unknown>) => ({
  "agent-sandbox:gcp": { ...valid["agent-sandbox:gcp"], ...fields },
});

describe("gcp stack config", () => {
  it("fills the platform's defaults: zone of the region, the KMS key the platform creates, closed admin SSH", () => {
    const config = parseStackConfig(valid, "Pulumi.gcp.yaml");
    expect(config.gcp).toMatchObject({
      region: "europe-west1",
      zone: "europe-west1-b",
      machineType: "e2-standard-4",
      publicAccessPrevention: "enforced",
      kmsKey: "projects/sandbox-prod/locations/europe-west1/keyRings/agent-sandbox/cryptoKeys/tenant-state",
      adminSourceRanges: ["35.235.240.0/20"],
      clientSourceRanges: ["0.0.0.0/0"],
      subnetCidr: "10.10.0.0/24",
      gke: { enabled: false },
    });
  });

  it("keeps an explicit zone and KMS key of the same project", () => {
    const kmsKey = "projects/sandbox-prod/locations/global/keyRings/r/cryptoKeys/k";
    const config = parseStackConfig(
      {
        ...valid,
        ...gcp({ region: "us-central1", zone: "us-central1-f", kmsKey, machineType: "n2-custom-4-16384" }),
      },
      "f",
    );
    expect(config.gcp).toMatchObject({ zone: "us-central1-f", kmsKey, machineType: "n2-custom-4-16384" });
  });

  it.each([
    [gcp({ project: "p" }), /^agent-sandbox:gcp\.project: must be a GCP project id/],
    [gcp({ project: "Sandbox_Prod" }), /^agent-sandbox:gcp\.project: must be a GCP project id/],
    [gcp({ project: "sandbox-prod-" }), /^agent-sandbox:gcp\.project: /],
    [gcp({ region: "europe west1" }), /^agent-sandbox:gcp\.region: must be a GCP region/],
    [gcp({ region: "eu" }), /^agent-sandbox:gcp\.region: must be a GCP region/],
    [gcp({ zone: "us-central1-a" }), /^agent-sandbox:gcp\.zone: must be a zone of region europe-west1/],
    [gcp({ machineType: "large" }), /^agent-sandbox:gcp\.machineType: must be a machine type/],
    [gcp({ machineType: "E2-STANDARD-4" }), /^agent-sandbox:gcp\.machineType: /],
    [gcp({ subnetCidr: "10.10.0.0/33" }), /^agent-sandbox:gcp\.subnetCidr: must be an IPv4 CIDR/],
    [gcp({ subnetCidr: "10.10.0.1/24" }), /^agent-sandbox:gcp\.subnetCidr: must be a network address/],
    [
      gcp({ adminSourceRanges: ["300.1.2.0/24"] }),
      /^agent-sandbox:gcp\.adminSourceRanges\.0: must be an IPv4 CIDR/,
    ],
    [gcp({ adminSourceRanges: [] }), /^agent-sandbox:gcp\.adminSourceRanges: needs at least one CIDR/],
    [gcp({ clientSourceRanges: ["0.0.0.0"] }), /^agent-sandbox:gcp\.clientSourceRanges\.0: /],
    [
      gcp({ kmsKey: "projects/other-project/locations/global/keyRings/r/cryptoKeys/k" }),
      /^agent-sandbox:gcp\.kmsKey: must be a key of project sandbox-prod/,
    ],
    [
      gcp({ gke: { enabled: true, podsCidr: "10.10.0.0/24" } }),
      /^agent-sandbox:gcp\.gke: subnetCidr, podsCidr and servicesCidr must differ/,
    ],
    [
      gcp({ gke: { enabled: true, sandboxMachineType: "big" } }),
      /^agent-sandbox:gcp\.gke\.sandboxMachineType: /,
    ],
    [gcp({ bucket: "Not A Bucket" }), /^agent-sandbox:gcp\.bucket: must be a bucket name/],
    [gcp({ domain: "Sandboxes.Example.com" }), /^agent-sandbox:gcp\.domain: must be a DNS name/],
    [gcp({ domain: "localhost" }), /^agent-sandbox:gcp\.domain: must be a DNS name/],
    [gcp({ domain: "https://sandboxes.example.com" }), /^agent-sandbox:gcp\.domain: must be a DNS name/],
    [gcp({ domain: "-x.example.com" }), /^agent-sandbox:gcp\.domain: must be a DNS name/],
    [gcp({ tls: { issuer: "self-signed" } }), /^agent-sandbox:gcp\.tls\.issuer: /],
    [
      gcp({ tls: { issuer: "internal", email: "ops@example.com" } }),
      /^agent-sandbox:gcp\.tls\.email: is only for issuer acme/,
    ],
    [
      gcp({ tls: { acmeDirectory: "http://acme.example.com/dir" } }),
      /^agent-sandbox:gcp\.tls\.acmeDirectory: must be an https:\/\/ URL/,
    ],
    [gcp({ tls: { email: "ops" } }), /^agent-sandbox:gcp\.tls\.email: must be an email address/],
    [gcp({ tls: { issuer: "acme", ca: "x" } }), /^agent-sandbox:gcp\.tls: /],
    [gcp({ firewall: { allow: [3128] } }), /^agent-sandbox:gcp: .*firewall/],
  ])("refuses a malformed value, naming the key (%#)", (overrides, expected) => {
    const problems = problemsOf(overrides);
    expect(
      problems.some((problem) => expected.test(problem)),
      problems.join("\n"),
    ).toBe(true);
  });

  it("the platform's domain is required, named with what it is for", () => {
    const withoutDomain: Record<string, unknown> = { ...valid["agent-sandbox:gcp"] };
    delete withoutDomain.domain;
    expect(problemsOf({ "agent-sandbox:gcp": withoutDomain })).toEqual([
      expect.stringMatching(/^agent-sandbox:gcp\.domain: /),
    ]);
  });

  it("the front door's certificates come from Let's Encrypt by default", () => {
    expect(parseStackConfig(valid, "f").gcp!.tls).toEqual({ issuer: "acme" });
  });

  it("refuses a public bucket, naming the key", () => {
    for (const value of ["inherited", "unspecified"]) {
      expect(problemsOf(gcp({ publicAccessPrevention: value }))).toEqual([
        'agent-sandbox:gcp.publicAccessPrevention: must be "enforced": the platform bucket holds tenant data and stack state and is never public',
      ]);
    }
  });

  it.each([
    // The front door's ports are public; a Squid moved onto one of them would be too.
    [{ "agent-sandbox:host": { squidPort: 443 } }, "agent-sandbox:host.squidPort", 443],
    [{ "agent-sandbox:host": { squidPort: 80 } }, "agent-sandbox:host.squidPort", 80],
    [{ "agent-sandbox:tenants": { sshPortRange: [3000, 4000] } }, "agent-sandbox:tenants.sshPortRange", 3128],
    // A moved Squid is still never opened.
    [
      {
        "agent-sandbox:host": { squidPort: 10500 },
        "agent-sandbox:tenants": { sshPortRange: [10000, 11000] },
      },
      "agent-sandbox:tenants.sshPortRange",
      10500,
    ],
  ])("refuses a config that would open Squid's port in the firewall (%#)", (overrides, key, port) => {
    expect(problemsOf(overrides)).toContain(
      `${key}: would open port ${port} (Squid) in the GCP firewall; the egress proxy is never reachable from outside the VM`,
    );
  });

  it("the same ports are fine on the local target, which has no cloud firewall", () => {
    expect(() =>
      parseStackConfig(
        { "agent-sandbox:target": "local", "agent-sandbox:tenants": { sshPortRange: [3000, 4000] } },
        "f",
      ),
    ).not.toThrow();
  });
});

describe("the kubernetes backend's settings (tenants.kubernetes, issue 20)", () => {
  const cluster = {
    kubeconfigFile: "/etc/agent-sandbox/kubeconfig",
    runtimeClassName: "gvisor",
    clusterDns: { namespace: "kube-system", podLabels: { "k8s-app": "kube-dns" } },
  };
  const tenants = (fields: Record<string, unknown>) => ({ "agent-sandbox:tenants": fields });

  it("gives each kubernetes tenant's spec its block, and only the tenant stacks the kubeconfig's text", async () => {
    const { tenantDefaults, tenantStackOptions } = await import("../../runtime/tenants/config.js");
    const { mkdtempSync, writeFileSync } = await import("node:fs");
    const os = await import("node:os");
    const path = await import("node:path");
    const dir = mkdtempSync(path.join(os.tmpdir(), "kubeconfig-config-"));
    const kubeconfigFile = path.join(dir, "kubeconfig");
    const config = parseStackConfig(
      { ...valid, ...tenants({ backend: "kubernetes", kubernetes: { ...cluster, kubeconfigFile } }) },
      "f",
    );
    const defaults = tenantDefaults(config);
    expect(defaults.backend).toBe("kubernetes");
    // The spec is recorded in the clear: the kubeconfig's path is not in it, nor its text.
    expect(defaults.kubernetes).toEqual({
      runtimeClassName: "gvisor",
      clusterDns: cluster.clusterDns,
      homeSize: "10Gi",
    });
    const options = tenantStackOptions(config, {});
    expect(() => options.kubeconfig!()).toThrow(
      `agent-sandbox:tenants.kubernetes.kubeconfigFile ${kubeconfigFile} cannot be read: ENOENT`,
    );
    writeFileSync(kubeconfigFile, "apiVersion: v1\nkind: Config\n");
    expect(options.kubeconfig!()).toBe("apiVersion: v1\nkind: Config\n");
    // Without the block, a tenant stack has no kubeconfig to give.
    expect(tenantStackOptions(parseStackConfig(valid, "f"), {}).kubeconfig).toBeUndefined();
  });

  it.each([
    [
      tenants({ backend: "kubernetes" }),
      "agent-sandbox:tenants.kubernetes: is required when tenants.backend is kubernetes (the cluster's kubeconfigFile and runtimeClassName)",
    ],
    [
      tenants({ kubernetes: { ...cluster, kubeconfigFile: "kubeconfig" } }),
      "agent-sandbox:tenants.kubernetes.kubeconfigFile: must be an absolute path",
    ],
    [
      tenants({ kubernetes: { ...cluster, runtimeClassName: undefined } }),
      "agent-sandbox:tenants.kubernetes.runtimeClassName: is required: the RuntimeClass sandboxes run under (gvisor on GKE Sandbox)",
    ],
    [
      // The first cut's shared proxy: every tenant now runs its own, with its allowlist.
      tenants({ kubernetes: { ...cluster, egressProxy: { namespace: "x", port: 3128 } } }),
      'agent-sandbox:tenants.kubernetes: Unrecognized key: "egressProxy"',
    ],
    [
      tenants({ kubernetes: { ...cluster, clusterDns: { namespace: "kube-system", podLabels: {} } } }),
      "agent-sandbox:tenants.kubernetes.clusterDns.podLabels: must select the DNS Pods",
    ],
  ])("refuses %j, naming the key", (overrides, message) => {
    expect(problemsOf(overrides)).toContain(message);
  });

  it("takes a cluster of the operator's own on the local target, but not GKE's credentials there", () => {
    const local = parseStackConfig(
      { "agent-sandbox:target": "local", ...tenants({ kubernetes: cluster }) },
      "Pulumi.local.yaml",
    );
    expect(local.tenants.kubernetes?.credentials).toBe("kubeconfig");
    expect(() =>
      parseStackConfig(
        { "agent-sandbox:target": "local", ...tenants({ kubernetes: { ...cluster, credentials: "gke" } }) },
        "Pulumi.local.yaml",
      ),
    ).toThrow(
      "agent-sandbox:tenants.kubernetes.credentials: gke needs target gcp (the runtime mints the Project Service account's token on GCP)",
    );
  });
});
