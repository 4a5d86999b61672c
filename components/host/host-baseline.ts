import * as pulumi from "@pulumi/pulumi";
import * as path from "node:path";
import { hostPublicAddresses } from "../../lib/host/net.js";
import { registryInstance } from "../../lib/host/registry.js";
import { ContainerEngine } from "../resources/container-engine.js";
import { FirewallBaseline } from "../resources/firewall-baseline.js";
import { HostDirectory } from "../resources/host-directory.js";
import { HostFile } from "../resources/host-file.js";
import { RegistryService } from "../resources/registry-service.js";
import { SquidService } from "../resources/squid-service.js";
import { CaddyService } from "../resources/caddy-service.js";
import {
  renderRegistryConfig,
  renderSquidBaselineFragment,
  renderSquidConf,
  squidPaths,
  validateFirewallNames,
  type HostLayout,
} from "../../lib/host/render.js";

/** Inputs of {@link HostBaseline}. */
export interface HostBaselineArgs {
  /** The host section of the stack config (`agent-sandbox:host`), already validated. */
  readonly host: HostLayout;
  /** Names Squid resolves before asking DNS (default /etc/hosts). */
  readonly squidHostsFile?: string;
  /** The runtime's API (`127.0.0.1:<port>`), which the front door asks about the dev servers it finds. */
  readonly runtimeApi?: string;
}

/** Problems with the args, each naming the `agent-sandbox:host` field (empty when valid). */
export function validateHostBaselineArgs(args: HostBaselineArgs): string[] {
  const problems = validateFirewallNames(args.host.firewall).map((p) => `host.firewall.${p}`);
  if (args.host.squidPort === args.host.registryPort)
    problems.push(`host.squidPort and host.registryPort are both ${args.host.squidPort}`);
  return problems;
}

/**
 * The sandbox host's baseline on the machine the provider plugin runs on (the local target): the container
 * engine's API socket, the project's iptables chains with the metadata block and the IPv6 drop, Squid's
 * base config and service, the local image registry, the front door's Caddy and the local backup remote. Every piece has a real
 * `read`, so a hand-made change to the host is drift that `pulumi preview --refresh` shows and `up` repairs.
 * The config text comes from ./render.ts, as the GCP host's startup configuration does.
 */
export class HostBaseline extends pulumi.ComponentResource {
  public readonly engine: ContainerEngine;
  public readonly firewall: FirewallBaseline;
  public readonly squid: SquidService;
  public readonly imageRegistry: RegistryService;
  /** The front door for dev servers (docs/front-door.md): tenant stacks add their routes to it. */
  public readonly frontDoor: CaddyService | undefined;
  /** `127.0.0.1:<port>`: where snapshots are pushed. */
  public readonly registry: pulumi.Output<string>;
  /** The local backup remote: sandboxes' backups are synced into per-project directories below it. */
  public readonly backupDir: pulumi.Output<string>;
  public readonly squidPort: pulumi.Output<number>;

  constructor(name: string, args: HostBaselineArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:host:HostBaseline", name, {}, opts);
    const problems = validateHostBaselineArgs(args);
    if (problems.length > 0) throw new pulumi.ResourceError(problems.join("; "), this);
    const host = args.host;
    const child = { parent: this };

    this.engine = new ContainerEngine(
      `${name}-engine`,
      { socket: host.dockerSocket, logDir: host.logDir, runDir: host.runDir },
      child,
    );
    // After the engine: Docker creates DOCKER-USER and puts its own rules in FORWARD first (the gate, in the
    // security table, is the baseline's part Docker never touches: lib/host/render.ts).
    this.firewall = new FirewallBaseline(`${name}-firewall`, host.firewall, {
      ...child,
      dependsOn: [this.engine],
    });

    const squid = squidPaths(host);
    const fragment = new HostFile(
      `${name}-squid-baseline`,
      { path: squid.baselineFragment, content: renderSquidBaselineFragment() },
      child,
    );
    const squidConf = new HostFile(
      `${name}-squid-conf`,
      {
        path: squid.config,
        // The local target runs on the host itself: its public addresses are known here.
        content: renderSquidConf({
          ...host,
          port: host.squidPort,
          hostsFile: args.squidHostsFile,
          hostAddresses: hostPublicAddresses(),
        }),
      },
      child,
    );
    this.squid = new SquidService(
      `${name}-squid`,
      {
        port: host.squidPort,
        config: squidConf.path,
        pidFile: squid.pidFile,
        logDir: squid.logDir,
        configSha256: squidConf.sha256,
      },
      { ...child, dependsOn: [fragment, this.firewall] },
    );

    const registry = registryInstance({ ...host, port: host.registryPort });
    const registryConf = new HostFile(
      `${name}-registry-conf`,
      {
        path: registry.config,
        content: renderRegistryConfig({ storageDir: registry.storageDir, port: registry.port }),
      },
      child,
    );
    this.imageRegistry = new RegistryService(
      `${name}-registry`,
      { ...registry, config: registryConf.path, configSha256: registryConf.sha256 },
      child,
    );

    this.frontDoor =
      host.frontDoorPort === undefined || host.frontDoorAdminPort === undefined
        ? undefined
        : new CaddyService(
            `${name}-front-door`,
            {
              port: host.frontDoorPort,
              adminPort: host.frontDoorAdminPort,
              configDir: host.configDir,
              logDir: host.logDir,
              runDir: host.runDir,
              ...(args.runtimeApi ? { devServersAuthUpstream: args.runtimeApi } : {}),
            },
            child,
          );

    const backups = new HostDirectory(
      `${name}-backups`,
      { path: path.join(host.dataDir, "backups"), uid: 0, gid: 0, mode: "0755", deleteContents: false },
      child,
    );

    this.registry = pulumi.interpolate`127.0.0.1:${this.imageRegistry.port}`;
    this.backupDir = backups.path;
    this.squidPort = this.squid.port;
    this.registerOutputs({
      engine: this.engine,
      firewall: this.firewall,
      squid: this.squid,
      imageRegistry: this.imageRegistry,
      frontDoor: this.frontDoor,
      registry: this.registry,
      backupDir: this.backupDir,
      squidPort: this.squidPort,
    });
  }
}
