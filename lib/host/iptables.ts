import {
  type BaselineRule,
  DEFAULT_FIREWALL_NAMES,
  describeChain,
  describeRule,
  firewallBaselineRules,
  type FirewallNames,
  firewallOwnChains,
  HOST_CHAINS_CREATED_WHEN_MISSING,
  type IptablesTable,
  tableArgs,
} from "./render.js";
import type { Check, HostPart } from "./check.js";
import { run, succeeds } from "../process.js";

export { DOCKER_USER, type BaselineRule } from "./render.js";

/** The released baseline's rules (the real chains); see lib/host/render.ts. */
export const baselineRules = (): BaselineRule[] => firewallBaselineRules();

const chainExists = (family: string, table: IptablesTable | undefined, chain: string) =>
  succeeds(family, ["-w", ...tableArgs(table), "-n", "-L", chain]);
/** `iptables -w [-t table] <action> <chain> [args]` for one of the baseline's rules. */
const ruleArgs = (rule: BaselineRule, action: string[]) => [
  "-w",
  ...tableArgs(rule.table),
  ...action,
  ...rule.spec,
];

/** What of the baseline is not in the kernel's tables right now (chains, then rules), described. */
export async function missingFirewallRules(names: FirewallNames = DEFAULT_FIREWALL_NAMES): Promise<string[]> {
  const missing: string[] = [];
  for (const own of [...HOST_CHAINS_CREATED_WHEN_MISSING, ...firewallOwnChains(names)]) {
    if (!(await chainExists(own.family, own.table, own.chain))) missing.push(describeChain(own));
  }
  for (const rule of firewallBaselineRules(names)) {
    if (!(await succeeds(rule.family, ruleArgs(rule, ["-C", rule.chain])))) missing.push(describeRule(rule));
  }
  return missing;
}

/** Creates what is missing of the baseline; rules already there are left alone (idempotent). */
export async function ensureFirewallRules(
  names: FirewallNames = DEFAULT_FIREWALL_NAMES,
  log: (line: string) => void = () => undefined,
): Promise<void> {
  for (const own of [...HOST_CHAINS_CREATED_WHEN_MISSING, ...firewallOwnChains(names)]) {
    if (!(await chainExists(own.family, own.table, own.chain))) {
      log(`creating ${describeChain(own)}`);
      await run(own.family, ["-w", ...tableArgs(own.table), "-N", own.chain]);
    }
  }
  // Inserted at the head, in order, so they precede any tenant rule and Docker's own ACCEPTs.
  const position = new Map<string, number>();
  for (const rule of firewallBaselineRules(names)) {
    const key = `${rule.family}/${rule.table ?? "filter"}/${rule.chain}`;
    const at = (position.get(key) ?? 0) + 1;
    position.set(key, at);
    if (!(await succeeds(rule.family, ruleArgs(rule, ["-C", rule.chain])))) {
      log(`adding ${describeRule(rule)}`);
      await run(rule.family, ruleArgs(rule, ["-I", rule.chain, String(at)]));
    }
  }
}

/**
 * Removes the baseline: the jumps from the host's chains (every copy of them), then the project's own
 * chains with whatever they hold. Host chains themselves (INPUT, FORWARD, DOCKER-USER) stay.
 */
export async function removeFirewallRules(names: FirewallNames = DEFAULT_FIREWALL_NAMES): Promise<void> {
  const own = firewallOwnChains(names);
  const isOwn = (rule: BaselineRule) =>
    own.some((c) => c.family === rule.family && c.table === rule.table && c.chain === rule.chain);
  for (const rule of firewallBaselineRules(names)) {
    if (isOwn(rule)) continue; // goes with its chain
    while (await succeeds(rule.family, ruleArgs(rule, ["-C", rule.chain]))) {
      await run(rule.family, ruleArgs(rule, ["-D", rule.chain]));
    }
  }
  for (const { family, table, chain } of own) {
    if (!(await chainExists(family, table, chain))) continue;
    await run(family, ["-w", ...tableArgs(table), "-F", chain]);
    await run(family, ["-w", ...tableArgs(table), "-X", chain]);
  }
}

export function firewallBaseline(names: FirewallNames = DEFAULT_FIREWALL_NAMES): HostPart {
  const name = "firewall";
  const probe = async (): Promise<Check> => {
    const missing = await missingFirewallRules(names);
    return missing.length === 0
      ? {
          name,
          ready: true,
          detail: `chains ${names.inputChain}, ${names.forwardChain} (+ ip6 ${names.forwardChain}) in place`,
        }
      : { name, ready: false, detail: `missing: ${missing.join("; ")}` };
  };
  return {
    name,
    probe,
    async ensure(log) {
      await ensureFirewallRules(names, log);
      return probe();
    },
  };
}
