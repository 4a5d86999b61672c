import { describe, expect, it } from "vitest";
import {
  DEFAULT_FIREWALL_NAMES,
  firewallBaselineRules,
  firewallOwnChains,
  renderFirewallScript,
  renderHostConfig,
  renderRegistryConfig,
  renderSquidConf,
  squidPaths,
  validateFirewallNames,
} from "../../lib/host/render.js";
import { runtimeProbedParts } from "../../runtime/host/baseline.js";
import { HostConfig } from "../../stacks/config.js";

const testNames = { inputChain: "T1-INPUT", forwardChain: "T1-FORWARD", bridgeMatch: "t1x-+" };

describe("firewall baseline rules", () => {
  it("jumps from INPUT, DOCKER-USER, FORWARD and ip6 FORWARD into the project's chains, and into the gate", () => {
    const jumps = firewallBaselineRules()
      .filter((rule) => rule.spec[0] === "-j")
      .map((rule) => `${rule.family} ${rule.table ?? "filter"} ${rule.chain} -> ${rule.spec[1]}`);
    expect(jumps).toEqual([
      "iptables filter INPUT -> SANDBOX-INPUT",
      "iptables filter DOCKER-USER -> SANDBOX-FORWARD",
      "iptables filter FORWARD -> SANDBOX-FORWARD",
      "ip6tables filter FORWARD -> SANDBOX-FORWARD",
      "iptables security FORWARD -> SANDBOX-FORWARD",
      "ip6tables security FORWARD -> SANDBOX-FORWARD",
    ]);
  });

  it("drops the metadata address from tenant bridges on input and forward, and all IPv6 forwarding", () => {
    const rules = firewallBaselineRules().filter((rule) => rule.table === undefined);
    const metadata = rules.filter((rule) => rule.spec.includes("169.254.169.254/32"));
    expect(metadata.map((rule) => rule.chain).sort()).toEqual(["SANDBOX-FORWARD", "SANDBOX-INPUT"]);
    for (const rule of metadata) expect(rule.spec.slice(-2)).toEqual(["-j", "DROP"]);
    const v6 = rules.filter((rule) => rule.family === "ip6tables" && rule.chain === "SANDBOX-FORWARD");
    expect(v6.map((rule) => rule.spec.slice(0, 2).join(" "))).toEqual(["-i sbx-+", "-o sbx-+"]);
  });

  it("gates every tenant bridge in the security table: out only replies, in only SSH and replies", () => {
    const gate = firewallBaselineRules()
      .filter((rule) => rule.table === "security" && rule.chain === "SANDBOX-FORWARD")
      .map((rule) => `${rule.family} ${rule.spec.filter((word) => !/^agent-sandbox:/.test(word)).join(" ")}`);
    expect(gate).toEqual([
      "iptables -i sbx-+ -m conntrack ! --ctstate RELATED,ESTABLISHED -m comment --comment -j DROP",
      "iptables -o sbx-+ -p tcp --dport 2222 -m conntrack --ctstate NEW -m comment --comment -j RETURN",
      "iptables -o sbx-+ -m conntrack ! --ctstate RELATED,ESTABLISHED -m comment --comment -j DROP",
      "ip6tables -i sbx-+ -m comment --comment -j DROP",
      "ip6tables -o sbx-+ -m comment --comment -j DROP",
    ]);
  });

  it("uses other names everywhere when given them (an isolated test host)", () => {
    const text = JSON.stringify(firewallBaselineRules(testNames));
    expect(text).not.toMatch(/SANDBOX-|sbx-/);
    expect(firewallOwnChains(testNames).map((c) => `${c.family}:${c.chain}`)).toEqual([
      "iptables:T1-INPUT",
      "iptables:T1-FORWARD",
      "ip6tables:T1-FORWARD",
      "iptables:T1-FORWARD",
      "ip6tables:T1-FORWARD",
    ]);
    expect(firewallOwnChains(testNames).map((c) => c.table ?? "filter")).toEqual([
      "filter",
      "filter",
      "filter",
      "security",
      "security",
    ]);
  });

  it.each([
    [{ ...testNames, inputChain: "has space" }, /inputChain/],
    [{ ...testNames, forwardChain: "-X" }, /forwardChain/],
    [{ ...testNames, forwardChain: "T1-INPUT" }, /must differ/],
    [{ ...testNames, bridgeMatch: "a-bridge-name-too-long+" }, /bridgeMatch/],
  ])("refuses bad names %#", (names, message) => {
    expect(validateFirewallNames(names).join("\n")).toMatch(message);
  });

  it("accepts the released names", () => expect(validateFirewallNames(DEFAULT_FIREWALL_NAMES)).toEqual([]));

  it("renders an idempotent script: create-if-missing chains, check-before-insert rules at their positions", () => {
    const script = renderFirewallScript();
    expect(script).toContain(
      "iptables -w -n -L SANDBOX-INPUT >/dev/null 2>&1 || iptables -w -N SANDBOX-INPUT",
    );
    expect(script).toContain("iptables -w -n -L DOCKER-USER >/dev/null 2>&1 || iptables -w -N DOCKER-USER");
    expect(script).toContain(
      "ip6tables -w -C SANDBOX-FORWARD -o sbx-+ -m comment --comment 'agent-sandbox: no IPv6 in' -j DROP 2>/dev/null || ip6tables -w -I SANDBOX-FORWARD 2 -o sbx-+",
    );
    expect(script).toContain(
      "iptables -w -t security -C FORWARD -j SANDBOX-FORWARD 2>/dev/null || iptables -w -t security -I FORWARD 1 -j SANDBOX-FORWARD",
    );
    expect(script.split("\n").filter((line) => line.includes(" -I ")).length).toBe(
      firewallBaselineRules().length,
    );
  });
});

describe("squid and registry configs", () => {
  const dirs = { configDir: "/etc/x", logDir: "/var/log/x", runDir: "/run/x" };

  it("renders the base config: own port, pid file, logs, tenant include, final deny", () => {
    const conf = renderSquidConf({ port: 3999, ...dirs });
    expect(conf).toContain("http_port 3999\n");
    expect(conf).toContain("pid_filename /run/x/squid.pid\n");
    expect(conf).toContain("cache_log /var/log/x/squid/cache.log\n");
    expect(conf).toContain(`include ${squidPaths(dirs).fragmentsDir}/*.conf\n`);
    expect(conf).toContain("hosts_file /etc/hosts\n");
    expect(conf.trimEnd().endsWith("http_access deny all")).toBe(true);
    expect(conf).not.toMatch(/\{\{/);
  });

  it("renders the registry on loopback only", () => {
    expect(renderRegistryConfig({ storageDir: "/data/r", port: 5999 })).toMatch(/addr: 127\.0\.0\.1:5999/);
  });

  it("names a missing or unused template value", () => {
    expect(() => renderHostConfig("registry/config.yml", { storageDir: "/d" })).toThrow(
      /no value for \{\{listen\}\}/,
    );
    expect(() => renderHostConfig("squid/00-baseline.conf", { extra: 1 })).toThrow(/unused values extra/);
  });
});

describe("the host parts the runtime's /healthz probes", () => {
  it("are the engine, Squid and the snapshot registry locally; a GCP host runs no registry (Artifact Registry)", () => {
    const host = HostConfig.parse({});
    expect(runtimeProbedParts(host, "local").map((part) => part.name)).toEqual([
      "container-engine",
      "squid",
      "registry",
    ]);
    expect(runtimeProbedParts(host, "gcp").map((part) => part.name)).toEqual(["container-engine", "squid"]);
  });
});
