import { z } from "zod";
import { describeRule, firewallBaselineRules, validateFirewallNames } from "../../lib/host/render.js";
import { ensureFirewallRules, missingFirewallRules, removeFirewallRules } from "../../lib/host/iptables.js";
import { changedKeys, type ResourceHandler } from "../handler.js";

/**
 * The host's firewall baseline (lib/host/render.ts): the project's chains, the jumps into them
 * from INPUT, FORWARD and DOCKER-USER (ip6 FORWARD too), the metadata-address block and the IPv6 drop.
 */
export const FirewallBaselineInputs = z
  .object({
    inputChain: z.string(),
    forwardChain: z.string(),
    bridgeMatch: z.string(),
  })
  .superRefine((names, context) => {
    for (const problem of validateFirewallNames(names)) {
      const [key] = problem.split(":");
      context.addIssue({ code: "custom", message: problem, path: key?.includes(" ") ? [] : [key!] });
    }
  });
export type FirewallBaselineInputs = z.infer<typeof FirewallBaselineInputs>;
export type FirewallBaselineOutputs = FirewallBaselineInputs & { rules: string[]; missing: string[] };

const names = (inputs: FirewallBaselineInputs) => ({
  inputChain: inputs.inputChain,
  forwardChain: inputs.forwardChain,
  bridgeMatch: inputs.bridgeMatch,
});

async function apply(inputs: FirewallBaselineInputs): Promise<FirewallBaselineOutputs> {
  await ensureFirewallRules(names(inputs));
  const missing = await missingFirewallRules(names(inputs));
  if (missing.length > 0) throw new Error(`firewall baseline still incomplete: ${missing.join("; ")}`);
  return { ...names(inputs), rules: firewallBaselineRules(names(inputs)).map(describeRule), missing };
}

export const firewallBaselineHandler: ResourceHandler<FirewallBaselineInputs, FirewallBaselineOutputs> = {
  inputs: FirewallBaselineInputs,

  async diff(_id, olds, news) {
    const changed = changedKeys(olds, news, ["inputChain", "forwardChain", "bridgeMatch"]);
    // A flushed chain or a deleted jump (found by refresh) is drift: `up` puts the rules back.
    // Renamed chains are new chains; the old ones go first, as both may share a name with the new set.
    return {
      changes: changed.length > 0 || (olds.missing?.length ?? 0) > 0,
      replaces: changed,
      deleteBeforeReplace: true,
    };
  },

  async create(inputs) {
    return { id: `firewall-${inputs.inputChain}-${inputs.forwardChain}`, outs: await apply(inputs) };
  },

  async read(_id, olds) {
    const missing = await missingFirewallRules(names(olds));
    return { ...names(olds), rules: firewallBaselineRules(names(olds)).map(describeRule), missing };
  },

  update: (_id, _olds, news) => apply(news),

  async delete(_id, olds) {
    await removeFirewallRules(names(olds));
  },
};
