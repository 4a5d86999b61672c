// applyHostAllowlist (runtime/tenants/allowlist.ts), where it writes nothing: a project whose stack has not put
// its Squid fragment in place (a fragment written for a stack that never made one would outlive it, naming a
// subnet the host may give to another project), and one whose files already say the allowlist. The Squid here
// has no config: a write would try to validate one and fail. Writing the new allowlist is the integration
// tests' (project-settings: a PATCH's allowlist holds when it answers; warm-pool: a claim's).
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { TenantSpec } from "../../components/tenant/spec.js";
import { squidTenantFiles } from "../../provider/resources/squid-tenant.js";
import { applyHostAllowlist } from "../../runtime/tenants/allowlist.js";

const dir = mkdtempSync(path.join(os.tmpdir(), "host-allowlist-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const spec = (allowlist: string[]) =>
  TenantSpec.parse({
    projectId: "00000000-0000-4000-8000-000000000001",
    ownerId: "u",
    mode: "local",
    image: "i",
    subnet: "10.100.9.0/24",
    sshHostPort: 10009,
    sshPublicKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIK0pgY1m6sCU6Ehv5ZpbyhbUZ3ltrgxvUkP+GqBw9DLr owner",
    allowlist,
    host: {
      squidPort: 3128,
      squidConfigFile: path.join(dir, "squid.conf"),
      squidFragmentsDir: path.join(dir, "tenants"),
      backupRoot: path.join(dir, "backups"),
      secretsRoot: path.join(dir, "secrets"),
    },
  });
const filesOf = (s: TenantSpec) =>
  squidTenantFiles({
    tenantId: s.projectId,
    subnet: s.subnet,
    domains: s.allowlist,
    configFile: s.host.squidConfigFile,
    fragmentsDir: s.host.squidFragmentsDir,
  });

describe("applyHostAllowlist", () => {
  const before = spec(["a.example.test"]);
  const after = spec(["b.example.test"]);

  it("writes nothing for a project whose stack has not put its fragment in place", async () => {
    mkdirSync(before.host.squidFragmentsDir, { recursive: true });
    await applyHostAllowlist(before, after);
    expect(readdirSync(before.host.squidFragmentsDir)).toEqual([]);
    expect(existsSync(filesOf(after).domainsFile)).toBe(false);
  });

  it("changes nothing where Squid's files already say the allowlist", async () => {
    const files = filesOf(after);
    writeFileSync(files.fragment, files.fragmentText);
    writeFileSync(files.domainsFile, files.domainsText);
    await applyHostAllowlist(before, after);
    expect(readdirSync(after.host.squidFragmentsDir).sort()).toEqual(
      [path.basename(files.domainsFile), path.basename(files.fragment)].sort(),
    );
  });

  it("otherwise applies it with the stack's own code, which refuses a config it cannot validate", async () => {
    // The fragment in place with `after`'s allowlist (above): `before`'s is written through SquidTenant's update,
    // which validates the whole config first (missing here) and so changes nothing.
    await expect(applyHostAllowlist(after, before)).rejects.toThrow(/Squid base config .* is missing/);
    expect(readFileSync(filesOf(after).domainsFile, "utf8")).toBe(filesOf(after).domainsText);
  });
});
