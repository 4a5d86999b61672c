// A platform instance's identity (issue 14, orphan sweep): derived from its state backend, carried in the
// tenant spec, written into every firewall rule's comment and read back from it, old comments included.
import { mkdtempSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { TenantSpec } from "../../components/tenant/spec.js";
import { INSTANCE_ID } from "../../lib/constants.js";
import {
  parseSavedRule,
  parseTenantTag,
  ruleComment,
  tenantFirewallRules,
  tenantTag,
} from "../../provider/resources/tenant-firewall.js";
import { platformInstanceId, tenantDefaults } from "../../runtime/tenants/config.js";
import { StackConfig } from "../../stacks/config.js";

const local = (dataDir: string) => StackConfig.parse({ target: "local", host: { dataDir } });

describe("the platform instance id", () => {
  it("is 12 hex digits of the state backend: the same for every process on it, another for another", () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "instance-"));
    const id = platformInstanceId(local(dir));
    expect(id).toMatch(/^[0-9a-f]{12}$/);
    expect(INSTANCE_ID.test(id)).toBe(true);
    expect(platformInstanceId(local(`${dir}/`))).toBe(id); // the same directory, spelled differently
    expect(platformInstanceId(local(path.join(dir, "other")))).not.toBe(id);
    const gcp = (bucket: string) =>
      platformInstanceId(
        StackConfig.parse({
          target: "gcp",
          host: { dataDir: dir },
          gcp: {
            project: "sandbox-prod",
            bucket,
            domain: "sandboxes.example.test",
            kmsKey: "projects/sandbox-prod/locations/europe-west1/keyRings/sandbox/cryptoKeys/state",
          },
        }),
      );
    expect(gcp("bucket-a")).not.toBe(gcp("bucket-b"));
    expect(gcp("bucket-a")).not.toBe(id);
  });

  it("goes into every new tenant's spec, and a bad one is refused naming the field", () => {
    const config = local(mkdtempSync(path.join(os.tmpdir(), "instance-")));
    const defaults = tenantDefaults(config);
    expect(defaults.host.instance).toBe(platformInstanceId(config));
    const spec = {
      projectId: "p1",
      ownerId: "u1",
      mode: "local",
      image: "img",
      subnet: "10.100.3.0/24",
      sshHostPort: 10003,
      host: defaults.host,
    };
    expect(TenantSpec.parse(spec).host.instance).toBe(platformInstanceId(config));
    // Specs stored before instances have none, and stay valid.
    expect(TenantSpec.parse({ ...spec, host: { ...defaults.host, instance: undefined } }).host.instance).toBe(
      undefined,
    );
    const bad = TenantSpec.safeParse({ ...spec, host: { ...defaults.host, instance: "Not:An:Id" } });
    expect(bad.success).toBe(false);
    expect(bad.error!.issues[0]!.path).toEqual(["host", "instance"]);
  });
});

describe("the tenant tag in rule comments", () => {
  it.each([
    ["agent-sandbox:tenant=p1:instance=0123456789ab", { tenantId: "p1", instance: "0123456789ab" }],
    ["agent-sandbox:tenant=p1", { tenantId: "p1" }], // made before instances
    ["agent-sandbox:tenant=my-project-10:instance=x", { tenantId: "my-project-10", instance: "x" }],
    ["agent-sandbox:tenant=p1:instance=", undefined],
    ["agent-sandbox:tenant=P1", undefined],
    ["agent-sandbox:tenant=p1:instance=a:b", undefined],
    ["agent-sandbox:p1", undefined],
    ["something else", undefined],
  ])("%s", (comment, parsed) => {
    expect(parseTenantTag(comment)).toEqual(parsed);
  });

  it("round-trips through the rules as iptables -S prints them, old and new", () => {
    for (const instance of ["0123456789ab", undefined]) {
      const rules = tenantFirewallRules({
        tenantId: "p1",
        bridge: "sbx-0123456789a",
        subnet: "10.100.3.0/24",
        gateway: "10.100.3.1",
        proxyPort: 3128,
        sshPort: 2222,
        instance,
      });
      expect(rules).toHaveLength(7);
      for (const rule of rules) {
        // iptables -S quotes the comment when it holds characters of the shell's; ours are parsed either way.
        const printed = `-A ${rule.chain} ${rule.spec.join(" ")}`.replace(
          /--comment (\S+)/,
          '--comment "$1"',
        );
        const comment = ruleComment(parseSavedRule(printed));
        expect(comment).toBe(tenantTag("p1", instance));
        expect(parseTenantTag(comment!)).toEqual(
          instance ? { tenantId: "p1", instance } : { tenantId: "p1" },
        );
      }
    }
  });
});
