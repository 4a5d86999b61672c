import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { z } from "zod";
import { BRIDGE_PREFIX } from "../../lib/constants.js";
import { changedKeys, type ResourceHandler } from "../handler.js";

const execFileAsync = promisify(execFile);

/** The lowest and highest cap a tenant may have, in kbit/s (tc's `kbit`: 1000 bits a second). */
export const BANDWIDTH_KBPS = { min: 64, max: 10_000_000 } as const;

/** Prefix of a tenant's IFB device, the one its uploads are shaped on (`sbi-` and the bridge's suffix). */
export const IFB_PREFIX = "sbi-";

const rate = z.number().int().min(BANDWIDTH_KBPS.min).max(BANDWIDTH_KBPS.max);

/**
 * A tenant's bandwidth caps, by `tc` on its bridge: `downloadKbps` shapes what the bridge sends towards the
 * sandbox (a TBF at the bridge's root: its downloads, proxied or not), `uploadKbps` what the sandbox sends
 * (the bridge's ingress redirected to an IFB device of its own with a TBF at its root). An absent one is not
 * shaped. Refresh reads what tc holds, so a qdisc removed by hand is drift.
 */
export const TrafficShaperInputs = z.object({
  tenantId: z
    .string()
    .regex(/^[a-z0-9][a-z0-9-]{0,39}$/, { message: "must be 1-40 lowercase letters, digits or '-'" }),
  bridge: z
    .string()
    .regex(/^[a-zA-Z0-9_.-]{1,15}$/, { message: "must be a Linux interface name (≤ 15 characters)" }),
  downloadKbps: rate.optional(),
  uploadKbps: rate.optional(),
});
export type TrafficShaperInputs = z.infer<typeof TrafficShaperInputs>;
/** What tc holds (`observed`) and the declared caps it does not (`missing`, empty when all hold). */
export type TrafficShaperOutputs = TrafficShaperInputs & {
  observed: { downloadKbps?: number; uploadKbps?: number };
  missing: string[];
};

/** The IFB device of a bridge: `sbx-<suffix>` → `sbi-<suffix>` (any other name: `sbi-` and its first 11). */
export const ifbDevice = (bridge: string): string =>
  `${IFB_PREFIX}${bridge.startsWith(BRIDGE_PREFIX) ? bridge.slice(BRIDGE_PREFIX.length) : bridge}`.slice(
    0,
    15,
  );

/**
 * A TBF's bucket for `kbps`: 40 ms of the rate, at least 32 KiB (a GSO packet through the bridge is up to
 * 64 KiB; TBF segments a larger one, but a bucket below a few packets makes the rate undershoot).
 */
export const burstBytes = (kbps: number): number => Math.max(Math.ceil((kbps * 125) / 25), 32_768);

const tbf = (device: string, kbps: number) => [
  "tc",
  "qdisc",
  "replace",
  "dev",
  device,
  "root",
  "handle",
  "1:",
  "tbf",
  "rate",
  `${kbps}kbit`,
  "burst",
  String(burstBytes(kbps)),
  "latency",
  "100ms",
];

/** One command of a shaping: its argv, and whether its failure is expected (removing what is not there). */
export interface ShapingCommand {
  readonly argv: readonly string[];
  readonly mayFail?: boolean;
}

/**
 * The commands that make the bridge's shaping what `t` declares, from whatever it has now (every one
 * idempotent: a cap is replaced in place; an absent one removed, if there). Pure: the unit tests read them.
 */
export function shapingCommands(
  t: Pick<TrafficShaperInputs, "bridge" | "downloadKbps" | "uploadKbps">,
): ShapingCommand[] {
  const ifb = ifbDevice(t.bridge);
  const download: ShapingCommand[] =
    t.downloadKbps === undefined
      ? [{ argv: ["tc", "qdisc", "del", "dev", t.bridge, "root"], mayFail: true }]
      : [{ argv: tbf(t.bridge, t.downloadKbps) }];
  // The ingress qdisc goes first and comes back with its one filter: no filter of another's survives it.
  const dropIngress: ShapingCommand = {
    argv: ["tc", "qdisc", "del", "dev", t.bridge, "ingress"],
    mayFail: true,
  };
  const upload: ShapingCommand[] =
    t.uploadKbps === undefined
      ? [dropIngress, { argv: ["ip", "link", "del", ifb], mayFail: true }]
      : [
          { argv: ["ip", "link", "add", ifb, "type", "ifb"], mayFail: true },
          { argv: ["ip", "link", "set", ifb, "up"] },
          { argv: tbf(ifb, t.uploadKbps) },
          dropIngress,
          { argv: ["tc", "qdisc", "add", "dev", t.bridge, "handle", "ffff:", "ingress"] },
          {
            argv: [
              "tc",
              "filter",
              "add",
              "dev",
              t.bridge,
              "parent",
              "ffff:",
              "protocol",
              "all",
              "prio",
              "1",
              "u32",
              "match",
              "u32",
              "0",
              "0",
              "action",
              "mirred",
              "egress",
              "redirect",
              "dev",
              ifb,
            ],
          },
        ];
  return [...download, ...upload];
}

interface Qdisc {
  kind?: string;
  handle?: string;
  root?: boolean;
  options?: { rate?: number };
}
interface Filter {
  options?: { actions?: { kind?: string; mirred_action?: string; to_dev?: string }[] };
}

/** A root TBF of ours (`tc -j qdisc show`), its rate in kbit/s; undefined without one. */
export function rootTbfKbps(qdiscs: readonly Qdisc[]): number | undefined {
  const root = qdiscs.find((q) => q.root === true && q.kind === "tbf" && q.handle === "1:");
  // tc prints a TBF's rate in bytes a second.
  return root?.options?.rate === undefined ? undefined : Math.round((root.options.rate * 8) / 1000);
}

/** Whether the bridge's ingress filters (`tc -j filter show ... ingress`) redirect to `ifb`. */
export function redirectsTo(filters: readonly Filter[], ifb: string): boolean {
  return filters.some((f) =>
    (f.options?.actions ?? []).some(
      (a) => a.kind === "mirred" && a.mirred_action === "redirect" && a.to_dev === ifb,
    ),
  );
}

/** The caps as written to a person: `download cap 8000 kbit/s on sbx-…`. */
const describeCap = (direction: "download" | "upload", kbps: number, device: string) =>
  `${direction} cap ${kbps} kbit/s on ${device}`;

/** The declared caps that tc does not hold as declared. Pure. */
export function missingCaps(
  t: Pick<TrafficShaperInputs, "bridge" | "downloadKbps" | "uploadKbps">,
  observed: TrafficShaperOutputs["observed"],
): string[] {
  const missing: string[] = [];
  if (t.downloadKbps !== undefined && observed.downloadKbps !== t.downloadKbps)
    missing.push(describeCap("download", t.downloadKbps, t.bridge));
  if (t.uploadKbps !== undefined && observed.uploadKbps !== t.uploadKbps)
    missing.push(describeCap("upload", t.uploadKbps, ifbDevice(t.bridge)));
  return missing;
}

async function tcJson<T>(args: readonly string[]): Promise<T[]> {
  try {
    const { stdout } = await execFileAsync("tc", ["-j", ...args]);
    return stdout.trim() === "" ? [] : (JSON.parse(stdout) as T[]);
  } catch {
    // No such device (a bridge or IFB gone): nothing of ours is there.
    return [];
  }
}

/** What tc holds on the bridge and its IFB device now. */
async function observe(bridge: string): Promise<TrafficShaperOutputs["observed"]> {
  const ifb = ifbDevice(bridge);
  const downloadKbps = rootTbfKbps(await tcJson<Qdisc>(["qdisc", "show", "dev", bridge]));
  const redirected = redirectsTo(await tcJson<Filter>(["filter", "show", "dev", bridge, "ingress"]), ifb);
  const uploadKbps = redirected ? rootTbfKbps(await tcJson<Qdisc>(["qdisc", "show", "dev", ifb])) : undefined;
  return {
    ...(downloadKbps === undefined ? {} : { downloadKbps }),
    ...(uploadKbps === undefined ? {} : { uploadKbps }),
  };
}

async function runAll(commands: readonly ShapingCommand[]): Promise<void> {
  for (const { argv, mayFail } of commands) {
    try {
      await execFileAsync(argv[0]!, argv.slice(1));
    } catch (error) {
      if (mayFail) continue;
      throw new Error(
        `${argv.join(" ")}: ${((error as { stderr?: string }).stderr ?? String(error)).trim()}`,
      );
    }
  }
}

async function apply(inputs: TrafficShaperInputs): Promise<TrafficShaperOutputs> {
  await runAll(shapingCommands(inputs));
  const observed = await observe(inputs.bridge);
  const missing = missingCaps(inputs, observed);
  if (missing.length > 0) throw new Error(`tc does not hold the ${missing.join(", ")} just set`);
  return { ...inputs, observed, missing };
}

export const trafficShaperHandler: ResourceHandler<TrafficShaperInputs, TrafficShaperOutputs> = {
  inputs: TrafficShaperInputs,

  async diff(_id, olds, news) {
    const changed = changedKeys(olds, news, ["bridge", "downloadKbps", "uploadKbps"]);
    // Caps found missing by a refresh make the resource differ from its declaration: `up` puts them back.
    return {
      changes: changed.length > 0 || (olds.missing?.length ?? 0) > 0,
      replaces: changedKeys(olds, news, ["tenantId", "bridge"]),
      deleteBeforeReplace: true,
    };
  },

  async create(inputs) {
    return { id: `traffic-shaper-${inputs.tenantId}`, outs: await apply(inputs) };
  },

  async read(_id, olds) {
    const observed = await observe(olds.bridge);
    return { ...olds, observed, missing: missingCaps(olds, observed) };
  },

  async update(_id, _olds, news) {
    return apply(news);
  },

  async delete(_id, olds) {
    await runAll(shapingCommands({ bridge: olds.bridge }));
  },
};
