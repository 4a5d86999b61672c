import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { z } from "zod";
import { BRIDGE_PREFIX, CHAINS, INSTANCE_ID } from "../../lib/constants.js";
import { changedKeys, type ResourceHandler } from "../handler.js";
import { parseCidr, parseIPv4 } from "../../lib/ipv4.js";

const execFileAsync = promisify(execFile);

/**
 * One tenant's rules in the project's own chains: the tenant's bridge may reach
 * its own gateway on the proxy port and nothing else on the host, nothing is forwarded out of it, and only
 * the sandbox's SSH port is forwarded into it. Every rule carries the tenant's comment tag, so refresh
 * can check them one by one and delete never touches another tenant's rules.
 */
export const TenantFirewallInputs = z.object({
  tenantId: z
    .string()
    .regex(/^[a-z0-9][a-z0-9-]{0,39}$/, { message: "must be 1-40 lowercase letters, digits or '-'" }),
  bridge: z
    .string()
    .regex(/^[a-zA-Z0-9_.-]{1,15}$/, { message: "must be a Linux interface name (≤ 15 characters)" }),
  subnet: z.string().refine((s) => parseCidr(s) !== undefined, { message: "must be an IPv4 CIDR" }),
  gateway: z.string().refine((s) => parseIPv4(s) !== undefined, { message: "must be an IPv4 address" }),
  proxyPort: z.number().int().min(1).max(65535),
  sshPort: z.number().int().min(1).max(65535).default(2222),
  /** The credential gateway's port on the tenant's gateway address, if the platform runs one. */
  gatewayPort: z.number().int().min(1).max(65535).optional(),
  /** The platform instance whose tenant this is (in every rule's comment); absent in stacks made before it. */
  instance: z
    .string()
    .regex(INSTANCE_ID, { message: "must be 1-32 lowercase letters, digits or '-'" })
    .optional(),
});
export type TenantFirewallInputs = z.infer<typeof TenantFirewallInputs>;
export type TenantFirewallOutputs = TenantFirewallInputs & { rules: string[]; missing: string[] };

interface Rule {
  readonly chain: string;
  readonly spec: readonly string[];
}

/**
 * The comment every rule of a tenant carries: `agent-sandbox:tenant=<id>:instance=<instance>`, or the
 * older `agent-sandbox:tenant=<id>` of stacks made before instances. The tenant part comes first, so a
 * search for `agent-sandbox:tenant=<id>` finds both.
 */
export const tenantTag = (tenantId: string, instance?: string) =>
  instance === undefined
    ? `agent-sandbox:tenant=${tenantId}`
    : `agent-sandbox:tenant=${tenantId}:instance=${instance}`;

/** The tenant and instance a rule's comment names, or `undefined` for a comment that is not a tenant tag. */
export function parseTenantTag(comment: string): { tenantId: string; instance?: string } | undefined {
  const match =
    /^agent-sandbox:tenant=([a-z0-9][a-z0-9-]{0,39})(?::instance=([a-z0-9][a-z0-9-]{0,31}))?$/.exec(comment);
  if (!match) return undefined;
  return match[2] === undefined ? { tenantId: match[1]! } : { tenantId: match[1]!, instance: match[2] };
}

/** The comment of a rule as `iptables -S` prints it (parsed by {@link parseSavedRule}), if it has one. */
export function ruleComment(tokens: readonly string[]): string | undefined {
  const at = tokens.indexOf("--comment");
  return at >= 0 ? tokens[at + 1] : undefined;
}

/** The tenant's rules, in order. Pure: the unit tests read them as the contract. */
export function tenantFirewallRules(t: TenantFirewallInputs): Rule[] {
  const tag = ["-m", "comment", "--comment", tenantTag(t.tenantId, t.instance)];
  const established = ["-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED"];
  // A service on the tenant's own gateway address, from the tenant's own subnet on its own bridge.
  const toGateway = (port: number) => [
    "-i",
    t.bridge,
    "-s",
    t.subnet,
    "-d",
    `${t.gateway}/32`,
    "-p",
    "tcp",
    "--dport",
    String(port),
    ...tag,
    "-j",
    "ACCEPT",
  ];
  return [
    { chain: CHAINS.input, spec: toGateway(t.proxyPort) },
    // The credential gateway, on the tenant's own gateway address only (as the proxy).
    ...(t.gatewayPort === undefined ? [] : [{ chain: CHAINS.input, spec: toGateway(t.gatewayPort) }]),
    // Replies to connections the host opened into the sandbox (e.g. a published SSH port).
    { chain: CHAINS.input, spec: ["-i", t.bridge, ...established, ...tag, "-j", "ACCEPT"] },
    { chain: CHAINS.input, spec: ["-i", t.bridge, ...tag, "-j", "DROP"] },
    // SSH in from the host's side only: without `! -i sbx-+`, this rule (appended in creation order) also
    // accepted a later tenant's packets before that tenant's own DROP below, so one sandbox could reach
    // another's sshd.
    {
      chain: CHAINS.forward,
      spec: [
        "-o",
        t.bridge,
        "!",
        "-i",
        `${BRIDGE_PREFIX}+`,
        "-p",
        "tcp",
        "--dport",
        String(t.sshPort),
        ...tag,
        "-j",
        "ACCEPT",
      ],
    },
    { chain: CHAINS.forward, spec: ["-i", t.bridge, ...established, ...tag, "-j", "ACCEPT"] },
    { chain: CHAINS.forward, spec: ["-i", t.bridge, ...tag, "-j", "DROP"] },
    { chain: CHAINS.forward, spec: ["-o", t.bridge, ...tag, "-j", "DROP"] },
  ];
}

const describeRule = (rule: Rule) => `-A ${rule.chain} ${rule.spec.join(" ")}`;

async function iptables(args: readonly string[]): Promise<void> {
  try {
    await execFileAsync("iptables", ["-w", ...args]);
  } catch (error) {
    throw new Error(
      `iptables ${args.join(" ")}: ${((error as { stderr?: string }).stderr ?? String(error)).trim()}`,
    );
  }
}

async function present(rule: Rule): Promise<boolean> {
  try {
    await execFileAsync("iptables", ["-w", "-C", rule.chain, ...rule.spec]);
    return true;
  } catch {
    return false;
  }
}

/**
 * `iptables -S` prints a rule as arguments; values with characters of the shell's are double-quoted
 * (`--comment "agent-sandbox:tenant=x"`). Our rules contain no spaces, so splitting on spaces and
 * dropping those quotes gives back the exact arguments.
 */
export function parseSavedRule(line: string): string[] {
  return line
    .trim()
    .split(" ")
    .map((token) => token.replace(/^"(.*)"$/, "$1"));
}

/** Every rule in the project's chains, as `iptables -S` prints it, split into arguments. */
export async function savedRules(): Promise<string[][]> {
  const rules: string[][] = [];
  for (const chain of [CHAINS.input, CHAINS.forward]) {
    const { stdout } = await execFileAsync("iptables", ["-w", "-S", chain]).catch(() => ({ stdout: "" }));
    rules.push(
      ...stdout
        .split("\n")
        .filter((line) => line.startsWith("-A "))
        .map(parseSavedRule),
    );
  }
  return rules;
}

/** Deletes one rule as {@link savedRules} gives it (`-A <chain> <spec...>`), by its exact spec. */
export async function deleteSavedRule([, chain, ...spec]: readonly string[]): Promise<void> {
  await iptables(["-D", chain!, ...spec]);
}

/**
 * Deletes every rule carrying the tenant's tag (of this instance: another instance's tenant of the same id
 * keeps its rules), by exact spec (never by line number, which another tenant's concurrent change could
 * shift).
 */
export async function deleteTenantRules(tenantId: string, instance?: string): Promise<number> {
  let deleted = 0;
  const tag = tenantTag(tenantId, instance);
  for (const rule of await savedRules()) {
    if (ruleComment(rule) !== tag) continue;
    await deleteSavedRule(rule);
    deleted++;
  }
  return deleted;
}

async function apply(inputs: TenantFirewallInputs): Promise<TenantFirewallOutputs> {
  const missingChains = [];
  for (const chain of [CHAINS.input, CHAINS.forward]) {
    const exists = await execFileAsync("iptables", ["-w", "-n", "-L", chain]).then(
      () => true,
      () => false,
    );
    if (!exists) missingChains.push(chain);
  }
  if (missingChains.length > 0) {
    throw new Error(`chains ${missingChains.join(", ")} are missing: bring up the host baseline first`);
  }
  // The rules it has now go only once the new ones are in: removed first, the sandbox's bridge had no rule of
  // its own for the moment between, and the host forwards what no rule drops (Docker accepts a bridge's
  // traffic out), so a running sandbox's connection in that moment went straight out (the attack table saw
  // one, session 35). Until the old ones go, both sets are in and the old ones, above, decide: closed.
  const tag = tenantTag(inputs.tenantId, inputs.instance);
  const before = (await savedRules()).filter((rule) => ruleComment(rule) === tag);
  const rules = tenantFirewallRules(inputs);
  const added: typeof rules = [];
  try {
    for (const rule of rules) {
      await iptables(["-A", rule.chain, ...rule.spec]);
      added.push(rule);
    }
  } catch (error) {
    // Back to what it had: each added rule out again (an equal old one above it goes instead, which leaves
    // the same rules).
    for (const rule of added) await iptables(["-D", rule.chain, ...rule.spec]).catch(() => undefined);
    throw error;
  }
  // By exact spec, which deletes the first rule that matches: the old one, above its new equal.
  for (const rule of before) await deleteSavedRule(rule);
  return { ...inputs, rules: rules.map(describeRule), missing: [] };
}

export const tenantFirewallHandler: ResourceHandler<TenantFirewallInputs, TenantFirewallOutputs> = {
  inputs: TenantFirewallInputs,

  async diff(_id, olds, news) {
    const keys = [
      "tenantId",
      "bridge",
      "subnet",
      "gateway",
      "proxyPort",
      "sshPort",
      "instance",
      "gatewayPort",
    ] as const;
    const changed = changedKeys(olds, news, keys);
    // Rules found missing by a refresh make the resource differ from its declaration: `up` puts them back.
    return {
      changes: changed.length > 0 || (olds.missing?.length ?? 0) > 0,
      replaces: changedKeys(olds, news, ["tenantId"]),
    };
  },

  async create(inputs) {
    return { id: `tenant-firewall-${inputs.tenantId}`, outs: await apply(inputs) };
  },

  async read(_id, olds) {
    const rules = tenantFirewallRules(olds);
    const missing: string[] = [];
    for (const rule of rules) if (!(await present(rule))) missing.push(describeRule(rule));
    return { ...olds, rules: rules.map(describeRule), missing };
  },

  async update(_id, olds, news) {
    const outs = await apply(news);
    // A new comment (a stack made before instances, now given one) leaves the old rules behind otherwise;
    // they go after the new ones are in, as in apply.
    if (olds.instance !== news.instance) await deleteTenantRules(olds.tenantId, olds.instance);
    return outs;
  },

  async delete(_id, olds) {
    await deleteTenantRules(olds.tenantId, olds.instance);
  },
};
