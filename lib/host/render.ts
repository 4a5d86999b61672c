/**
 * The host baseline's configuration as text, rendered from host-config/ by pure functions. Both targets
 * use these: the local target applies them to this machine (provider resources), the GCP target writes
 * them into the VM's startup configuration. One source, so the two hosts cannot drift apart.
 */
import { readFileSync } from "node:fs";
import * as path from "node:path";
import { BRIDGE_PREFIX, CHAINS, METADATA_ADDRESS, SANDBOX_SSH_PORT } from "../constants.js";
import { REPO_ROOT } from "../toolchain.js";

const HOST_CONFIG_DIR = path.join(REPO_ROOT, "host-config");

/** Fills `{{name}}` placeholders in a file under host-config/; a missing or unused value is an error. */
export function renderHostConfig(relativePath: string, values: Record<string, string | number>): string {
  const template = readFileSync(path.join(HOST_CONFIG_DIR, relativePath), "utf8");
  const used = new Set<string>();
  const rendered = template.replace(/\{\{(\w+)\}\}/g, (_match, key: string) => {
    const value = values[key];
    if (value === undefined) throw new Error(`host-config/${relativePath}: no value for {{${key}}}`);
    used.add(key);
    return String(value);
  });
  const unused = Object.keys(values).filter((key) => !used.has(key));
  if (unused.length > 0) throw new Error(`host-config/${relativePath}: unused values ${unused.join(", ")}`);
  return rendered;
}

// ---- firewall -------------------------------------------------------------------------------------

export type IptablesFamily = "iptables" | "ip6tables";
/**
 * The tables the baseline writes: `filter` (absent: the default), and `security`, whose FORWARD runs after
 * filter's and which Docker never edits (the gate, {@link firewallBaselineRules}).
 */
export type IptablesTable = "security";

/** The arguments that name a rule's table (none for filter). */
export const tableArgs = (table: IptablesTable | undefined): string[] => (table ? ["-t", table] : []);

/** Docker's chain for user rules, traversed first by every forwarded packet (docs: "Docker and iptables"). */
export const DOCKER_USER = "DOCKER-USER";

/**
 * The names the firewall baseline uses. The defaults are the released ones ({@link CHAINS}); a test
 * host takes its own so it never touches the real chains.
 */
export interface FirewallNames {
  readonly inputChain: string;
  readonly forwardChain: string;
  /** iptables interface match for tenant bridges (`sbx-+`). */
  readonly bridgeMatch: string;
}

export const DEFAULT_FIREWALL_NAMES: FirewallNames = {
  inputChain: CHAINS.input,
  forwardChain: CHAINS.forward,
  bridgeMatch: `${BRIDGE_PREFIX}+`,
};

/**
 * Where a sandbox host keeps its parts: what `agent-sandbox:host` (stacks/config.ts, which must satisfy
 * this) says, as the components and daemons below the config see it.
 */
export interface HostLayout {
  readonly dockerSocket: string;
  readonly squidPort: number;
  readonly registryPort: number;
  /** The front door (lib/host/caddy.ts) and its admin API; without them the baseline runs no front door. */
  readonly frontDoorPort?: number;
  readonly frontDoorAdminPort?: number;
  readonly configDir: string;
  readonly dataDir: string;
  readonly logDir: string;
  readonly runDir: string;
  readonly firewall: FirewallNames;
}

/** A rule the baseline keeps at the head of a chain (or a jump into one of the project's chains). */
export interface BaselineRule {
  readonly family: IptablesFamily;
  /** Absent: filter. */
  readonly table?: IptablesTable;
  readonly chain: string;
  readonly spec: readonly string[];
}

const comment = (text: string) => ["-m", "comment", "--comment", `agent-sandbox: ${text}`];

/** The comment of the gate's rule for what leaves a tenant bridge: its counter is what the gate dropped. */
export const GATE_OUT_COMMENT = "agent-sandbox: only replies leave a tenant bridge";

/** iptables chain names: at most 28 characters, no spaces, not starting with '-'. */
export function validateFirewallNames(names: FirewallNames): string[] {
  const problems: string[] = [];
  for (const key of ["inputChain", "forwardChain"] as const) {
    if (!/^[A-Za-z0-9][A-Za-z0-9_-]{0,27}$/.test(names[key]))
      problems.push(`${key}: '${names[key]}' is not a valid chain name (1-28 letters, digits, '-', '_')`);
  }
  if (names.inputChain === names.forwardChain) problems.push("inputChain and forwardChain must differ");
  if (!/^[a-zA-Z0-9_.-]{1,14}\+?$/.test(names.bridgeMatch))
    problems.push(`bridgeMatch: '${names.bridgeMatch}' is not an interface match such as sbx-+`);
  return problems;
}

/**
 * The host's firewall baseline, in order: one jump from each host chain into the project's own chains,
 * then the rules every tenant gets before its own (tenant rules come from the tenant stacks), then the gate.
 * Nothing else in the host's tables is read or changed.
 *
 * The gate: the same chain name in the security table, whose FORWARD the kernel runs after filter's. Docker
 * (20.10, Debian 12's) makes a network by inserting its rules at the head of filter's FORWARD, its ACCEPT of
 * every bridge's traffic out among them, and only then deletes and inserts again FORWARD's jump to DOCKER-USER:
 * for that moment, each time, a tenant bridge's packets met Docker's ACCEPT before any rule of ours (1,134 of
 * 1,404 connection attempts got out while 40 networks were made beside a sandbox:
 * tests/security/docker-churn.test.ts). Docker never touches the security table. The gate repeats what the
 * tenants' rules say of every tenant at once: from a tenant bridge only replies leave (a new connection goes
 * to the tenant's own gateway, which is input, not forward), into one only SSH and replies enter. While filter
 * holds, the gate sees nothing it drops, and the counters of the tenants' rules still count every probe.
 */
export function firewallBaselineRules(names: FirewallNames = DEFAULT_FIREWALL_NAMES): BaselineRule[] {
  const bridges = names.bridgeMatch;
  const notAReply = ["-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED"];
  const security = "security" as const;
  return [
    { family: "iptables", chain: "INPUT", spec: ["-j", names.inputChain] },
    // Docker inserts each network's ACCEPT rules at the top of FORWARD, above any jump of ours, and sends
    // FORWARD through DOCKER-USER first, but not while it makes a network (the gate, above): jump from both.
    { family: "iptables", chain: DOCKER_USER, spec: ["-j", names.forwardChain] },
    { family: "iptables", chain: "FORWARD", spec: ["-j", names.forwardChain] },
    {
      family: "iptables",
      chain: names.forwardChain,
      spec: ["-i", bridges, "-d", `${METADATA_ADDRESS}/32`, ...comment("no metadata server"), "-j", "DROP"],
    },
    {
      family: "iptables",
      chain: names.inputChain,
      spec: ["-i", bridges, "-d", `${METADATA_ADDRESS}/32`, ...comment("no metadata server"), "-j", "DROP"],
    },
    { family: "ip6tables", chain: "FORWARD", spec: ["-j", names.forwardChain] },
    {
      family: "ip6tables",
      chain: names.forwardChain,
      spec: ["-i", bridges, ...comment("no IPv6 out"), "-j", "DROP"],
    },
    {
      family: "ip6tables",
      chain: names.forwardChain,
      spec: ["-o", bridges, ...comment("no IPv6 in"), "-j", "DROP"],
    },
    { family: "iptables", table: security, chain: "FORWARD", spec: ["-j", names.forwardChain] },
    {
      family: "iptables",
      table: security,
      chain: names.forwardChain,
      spec: ["-i", bridges, ...notAReply, "-m", "comment", "--comment", GATE_OUT_COMMENT, "-j", "DROP"],
    },
    {
      family: "iptables",
      table: security,
      chain: names.forwardChain,
      spec: [
        ...["-o", bridges, "-p", "tcp", "--dport", String(SANDBOX_SSH_PORT)],
        ...["-m", "conntrack", "--ctstate", "NEW", ...comment("ssh into a sandbox"), "-j", "RETURN"],
      ],
    },
    {
      family: "iptables",
      table: security,
      chain: names.forwardChain,
      spec: [
        "-o",
        bridges,
        ...notAReply,
        ...comment("only ssh and replies enter a tenant bridge"),
        "-j",
        "DROP",
      ],
    },
    { family: "ip6tables", table: security, chain: "FORWARD", spec: ["-j", names.forwardChain] },
    {
      family: "ip6tables",
      table: security,
      chain: names.forwardChain,
      spec: ["-i", bridges, ...comment("no IPv6 out"), "-j", "DROP"],
    },
    {
      family: "ip6tables",
      table: security,
      chain: names.forwardChain,
      spec: ["-o", bridges, ...comment("no IPv6 in"), "-j", "DROP"],
    },
  ];
}

/** The project's own chains (created and, on destroy, removed). */
export function firewallOwnChains(
  names: FirewallNames = DEFAULT_FIREWALL_NAMES,
): { family: IptablesFamily; table?: IptablesTable; chain: string }[] {
  return [
    { family: "iptables", chain: names.inputChain },
    { family: "iptables", chain: names.forwardChain },
    { family: "ip6tables", chain: names.forwardChain },
    { family: "iptables", table: "security", chain: names.forwardChain },
    { family: "ip6tables", table: "security", chain: names.forwardChain },
  ];
}

/**
 * Host chains the baseline jumps from that may be missing: DOCKER-USER exists only once Docker has run
 * (Docker adopts an existing one), so it is created when absent and never removed.
 */
export const HOST_CHAINS_CREATED_WHEN_MISSING: readonly {
  family: IptablesFamily;
  table?: IptablesTable;
  chain: string;
}[] = [{ family: "iptables", chain: DOCKER_USER }];

/** A chain of the baseline as its missing-list and its log name it: family, table (but filter), name. */
export const describeChain = (c: { family: IptablesFamily; table?: IptablesTable; chain: string }) =>
  [c.family, ...(c.table ? [c.table] : []), "chain", c.chain].join(" ");

export const describeRule = (rule: BaselineRule) =>
  [rule.family, ...tableArgs(rule.table), "-A", rule.chain, ...rule.spec].join(" ");

const shellWord = (word: string) => (/^[A-Za-z0-9_.:/+=-]+$/.test(word) ? word : `'${word}'`);

/**
 * The same baseline as an idempotent shell script (for a VM's startup configuration): chains created
 * when missing, each rule inserted at its position at the head of its chain unless already present.
 */
export function renderFirewallScript(names: FirewallNames = DEFAULT_FIREWALL_NAMES): string {
  const lines = ["#!/bin/sh", "# agent-sandbox firewall baseline (rendered by lib/host/render.ts)", "set -e"];
  for (const { family, table, chain } of [...HOST_CHAINS_CREATED_WHEN_MISSING, ...firewallOwnChains(names)]) {
    const command = [family, "-w", ...tableArgs(table)].join(" ");
    lines.push(`${command} -n -L ${chain} >/dev/null 2>&1 || ${command} -N ${chain}`);
  }
  const position = new Map<string, number>();
  for (const rule of firewallBaselineRules(names)) {
    const key = `${rule.family}/${rule.table ?? "filter"}/${rule.chain}`;
    const at = (position.get(key) ?? 0) + 1;
    position.set(key, at);
    const spec = rule.spec.map(shellWord).join(" ");
    const command = [rule.family, "-w", ...tableArgs(rule.table)].join(" ");
    lines.push(
      `${command} -C ${rule.chain} ${spec} 2>/dev/null || ${command} -I ${rule.chain} ${at} ${spec}`,
    );
  }
  return `${lines.join("\n")}\n`;
}

// ---- squid ----------------------------------------------------------------------------------------

export interface SquidDirs {
  readonly configDir: string;
  readonly logDir: string;
  readonly runDir: string;
}

/** Where the project's Squid keeps its base config, tenant fragments, pid file and logs. */
export function squidPaths(dirs: SquidDirs) {
  return {
    config: path.join(dirs.configDir, "squid", "squid.conf"),
    fragmentsDir: path.join(dirs.configDir, "squid", "tenants"),
    baselineFragment: path.join(dirs.configDir, "squid", "tenants", "00-baseline.conf"),
    pidFile: path.join(dirs.runDir, "squid.pid"),
    logDir: path.join(dirs.logDir, "squid"),
  };
}

export interface SquidRenderOptions extends SquidDirs {
  readonly port: number;
  /** The resolvers Squid asks (default: the host's /etc/resolv.conf). */
  readonly dnsNameservers?: readonly string[];
  /** Names Squid resolves before asking DNS (default /etc/hosts). */
  readonly hostsFile?: string;
  /** The host's own addresses outside the private ranges (none known: loopback stands in). */
  readonly hostAddresses?: readonly string[];
  /** Squid's workers (default {@link SQUID_HOST_WORKERS}); see the base config for why more than one. */
  readonly workers?: number;
}

/**
 * The host's Squid runs two workers, so one tenant's allowlist change (a reconfigure) never refuses another
 * tenant's connection: the coordinator holds the shared port while the workers re-read the config.
 */
export const SQUID_HOST_WORKERS = 2;

/** The Squid base config (`squid.conf`): never an open proxy; tenant fragments allow, the rest is denied. */
export function renderSquidConf(options: SquidRenderOptions): string {
  const paths = squidPaths(options);
  return renderHostConfig("squid/squid.conf", {
    port: options.port,
    workers: options.workers ?? SQUID_HOST_WORKERS,
    pidFile: paths.pidFile,
    cacheLog: path.join(paths.logDir, "cache.log"),
    accessLog: `stdio:${path.join(paths.logDir, "access.log")}`,
    fragmentsDir: paths.fragmentsDir,
    hostsFile: options.hostsFile ?? "/etc/hosts",
    hostAddresses: options.hostAddresses?.length ? options.hostAddresses.join(" ") : "127.0.0.1",
  }).concat(options.dnsNameservers?.length ? `dns_nameservers ${options.dnsNameservers.join(" ")}\n` : "");
}

/** The always-present fragment that keeps the base config's include glob non-empty. */
export function renderSquidBaselineFragment(): string {
  return renderHostConfig("squid/00-baseline.conf", {});
}

// ---- registry -------------------------------------------------------------------------------------

/** Debian docker-registry's config: storage under `storageDir`, loopback only. */
export function renderRegistryConfig(options: { storageDir: string; port: number }): string {
  return renderHostConfig("registry/config.yml", {
    storageDir: options.storageDir,
    listen: `127.0.0.1:${options.port}`,
  });
}
