// A project's allowlist put in force in the host's shared Squid at once, with the code its stack's
// SquidTenant runs, ahead of the stack's update that records it (which then finds the files as they should be
// and changes nothing more). A warm-pool claim and an allowlist PATCH both do this: the first before it
// answers, the second inside its transaction, so the request's answer means the new allowlist holds.
import { readFile } from "node:fs/promises";
import type { TenantSpec } from "../../components/tenant/spec.js";
import {
  squidTenantFiles,
  squidTenantHandler,
  type SquidTenantInputs,
} from "../../provider/resources/squid-tenant.js";

const squidInputs = (spec: TenantSpec): SquidTenantInputs =>
  squidTenantHandler.inputs.parse({
    tenantId: spec.projectId,
    subnet: spec.subnet,
    domains: spec.allowlist,
    configFile: spec.host.squidConfigFile,
    fragmentsDir: spec.host.squidFragmentsDir,
  });

/**
 * SandboxBackend.applyAllowlist for a backend whose sandboxes egress through the host's shared Squid (a
 * container's, a microVM's), and a warm-pool claim's: `after`'s allowlist in Squid now, where the project's
 * stack has put its fragment in place (its SquidTenant exists); else nothing, and the stack's create or update
 * writes it (a fragment written for a stack that never made one would outlive it, and name a subnet the host
 * may give another project). Nothing either when Squid's files already say it (a create with the default
 * allowlist). Compared with the files, not with `before`: a request whose transaction failed after applying
 * its own leaves them changed, and the next one must not trust the recorded spec.
 */
export async function applyHostAllowlist(before: TenantSpec, after: TenantSpec): Promise<void> {
  const news = squidInputs(after);
  const expected = squidTenantFiles(news);
  const [fragment, domains] = await Promise.all([
    readFile(expected.fragment, "utf8").catch(() => undefined),
    readFile(expected.domainsFile, "utf8").catch(() => undefined),
  ]);
  if (fragment === undefined) return;
  if (fragment === expected.fragmentText && domains === expected.domainsText) return;
  const olds = squidInputs(before);
  await squidTenantHandler.update!(
    `squid-tenant-${after.projectId}`,
    { ...olds, ...squidTenantFiles(olds) },
    news,
  );
}
