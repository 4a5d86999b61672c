import { readFileSync } from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { SANDBOX_CAPABILITIES } from "../../lib/constants.js";
import { tenantNames } from "../../components/tenant/names.js";
import {
  normalizeDomains,
  squidTenantFiles,
  SquidTenantInputs,
} from "../../provider/resources/squid-tenant.js";
import { parseSavedRule, tenantFirewallRules } from "../../provider/resources/tenant-firewall.js";
import {
  allocateTenantSubnet,
  networkOf,
  SubnetPoolExhaustedError,
  tenantAddresses,
} from "../../lib/subnets.js";
import { REPO_ROOT } from "../../lib/toolchain.js";

describe("tenant firewall rules", () => {
  const inputs = {
    tenantId: "p1",
    bridge: "sbx-0123456789a",
    subnet: "10.100.3.0/24",
    gateway: "10.100.3.1",
    proxyPort: 3128,
    sshPort: 2222,
  };
  const rules = tenantFirewallRules(inputs);
  const text = rules.map((r) => `-A ${r.chain} ${r.spec.join(" ")}`);

  it("let the bridge reach only its own gateway's proxy port, and nothing out or in but SSH", () => {
    expect(text).toEqual([
      "-A SANDBOX-INPUT -i sbx-0123456789a -s 10.100.3.0/24 -d 10.100.3.1/32 -p tcp --dport 3128 -m comment --comment agent-sandbox:tenant=p1 -j ACCEPT",
      "-A SANDBOX-INPUT -i sbx-0123456789a -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment agent-sandbox:tenant=p1 -j ACCEPT",
      "-A SANDBOX-INPUT -i sbx-0123456789a -m comment --comment agent-sandbox:tenant=p1 -j DROP",
      "-A SANDBOX-FORWARD -o sbx-0123456789a ! -i sbx-+ -p tcp --dport 2222 -m comment --comment agent-sandbox:tenant=p1 -j ACCEPT",
      "-A SANDBOX-FORWARD -i sbx-0123456789a -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment agent-sandbox:tenant=p1 -j ACCEPT",
      "-A SANDBOX-FORWARD -i sbx-0123456789a -m comment --comment agent-sandbox:tenant=p1 -j DROP",
      "-A SANDBOX-FORWARD -o sbx-0123456789a -m comment --comment agent-sandbox:tenant=p1 -j DROP",
    ]);
  });

  it("with a credential gateway, the bridge reaches its own gateway's gateway port too, before the DROP", () => {
    const withGateway = tenantFirewallRules({ ...inputs, gatewayPort: 3180 }).map(
      (r) => `-A ${r.chain} ${r.spec.join(" ")}`,
    );
    expect(withGateway).toEqual([
      text[0],
      "-A SANDBOX-INPUT -i sbx-0123456789a -s 10.100.3.0/24 -d 10.100.3.1/32 -p tcp --dport 3180 -m comment --comment agent-sandbox:tenant=p1 -j ACCEPT",
      ...text.slice(1),
    ]);
  });

  it("every rule is keyed by the tenant's bridge and tagged with its id", () => {
    for (const rule of rules) {
      expect(
        rule.spec.some((arg, i) => (arg === "-i" || arg === "-o") && rule.spec[i + 1] === "sbx-0123456789a"),
      ).toBe(true);
      expect(rule.spec).toContain("agent-sandbox:tenant=p1");
    }
  });

  it("reads back iptables -S lines, quoted comments included", () => {
    expect(
      parseSavedRule('-A SANDBOX-INPUT -i sbx-1 -m comment --comment "agent-sandbox:tenant=p1" -j DROP'),
    ).toEqual([
      "-A",
      "SANDBOX-INPUT",
      "-i",
      "sbx-1",
      "-m",
      "comment",
      "--comment",
      "agent-sandbox:tenant=p1",
      "-j",
      "DROP",
    ]);
  });
});

describe("squid tenant files", () => {
  it("render the tenant's fragment: names only (-n), allow then deny its own subnet", () => {
    const inputs = SquidTenantInputs.parse({
      tenantId: "p-1",
      subnet: "10.100.3.0/24",
      domains: ["GitHub.com", ".npmjs.org", "registry.npmjs.org"],
      configFile: "/etc/agent-sandbox/squid/squid.conf",
      fragmentsDir: "/etc/agent-sandbox/squid/tenants",
    });
    expect(squidTenantFiles(inputs)).toMatchSnapshot();
  });

  it.each([
    [["a.example.com", ".example.com"], [".example.com"]],
    [["example.com", ".example.com"], [".example.com"]],
    [[".example.com", ".a.example.com", "b.a.example.com"], [".example.com"]],
    [
      ["example.com", "api.example.com"],
      ["api.example.com", "example.com"],
    ],
    [["x.org", "x.org"], ["x.org"]],
  ])("normalizeDomains(%j) = %j", (input, output) => expect(normalizeDomains(input)).toEqual(output));

  it.each([
    "1.2.3.4",
    ".1.2.3.4",
    "*.example.com",
    "exa mple.com",
    "example",
    "-bad.com",
    "a..b.com",
    'x.com"; http_access allow all',
  ])("refuses %j as a domain", (domain) => {
    const parsed = SquidTenantInputs.shape.domains.safeParse([domain]);
    expect(parsed.success).toBe(false);
  });
});

describe("subnet allocation", () => {
  it("hands out the lowest free /24 and reuses a subnet only once released", () => {
    expect(allocateTenantSubnet("10.100.0.0/16", [])).toBe("10.100.0.0/24");
    expect(allocateTenantSubnet("10.100.0.0/16", ["10.100.0.0/24", "10.100.1.0/24"])).toBe("10.100.2.0/24");
    expect(allocateTenantSubnet("10.100.0.0/16", ["10.100.1.0/24"])).toBe("10.100.0.0/24");
  });

  it("is deterministic: replaying the same allocations gives the same subnets (survives restarts)", () => {
    const taken: string[] = [];
    for (let i = 0; i < 50; i++) taken.push(allocateTenantSubnet("10.200.0.0/16", taken));
    const replay: string[] = [];
    for (let i = 0; i < 50; i++) replay.push(allocateTenantSubnet("10.200.0.0/16", replay));
    expect(replay).toEqual(taken);
    expect(new Set(taken).size).toBe(50);
  });

  it("skips every /24 that overlaps a network in use on the host, whatever its size", () => {
    const pool = "10.100.0.0/16";
    expect(allocateTenantSubnet(pool, [], ["10.100.0.0/24"])).toBe("10.100.1.0/24");
    // A /23 on the host covers two /24s; a /28 inside the third makes it unusable too.
    expect(allocateTenantSubnet(pool, [], ["10.100.0.0/23", "10.100.2.16/28"])).toBe("10.100.3.0/24");
    // A wider network around the whole pool leaves nothing.
    expect(() => allocateTenantSubnet("10.100.0.0/23", [], ["10.0.0.0/8"])).toThrow(
      "subnet pool 10.100.0.0/23 is exhausted: all 2 /24 subnets are allocated or in use on the host (10.0.0.0/8)",
    );
    // Networks outside the pool, and text that is not a CIDR, change nothing.
    expect(allocateTenantSubnet(pool, [], ["172.17.0.0/16", "192.0.2.0/24", "fd00::/64", "nonsense"])).toBe(
      "10.100.0.0/24",
    );
    // The platform's own allocations and the host's combine.
    expect(allocateTenantSubnet(pool, ["10.100.0.0/24"], ["10.100.1.0/24"])).toBe("10.100.2.0/24");
  });

  it("reads an interface's network from its address and prefix", () => {
    expect(networkOf("10.245.16.1/24")).toBe("10.245.16.0/24");
    expect(networkOf("192.0.2.2/24")).toBe("192.0.2.0/24");
    expect(networkOf("172.17.0.1/16")).toBe("172.17.0.0/16");
    expect(networkOf("10.1.2.3/32")).toBe("10.1.2.3/32");
    expect(networkOf("10.1.2.3/0")).toBe("0.0.0.0/0");
    for (const bad of ["10.1.2.3", "10.1.2.3/33", "fe80::1/64", "10.1.2/24", ""])
      expect(networkOf(bad)).toBeUndefined();
  });

  it("reports an exhausted pool", () => {
    const pool = "10.9.0.0/23";
    const taken = [allocateTenantSubnet(pool, [])];
    taken.push(allocateTenantSubnet(pool, taken));
    expect(taken).toEqual(["10.9.0.0/24", "10.9.1.0/24"]);
    expect(() => allocateTenantSubnet(pool, taken)).toThrow(SubnetPoolExhaustedError);
    expect(() => allocateTenantSubnet(pool, taken)).toThrow(
      "subnet pool 10.9.0.0/23 is exhausted: all 2 /24 subnets are allocated",
    );
  });

  it.each(["10.0.0.0/25", "10.0.0.1/16", "nope"])("refuses the pool %s", (pool) => {
    expect(() => allocateTenantSubnet(pool, [])).toThrow(/subnet pool/);
  });

  it("gives the gateway .1 and the sandbox .2", () => {
    expect(tenantAddresses("10.100.3.0/24")).toEqual({ gateway: "10.100.3.1", sandbox: "10.100.3.2" });
  });
});

describe("tenant names", () => {
  it("fit the engine's and the kernel's limits and differ between tenants", () => {
    const a = tenantNames("a-very-long-project-identifier-of-40-ch");
    const b = tenantNames("a-very-long-project-identifier-of-40-cg");
    expect(a.bridge.length).toBeLessThanOrEqual(15);
    expect(a.serviceAccountId).toMatch(/^[a-z][a-z0-9-]{5,29}$/);
    expect(a.bridge).not.toBe(b.bridge);
    expect(a.stack).toBe("tenant-a-very-long-project-identifier-of-40-ch");
  });
});

describe("capabilities", () => {
  it("the tenant component grants exactly what the image declares it needs", () => {
    const dockerfile = readFileSync(path.join(REPO_ROOT, "sandbox-image", "Dockerfile"), "utf8");
    const label = /dev\.agent-sandbox\.required-capabilities="([A-Z_,]+)"/.exec(dockerfile)?.[1];
    expect(label?.split(",")).toEqual([...SANDBOX_CAPABILITIES]);
  });

  it("a microVM guest's entrypoint gets a container's bounding set, and no new privileges", () => {
    const init = readFileSync(path.join(REPO_ROOT, "lib", "microvm", "initramfs-init.sh"), "utf8");
    const line = init.split("\n").find((l) => l.startsWith("exec switch_root"))!;
    expect(line).toContain("--no-new-privs");
    const bounding = /--bounding-set -all,(\S+)/.exec(line)?.[1];
    expect(bounding?.split(",")).toEqual(SANDBOX_CAPABILITIES.map((cap) => `+${cap.toLowerCase()}`));
    expect(line.endsWith("/usr/local/sbin/sandbox-entrypoint")).toBe(true);
  });
});
