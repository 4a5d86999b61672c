import * as pulumi from "@pulumi/pulumi";
import { SquidTenantInputs } from "../../provider/resources/squid-tenant.js";
import { SquidTenant } from "../resources/squid-tenant.js";
import { TenantFirewall } from "../resources/tenant-firewall.js";

/** Arguments of {@link TenantEgress}. */
export interface TenantEgressArgs {
  readonly projectId: string;
  readonly bridge: pulumi.Input<string>;
  readonly subnet: pulumi.Input<string>;
  readonly gateway: pulumi.Input<string>;
  readonly proxyPort: number;
  readonly sshPort: number;
  /** Names the sandbox may reach through the proxy (`.example.com` includes subdomains). */
  readonly allowlist: readonly string[];
  readonly squidConfigFile: string;
  readonly squidFragmentsDir: string;
  /** The platform instance, in the firewall rules' comments (absent for tenants made before instances). */
  readonly instance?: string;
  /** The credential gateway's port on the tenant's gateway address, if the platform runs one. */
  readonly gatewayPort?: number;
}

/** Problems with the allowlist, worded for the project's owner. */
export function validateTenantEgressArgs(args: Pick<TenantEgressArgs, "allowlist">): string[] {
  const parsed = SquidTenantInputs.shape.domains.safeParse(args.allowlist);
  return parsed.success
    ? []
    : parsed.error.issues.map((issue) => {
        const index = issue.path[0];
        return typeof index === "number"
          ? `allowlist entry ${JSON.stringify(args.allowlist[index])}: ${issue.message}`
          : `allowlist: ${issue.message}`;
      });
}

/**
 * The tenant's egress lockdown, declared so drift detection sees a tampered firewall: iptables rules
 * keyed by the tenant's bridge and subnet (only its own gateway's proxy port is reachable), and its
 * Squid allowlist. The rules go in before the allowlist, so the sandbox is never reachable-but-unfiltered.
 * A sandbox waits for {@link firewall} only: until Squid has the tenant's fragment, the base config refuses
 * the subnet (`http_access deny all`), so the allowlist goes in beside the sandbox's start, not before it.
 */
export class TenantEgress extends pulumi.ComponentResource {
  /** The rules: what a sandbox starts after (nothing leaves its bridge but to its own gateway's proxy). */
  public readonly firewall: TenantFirewall;
  public readonly rules: pulumi.Output<string[]>;
  public readonly allowlistFile: pulumi.Output<string>;

  constructor(name: string, args: TenantEgressArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:tenant:Egress", name, {}, opts);
    const problems = validateTenantEgressArgs(args);
    if (problems.length > 0) throw new pulumi.ResourceError(problems.join("; "), this);
    const firewall = new TenantFirewall(
      `${name}-firewall`,
      {
        tenantId: args.projectId,
        bridge: args.bridge,
        subnet: args.subnet,
        gateway: args.gateway,
        proxyPort: args.proxyPort,
        sshPort: args.sshPort,
        instance: args.instance,
        gatewayPort: args.gatewayPort,
      },
      { parent: this },
    );
    const squid = new SquidTenant(
      `${name}-allowlist`,
      {
        tenantId: args.projectId,
        subnet: args.subnet,
        domains: [...args.allowlist],
        configFile: args.squidConfigFile,
        fragmentsDir: args.squidFragmentsDir,
      },
      { parent: this, dependsOn: [firewall] },
    );
    this.firewall = firewall;
    this.rules = firewall.rules;
    this.allowlistFile = squid.domainsFile;
    this.registerOutputs({ rules: this.rules, allowlistFile: this.allowlistFile });
  }
}
