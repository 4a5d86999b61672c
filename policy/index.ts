// The policy pack: `pulumi preview --policy-pack policy` (rules in rules.ts).
import { PolicyPack } from "@pulumi/policy";
import { platformPolicies } from "./rules.js";

new PolicyPack("agent-sandbox-platform", { policies: platformPolicies });
