import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import { z } from "zod";
import { changedKeys, type ResourceHandler } from "../handler.js";
import { parseCidr, parseIPv4 } from "../../lib/ipv4.js";
import { isAtomicTemp, writeFileAtomic } from "../../lib/files.js";
import { reconfigureSquid } from "../../lib/host/squid.js";

const execFileAsync = promisify(execFile);

/** A host name or a `.domain` (the domain and its subdomains); never an IP literal or a wildcard. */
const DOMAIN = /^\.?(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z][a-z0-9-]{0,61}[a-z0-9]$/;

/**
 * One tenant's egress allowlist in the shared Squid: a config fragment plus a domain list. A change is
 * validated with `squid -k parse` against a copy of every fragment before it replaces anything, so a
 * bad fragment never reaches the running proxy that the other tenants use.
 */
export const SquidTenantInputs = z.object({
  tenantId: z
    .string()
    .regex(/^[a-z0-9][a-z0-9-]{0,39}$/, { message: "must be 1-40 lowercase letters, digits or '-'" }),
  subnet: z.string().refine((s) => parseCidr(s) !== undefined, { message: "must be an IPv4 CIDR" }),
  domains: z
    .array(
      z
        .string()
        .transform((d) => d.trim().toLowerCase())
        .refine((d) => DOMAIN.test(d) && parseIPv4(d.replace(/^\./, "")) === undefined, {
          message: "must be a host name like api.example.com or .example.com (no IP addresses, no wildcards)",
        }),
    )
    .min(1, { message: "needs at least one domain (an empty allowlist is a stopped sandbox's job)" }),
  configFile: z.string().startsWith("/"),
  fragmentsDir: z.string().startsWith("/"),
});
export type SquidTenantInputs = z.infer<typeof SquidTenantInputs>;
export type SquidTenantOutputs = SquidTenantInputs & {
  fragment: string;
  domainsFile: string;
  fragmentText: string;
  domainsText: string;
};

/** Drops entries another entry already covers: Squid warns about, and may reject, overlapping dstdomains. */
export function normalizeDomains(domains: readonly string[]): string[] {
  const unique = [...new Set(domains)];
  const wildcard = new Set(unique.filter((d) => d.startsWith(".")).map((d) => d.slice(1)));
  return unique
    .filter((d) => {
      const host = d.replace(/^\./, "");
      const parents = host.split(".").map((_, i, parts) => parts.slice(i).join("."));
      // covered by ".parent" for a strict parent, or by ".host" when this is the bare host
      return !parents.some((parent, i) => wildcard.has(parent) && (i > 0 || !d.startsWith(".")));
    })
    .sort();
}

export function squidTenantFiles(inputs: SquidTenantInputs, dir = inputs.fragmentsDir) {
  const acl = `tenant_${inputs.tenantId.replace(/-/g, "_")}`;
  const domainsFile = path.join(dir, `tenant-${inputs.tenantId}.domains`);
  const fragmentText = [
    `# tenant ${inputs.tenantId}: written by its stack (sandbox:host:SquidTenant); do not edit by hand`,
    `acl ${acl}_src src ${inputs.subnet}`,
    // -n: match names only, never reverse-resolve an IP destination into an allowed name.
    `acl ${acl}_domains dstdomain -n "${domainsFile}"`,
    // Evaluated left to right, stopping at the first mismatch: the destination (a DNS lookup) is checked
    // only for this tenant's allowed names, and an allowed name that resolves inward is refused.
    `http_access allow ${acl}_src ${acl}_domains !to_localhost !to_linklocal !to_private !to_host_self`,
    `http_access deny ${acl}_src`,
    "",
  ].join("\n");
  return {
    fragment: path.join(dir, `tenant-${inputs.tenantId}.conf`),
    domainsFile,
    fragmentText,
    domainsText: `${normalizeDomains(inputs.domains).join("\n")}\n`,
  };
}

async function squid(args: string[]): Promise<void> {
  try {
    await execFileAsync("squid", args, { timeout: 30_000 });
  } catch (error) {
    const output = `${(error as { stdout?: string }).stdout ?? ""}${(error as { stderr?: string }).stderr ?? ""}`;
    const fatal = output.split("\n").filter((line) => /FATAL|ERROR|Bungled|No running copy/i.test(line));
    throw new Error(
      `squid ${args.join(" ")}: ${(fatal.length ? fatal : output.trim().split("\n").slice(-3)).join(" | ")}`,
    );
  }
}

/** Parses the whole config as it would be with this tenant's new files, in a scratch copy. */
async function validateWith(inputs: SquidTenantInputs): Promise<void> {
  const base = await fs.readFile(inputs.configFile, "utf8").catch(() => {
    throw new Error(`Squid base config ${inputs.configFile} is missing: bring up the host baseline first`);
  });
  const include = `include ${inputs.fragmentsDir}/*.conf`;
  if (!base.includes(include))
    throw new Error(`${inputs.configFile} does not include ${inputs.fragmentsDir}/*.conf`);
  const scratch = path.join(
    path.dirname(inputs.fragmentsDir),
    `.candidate-${randomBytes(6).toString("hex")}`,
  );
  await fs.mkdir(scratch, { recursive: true });
  try {
    const own = squidTenantFiles(inputs);
    for (const file of await fs.readdir(inputs.fragmentsDir)) {
      if (!file.endsWith(".conf") || path.join(inputs.fragmentsDir, file) === own.fragment) continue;
      await fs.copyFile(path.join(inputs.fragmentsDir, file), path.join(scratch, file));
    }
    const candidate = squidTenantFiles(inputs, scratch);
    await fs.writeFile(candidate.domainsFile, candidate.domainsText);
    await fs.writeFile(candidate.fragment, candidate.fragmentText);
    const config = path.join(scratch, "main.squid"); // not *.conf: the include glob must not match itself
    await fs.writeFile(config, base.replace(include, `include ${scratch}/*.conf`));
    await squid(["-k", "parse", "-f", config]);
  } finally {
    await fs.rm(scratch, { recursive: true, force: true });
  }
}

async function readOrUndefined(file: string): Promise<string | undefined> {
  return fs.readFile(file, "utf8").catch(() => undefined);
}

async function apply(inputs: SquidTenantInputs): Promise<SquidTenantOutputs> {
  await validateWith(inputs);
  const files = squidTenantFiles(inputs);
  const previous = {
    fragment: await readOrUndefined(files.fragment),
    domains: await readOrUndefined(files.domainsFile),
  };
  await writeFileAtomic(files.domainsFile, files.domainsText, "0644");
  await writeFileAtomic(files.fragment, files.fragmentText, "0644");
  try {
    await reconfigureSquid(inputs.configFile, () => squid(["-k", "reconfigure", "-f", inputs.configFile]));
  } catch (error) {
    // Put back what was there, so the state and the disk keep agreeing.
    for (const [file, text] of [
      [files.fragment, previous.fragment],
      [files.domainsFile, previous.domains],
    ] as const) {
      if (text === undefined) await fs.rm(file, { force: true });
      else await writeFileAtomic(file, text, "0644");
    }
    throw new Error(
      `Squid did not reload, tenant ${inputs.tenantId}'s allowlist was not applied: ${(error as Error).message}`,
    );
  }
  return { ...inputs, ...files };
}

export const squidTenantHandler: ResourceHandler<SquidTenantInputs, SquidTenantOutputs> = {
  inputs: SquidTenantInputs,

  async diff(_id, olds, news) {
    const expected = squidTenantFiles(news);
    const changed = [
      ...changedKeys(olds, news, ["tenantId", "subnet", "domains", "configFile", "fragmentsDir"]),
      ...changedKeys(olds, expected, ["fragmentText", "domainsText"]),
    ];
    return {
      changes: changed.length > 0,
      replaces: changedKeys(olds, news, ["tenantId", "fragmentsDir"]),
      deleteBeforeReplace: true,
    };
  },

  async create(inputs) {
    return { id: `squid-tenant-${inputs.tenantId}`, outs: await apply(inputs) };
  },

  async read(_id, olds) {
    const files = squidTenantFiles(olds);
    const [fragmentText, domainsText] = await Promise.all([
      readOrUndefined(files.fragment),
      readOrUndefined(files.domainsFile),
    ]);
    if (fragmentText === undefined && domainsText === undefined) return undefined;
    return { ...olds, ...files, fragmentText: fragmentText ?? "", domainsText: domainsText ?? "" };
  },

  update: (_id, _olds, news) => apply(news),

  async delete(_id, olds) {
    const files = squidTenantFiles(olds);
    await fs.rm(files.fragment, { force: true });
    await fs.rm(files.domainsFile, { force: true });
    // A write of them killed before its rename (the runtime or its provider killed mid-write) left
    // a temporary file: it goes with them.
    for (const name of await fs.readdir(path.dirname(files.fragment)).catch(() => [] as string[]))
      if (isAtomicTemp(name, files.fragment) || isAtomicTemp(name, files.domainsFile))
        await fs.rm(path.join(path.dirname(files.fragment), name), { force: true });
    await reconfigureSquid(olds.configFile, () => squid(["-k", "reconfigure", "-f", olds.configFile])).catch(
      () => undefined, // a stopped Squid loads nothing anyway
    );
  },
};
