import * as gcp from "@pulumi/gcp";
import * as pulumi from "@pulumi/pulumi";
import { GCP, PORTS } from "../../lib/constants.js";

/** One ingress flow the firewall lets in: a port (or range) from some sources, with why. */
export interface IngressFlow {
  /** Suffix of the rule's name. */
  readonly id: string;
  readonly description: string;
  /** A port or a `low-high` range. */
  readonly ports: string;
  readonly sourceRanges: readonly string[];
}

/** Arguments of {@link PlatformNetwork}. */
export interface PlatformNetworkArgs {
  readonly project: string;
  readonly region: string;
  readonly subnetCidr: string;
  /** Port 22: admin SSH. */
  readonly adminSourceRanges: readonly string[];
  /** The front door (HTTPS and HTTP: the API, terminals, dev servers) and the sandboxes' SSH ports. */
  readonly clientSourceRanges: readonly string[];
  readonly sshPortRange: readonly [number, number];
  /** Never opened, whatever else is (default 3128). */
  readonly squidPort: number;
  /** Secondary ranges for a VPC-native GKE cluster, when there is one. */
  readonly gke?: { readonly podsCidr: string; readonly servicesCidr: string };
}

const portsOf = (flow: Pick<IngressFlow, "ports">): [number, number] => {
  const [low, high] = flow.ports.split("-").map(Number) as [number, number?];
  return [low, high ?? low];
};

/** The flows in (admin SSH, the front door's HTTPS and HTTP, sandbox SSH): one rule each, nothing else. */
export function ingressFlows(args: PlatformNetworkArgs): IngressFlow[] {
  const [low, high] = args.sshPortRange;
  return [
    {
      id: "admin-ssh",
      description: "Admin SSH to the host VM (port 22), from the admin source ranges only",
      ports: "22",
      sourceRanges: args.adminSourceRanges,
    },
    {
      id: "https",
      description: `The front door over TLS (port ${GCP.httpsPort}): the API, the web console, terminals and dev servers`,
      ports: String(GCP.httpsPort),
      sourceRanges: args.clientSourceRanges,
    },
    {
      id: "http",
      description: `The front door's plain HTTP (port ${GCP.httpPort}): redirects to HTTPS and ACME's HTTP challenge only`,
      ports: String(GCP.httpPort),
      sourceRanges: args.clientSourceRanges,
    },
    {
      id: "sandbox-ssh",
      description: `SSH into sandboxes: host ports ${low}-${high} mapped to each sandbox's sshd`,
      ports: `${low}-${high}`,
      sourceRanges: args.clientSourceRanges,
    },
  ];
}

/** Problems that must stop the program before anything is planned (Squid's port opened, an empty source). */
export function validatePlatformNetworkArgs(args: PlatformNetworkArgs): string[] {
  const problems: string[] = [];
  const never = [...new Set([PORTS.squid, args.squidPort])];
  for (const flow of ingressFlows(args)) {
    const [low, high] = portsOf(flow);
    if (!(low >= 1 && high <= 65535 && low <= high))
      problems.push(`${flow.id}: ports ${flow.ports} are not a port range`);
    for (const port of never.filter((p) => p >= low && p <= high))
      problems.push(`${flow.id}: ports ${flow.ports} include ${port} (Squid), which is never opened`);
    if (flow.sourceRanges.length === 0) problems.push(`${flow.id}: no source ranges`);
  }
  return problems;
}

/**
 * The platform's VPC: one subnet, one ingress rule per flow targeting the host VM's tag, and an explicit
 * lowest-priority deny of everything else (GCP's implied deny does the same, but is neither visible nor
 * logged).
 */
export class PlatformNetwork extends pulumi.ComponentResource {
  public readonly networkId: pulumi.Output<string>;
  public readonly subnetworkId: pulumi.Output<string>;
  public readonly hostTag: string;
  public readonly firewallNames: pulumi.Output<string[]>;
  /** Names of the subnet's secondary ranges, when GKE is enabled. */
  public readonly podsRangeName: string;
  public readonly servicesRangeName: string;

  constructor(name: string, args: PlatformNetworkArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:gcp:PlatformNetwork", name, {}, opts);
    const problems = validatePlatformNetworkArgs(args);
    if (problems.length > 0) throw new pulumi.ResourceError(problems.join("; "), this);
    this.hostTag = GCP.hostTag;
    this.podsRangeName = `${name}-pods`;
    this.servicesRangeName = `${name}-services`;

    const network = new gcp.compute.Network(
      `${name}-vpc`,
      {
        project: args.project,
        autoCreateSubnetworks: false,
        description: "Agent sandbox platform",
      },
      { parent: this },
    );
    const subnet = new gcp.compute.Subnetwork(
      `${name}-subnet`,
      {
        project: args.project,
        region: args.region,
        network: network.id,
        ipCidrRange: args.subnetCidr,
        privateIpGoogleAccess: true,
        secondaryIpRanges: args.gke
          ? [
              { rangeName: this.podsRangeName, ipCidrRange: args.gke.podsCidr },
              { rangeName: this.servicesRangeName, ipCidrRange: args.gke.servicesCidr },
            ]
          : [],
      },
      { parent: this },
    );

    const rules = ingressFlows(args).map(
      (flow) =>
        new gcp.compute.Firewall(
          `${name}-allow-${flow.id}`,
          {
            project: args.project,
            network: network.id,
            direction: "INGRESS",
            description: flow.description,
            priority: 1000,
            allows: [{ protocol: "tcp", ports: [flow.ports] }],
            sourceRanges: [...flow.sourceRanges],
            targetTags: [GCP.hostTag],
            logConfig: { metadata: "EXCLUDE_ALL_METADATA" },
          },
          { parent: this },
        ),
    );
    const denyRest = new gcp.compute.Firewall(
      `${name}-deny-rest`,
      {
        project: args.project,
        network: network.id,
        direction: "INGRESS",
        description: `Everything else closed, Squid's port ${args.squidPort} included (seed 000 §7.2)`,
        priority: 65534,
        denies: [{ protocol: "all" }],
        sourceRanges: ["0.0.0.0/0"],
        logConfig: { metadata: "EXCLUDE_ALL_METADATA" },
      },
      { parent: this },
    );

    this.networkId = network.id;
    this.subnetworkId = subnet.id;
    this.firewallNames = pulumi.all([...rules, denyRest].map((rule) => rule.name));
    this.registerOutputs({
      networkId: this.networkId,
      subnetworkId: this.subnetworkId,
      firewallNames: this.firewallNames,
    });
  }
}
