import {
  type BaselineRule,
  DEFAULT_FIREWALL_NAMES,
  describeRule,
  firewallBaselineRules,
  type FirewallNames,
  firewallOwnChains,
  HOST_CHAINS_CREATED_WHEN_MISSING,
} from "./render.js";
import type { Check, HostPart } from "./check.js";
import { run, succeeds } from "../process.js";

export { DOCKER_USER, type BaselineRule } from "./render.js";

/** The released baseline's rules (the real chains); see lib/host/render.ts. */
export const baselineRules = (): BaselineRule[] => firewallBaselineRules();

const chainExists = (family: string, chain: string) => succeeds(family, ["-w", "-n", "-L", chain]);

/** What of the baseline is not in the kernel's tables right now (chains, then rules), described. */
export async function missingFirewallRules(names: FirewallNames = DEFAULT_FIREWALL_NAMES): Promise<string[]> {
  const missing: string[] = [];
  for (const { family, chain } of [...HOST_CHAINS_CREATED_WHEN_MISSING, ...firewallOwnChains(names)]) {
    if (!(await chainExists(family, chain))) missing.push(`${family} chain ${chain}`);
  }
  for (const rule of firewallBaselineRules(names)) {
    if (!(await succeeds(rule.family, ["-w", "-C", rule.chain, ...rule.spec])))
      missing.push(describeRule(rule));
  }
  return missing;
}

/** Creates what is missing of the baseline; rules already there are left alone (idempotent). */
export async function ensureFirewallRules(
  names: FirewallNames = DEFAULT_FIREWALL_NAMES,
  log: (line: string) => void = () => undefined,
): Promise<void> {
  for (const { family, chain } of [...HOST_CHAINS_CREATED_WHEN_MISSING, ...firewallOwnChains(names)]) {
    if (!(await chainExists(family, chain))) {
      log(`creating ${family} chain ${chain}`);
      await run(family, ["-w", "-N", chain]);
    }
  }
  // Inserted at the head, in order, so they precede any tenant rule and Docker's own ACCEPTs.
  const position = new Map<string, number>();
  for (const rule of firewallBaselineRules(names)) {
    const key = `${rule.family}/${rule.chain}`;
    const at = (position.get(key) ?? 0) + 1;
    position.set(key, at);
    if (!(await succeeds(rule.family, ["-w", "-C", rule.chain, ...rule.spec]))) {
      log(`adding ${describeRule(rule)}`);
      await run(rule.family, ["-w", "-I", rule.chain, String(at), ...rule.spec]);
    }
  }
}

/**
 * Removes the baseline: the jumps from the host's chains (every copy of them), then the project's own
 * chains with whatever they hold. Host chains themselves (INPUT, FORWARD, DOCKER-USER) stay.
 */
export async function removeFirewallRules(names: FirewallNames = DEFAULT_FIREWALL_NAMES): Promise<void> {
  const own = firewallOwnChains(names);
  const isOwn = (family: string, chain: string) => own.some((c) => c.family === family && c.chain === chain);
  for (const rule of firewallBaselineRules(names)) {
    if (isOwn(rule.family, rule.chain)) continue; // goes with its chain
    while (await succeeds(rule.family, ["-w", "-C", rule.chain, ...rule.spec])) {
      await run(rule.family, ["-w", "-D", rule.chain, ...rule.spec]);
    }
  }
  for (const { family, chain } of own) {
    if (!(await chainExists(family, chain))) continue;
    await run(family, ["-w", "-F", chain]);
    await run(family, ["-w", "-X", chain]);
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
