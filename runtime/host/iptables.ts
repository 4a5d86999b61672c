import { BRIDGE_PREFIX, CHAINS, METADATA_ADDRESS } from "../../components/constants.js";
import type { Check, HostPart } from "./check.js";
import { run, succeeds } from "./process.js";

type Family = "iptables" | "ip6tables";

/** Docker's chain for user rules, traversed first by every forwarded packet (docs: "Docker and iptables"). */
export const DOCKER_USER = "DOCKER-USER";

/** A rule the baseline keeps at the head of one of the project's chains (or a jump into one). */
export interface BaselineRule {
  readonly family: Family;
  readonly chain: string;
  readonly spec: readonly string[];
}

const bridges = `${BRIDGE_PREFIX}+`;
const comment = (text: string) => ["-m", "comment", "--comment", `agent-sandbox: ${text}`];

/**
 * The host's firewall baseline: the project's own chains, one jump from each host chain into them, and
 * the rules every tenant gets before its own (tenant rules come from the tenant stacks). Nothing else in
 * the host's tables is read or changed.
 */
export function baselineRules(): BaselineRule[] {
  return [
    { family: "iptables", chain: "INPUT", spec: ["-j", CHAINS.input] },
    // Docker inserts each network's ACCEPT rules at the top of FORWARD, above any jump of ours, but it
    // always sends FORWARD through DOCKER-USER first and never edits that chain: jump from there.
    { family: "iptables", chain: DOCKER_USER, spec: ["-j", CHAINS.forward] },
    { family: "iptables", chain: "FORWARD", spec: ["-j", CHAINS.forward] },
    {
      family: "iptables",
      chain: CHAINS.forward,
      spec: ["-i", bridges, "-d", `${METADATA_ADDRESS}/32`, ...comment("no metadata server"), "-j", "DROP"],
    },
    {
      family: "iptables",
      chain: CHAINS.input,
      spec: ["-i", bridges, "-d", `${METADATA_ADDRESS}/32`, ...comment("no metadata server"), "-j", "DROP"],
    },
    { family: "ip6tables", chain: "FORWARD", spec: ["-j", CHAINS.forward] },
    {
      family: "ip6tables",
      chain: CHAINS.forward,
      spec: ["-i", bridges, ...comment("no IPv6 out"), "-j", "DROP"],
    },
    {
      family: "ip6tables",
      chain: CHAINS.forward,
      spec: ["-o", bridges, ...comment("no IPv6 in"), "-j", "DROP"],
    },
  ];
}

/** Chains the baseline creates when missing (DOCKER-USER too: Docker adopts an existing one). */
const OWN_CHAINS: readonly { family: Family; chain: string }[] = [
  { family: "iptables", chain: CHAINS.input },
  { family: "iptables", chain: CHAINS.forward },
  { family: "iptables", chain: DOCKER_USER },
  { family: "ip6tables", chain: CHAINS.forward },
];

const describeRule = (rule: BaselineRule) => `${rule.family} -A ${rule.chain} ${rule.spec.join(" ")}`;

async function missingRules(): Promise<string[]> {
  const missing: string[] = [];
  for (const { family, chain } of OWN_CHAINS) {
    if (!(await succeeds(family, ["-w", "-n", "-L", chain]))) missing.push(`${family} chain ${chain}`);
  }
  for (const rule of baselineRules()) {
    if (!(await succeeds(rule.family, ["-w", "-C", rule.chain, ...rule.spec])))
      missing.push(describeRule(rule));
  }
  return missing;
}

export function firewallBaseline(): HostPart {
  const name = "firewall";
  const probe = async (): Promise<Check> => {
    const missing = await missingRules();
    return missing.length === 0
      ? {
          name,
          ready: true,
          detail: `chains ${CHAINS.input}, ${CHAINS.forward} (+ ip6 ${CHAINS.forward}) in place`,
        }
      : { name, ready: false, detail: `missing: ${missing.join("; ")}` };
  };
  return {
    name,
    probe,
    async ensure(log) {
      for (const { family, chain } of OWN_CHAINS) {
        if (!(await succeeds(family, ["-w", "-n", "-L", chain]))) {
          log(`creating ${family} chain ${chain}`);
          await run(family, ["-w", "-N", chain]);
        }
      }
      // Inserted at the head, in order, so they precede any tenant rule and Docker's own ACCEPTs.
      const position = new Map<string, number>();
      for (const rule of baselineRules()) {
        const key = `${rule.family}/${rule.chain}`;
        const at = (position.get(key) ?? 0) + 1;
        position.set(key, at);
        if (!(await succeeds(rule.family, ["-w", "-C", rule.chain, ...rule.spec]))) {
          log(`adding ${describeRule(rule)}`);
          await run(rule.family, ["-w", "-I", rule.chain, String(at), ...rule.spec]);
        }
      }
      return probe();
    },
  };
}
