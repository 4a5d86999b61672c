import { mkdtempSync, writeFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import {
  consoleOriginsOf,
  parseStackConfig,
  readStackConfigFile,
  StackConfigError,
} from "../../stacks/config.js";
import { REPO_ROOT } from "../../lib/toolchain.js";

const problemsOf = (config: Record<string, unknown>): readonly string[] => {
  try {
    parseStackConfig(config, "Pulumi.test.yaml");
  } catch (error) {
    expect(error).toBeInstanceOf(StackConfigError);
    return (error as StackConfigError).problems;
  }
  throw new Error("expected the config to be rejected");
};

describe("stack config", () => {
  it("accepts the checked-in Pulumi.dev.yaml", () => {
    const config = readStackConfigFile(path.join(REPO_ROOT, "Pulumi.dev.yaml"));
    expect(config.target).toBe("local");
    expect(config.host.squidPort).toBe(3128);
    expect(config.runtime.apiPort).toBe(8000);
  });

  it("fills defaults for omitted sections", () => {
    const config = parseStackConfig({ "agent-sandbox:target": "local" }, "Pulumi.test.yaml");
    expect(config.host.dockerSocket).toBe("/var/run/docker.sock");
    expect(config.runtime.terminalPort).toBe(9000);
    expect(config.tenants).toMatchObject({ idleMinutes: 30, finalBackupSeconds: 120 });
    expect(config.tenants.warmPool).toMatchObject({ size: 0, settleSeconds: 2, memoryOvercommit: 1 });
    expect(config.runtime).toMatchObject({ recordingRetentionDays: 90, jobs: { idleCheckSeconds: 60 } });
  });

  it("runtime.consoleOrigins: the API's own address (and its loopback alias) unless configured", () => {
    const defaults = parseStackConfig({ "agent-sandbox:target": "local" }, "Pulumi.test.yaml").runtime;
    expect(consoleOriginsOf(defaults)).toEqual(["http://127.0.0.1:8000", "http://localhost:8000"]);
    const publicHost = { ...defaults, publicHost: "sandboxes.example.com" };
    expect(consoleOriginsOf(publicHost)).toEqual(["http://sandboxes.example.com:8000"]);
    const configured = { ...defaults, consoleOrigins: ["https://console.example.com"] };
    expect(consoleOriginsOf(configured)).toEqual(["https://console.example.com"]);
  });

  it("runtime.terminalUrlBase: a ws:// or wss:// URL (trailing slash dropped), anything else refused by name", () => {
    const config = parseStackConfig(
      {
        "agent-sandbox:target": "local",
        "agent-sandbox:runtime": { terminalUrlBase: "wss://sandboxes.example.com/terminal/" },
      },
      "Pulumi.test.yaml",
    );
    expect(config.runtime.terminalUrlBase).toBe("wss://sandboxes.example.com/terminal");
    expect(
      problemsOf({
        "agent-sandbox:target": "local",
        "agent-sandbox:runtime": { terminalUrlBase: "https://sandboxes.example.com/terminal" },
      }),
    ).toEqual(["agent-sandbox:runtime.terminalUrlBase: must be a ws:// or wss:// URL"]);
  });

  it("runtime.http: slow-client deadlines and a per-address connection cap by default; a headers deadline past the request's refused by name", () => {
    const config = parseStackConfig({ "agent-sandbox:target": "local" }, "Pulumi.test.yaml");
    expect(config.runtime.http).toEqual({
      headersTimeoutSeconds: 20,
      requestTimeoutSeconds: 300,
      maxConnectionsPerAddress: 256,
    });
    expect(
      problemsOf({
        "agent-sandbox:target": "local",
        "agent-sandbox:runtime": { http: { headersTimeoutSeconds: 30, requestTimeoutSeconds: 10 } },
      }),
    ).toEqual([
      "agent-sandbox:runtime.http.headersTimeoutSeconds: headersTimeoutSeconds must not be longer than requestTimeoutSeconds",
    ]);
    expect(
      problemsOf({
        "agent-sandbox:target": "local",
        "agent-sandbox:runtime": { http: { maxConnectionsPerAddress: 0 } },
      }),
    ).toEqual([expect.stringMatching(/^agent-sandbox:runtime\.http\.maxConnectionsPerAddress: /)]);
  });

  it("runtime.sshGateway: the kubernetes SSH gateway's deadlines and caps by default; inconsistent ones refused by name", () => {
    const config = parseStackConfig({ "agent-sandbox:target": "local" }, "Pulumi.test.yaml");
    expect(config.runtime.sshGateway).toEqual({
      handshakeTimeoutSeconds: 20,
      loginTimeoutSeconds: 60,
      maxUnauthenticatedPerAddress: 10,
      maxUnauthenticated: 100,
      maxChannelsPerConnection: 10,
    });
    expect(
      problemsOf({
        "agent-sandbox:target": "local",
        "agent-sandbox:runtime": { sshGateway: { handshakeTimeoutSeconds: 90 } },
      }),
    ).toEqual([
      "agent-sandbox:runtime.sshGateway.handshakeTimeoutSeconds: handshakeTimeoutSeconds must not be longer than loginTimeoutSeconds",
    ]);
    expect(
      problemsOf({
        "agent-sandbox:target": "local",
        "agent-sandbox:runtime": { sshGateway: { maxUnauthenticatedPerAddress: 200 } },
      }),
    ).toEqual([
      "agent-sandbox:runtime.sshGateway.maxUnauthenticatedPerAddress: maxUnauthenticatedPerAddress must not be more than maxUnauthenticated",
    ]);
  });

  it("runtime.registration, projectQuota and rateLimits: open, 5 and finite rates by default; bad values refused by key", () => {
    const { runtime } = parseStackConfig({ "agent-sandbox:target": "local" }, "Pulumi.test.yaml");
    expect(runtime).toMatchObject({
      registration: "open",
      projectQuota: 5,
      rateLimits: { register: { burst: 10, perHour: 20 }, createProject: { burst: 10, perHour: 60 } },
    });
    const tight = parseStackConfig(
      {
        "agent-sandbox:target": "local",
        "agent-sandbox:runtime": {
          registration: "invite",
          rateLimits: { register: { burst: 1, perHour: 2 } },
        },
      },
      "Pulumi.test.yaml",
    ).runtime;
    expect(tight.registration).toBe("invite");
    expect(tight.rateLimits).toEqual({
      register: { burst: 1, perHour: 2 },
      createProject: { burst: 10, perHour: 60 },
    });
    const runtimeProblems = (value: object) =>
      problemsOf({ "agent-sandbox:target": "local", "agent-sandbox:runtime": value });
    expect(runtimeProblems({ registration: "by-email" })).toEqual([
      'agent-sandbox:runtime.registration: Invalid option: expected one of "open"|"invite"|"closed"',
    ]);
    expect(runtimeProblems({ projectQuota: 0 })[0]).toMatch(/^agent-sandbox:runtime\.projectQuota: /);
    expect(runtimeProblems({ projectQuota: "5" })[0]).toMatch(
      /^agent-sandbox:runtime\.projectQuota: .*number/,
    );
    expect(runtimeProblems({ rateLimits: { createProject: { burst: 0, perHour: 1 } } })[0]).toMatch(
      /^agent-sandbox:runtime\.rateLimits\.createProject\.burst: /,
    );
    expect(runtimeProblems({ rateLimits: { register: { burst: 1 } } })[0]).toMatch(
      /^agent-sandbox:runtime\.rateLimits\.register\.perHour: /,
    );
    expect(runtimeProblems({ rateLimits: { login: { burst: 1, perHour: 1 } } })[0]).toMatch(
      /^agent-sandbox:runtime\.rateLimits: .*login/,
    );
  });

  it("ignores other namespaces (provider config)", () => {
    expect(parseStackConfig({ "agent-sandbox:target": "local", "gcp:project": "p" }, "f").target).toBe(
      "local",
    );
  });

  it.each([
    [{}, /^agent-sandbox:target: /],
    [{ "agent-sandbox:target": "aws" }, /^agent-sandbox:target: .*"local".*"gcp"/],
    [
      { "agent-sandbox:target": "local", "agent-sandbox:host": { squidPort: "3128" } },
      /^agent-sandbox:host\.squidPort: .*number/,
    ],
    [
      { "agent-sandbox:target": "local", "agent-sandbox:host": { squidPort: 70000 } },
      /^agent-sandbox:host\.squidPort: /,
    ],
    [
      { "agent-sandbox:target": "local", "agent-sandbox:host": { dataDir: "data" } },
      /^agent-sandbox:host\.dataDir: must be an absolute path/,
    ],
    [
      { "agent-sandbox:target": "local", "agent-sandbox:host": { sqiudPort: 1 } },
      /^agent-sandbox:host: .*sqiudPort/,
    ],
    [{ "agent-sandbox:target": "local", "agent-sandbox:runtim": {} }, /^agent-sandbox:runtim: unknown key/],
    [
      { "agent-sandbox:target": "local", "agent-sandbox:tenants": { idleMinutes: 0 } },
      /^agent-sandbox:tenants\.idleMinutes: must be a positive number of minutes/,
    ],
    [
      { "agent-sandbox:target": "local", "agent-sandbox:tenants": { idleMinutes: -5 } },
      /^agent-sandbox:tenants\.idleMinutes: must be a positive number of minutes/,
    ],
    [
      { "agent-sandbox:target": "local", "agent-sandbox:tenants": { warmPool: { settleSeconds: -1 } } },
      /^agent-sandbox:tenants\.warmPool\.settleSeconds: /,
    ],
    [
      { "agent-sandbox:target": "local", "agent-sandbox:tenants": { warmPool: { memoryOvercommit: 0.5 } } },
      /^agent-sandbox:tenants\.warmPool\.memoryOvercommit: /,
    ],
    [
      { "agent-sandbox:target": "local", "agent-sandbox:tenants": { finalBackupSeconds: 0 } },
      /^agent-sandbox:tenants\.finalBackupSeconds: /,
    ],
    [
      {
        "agent-sandbox:target": "local",
        "agent-sandbox:runtime": { consoleOrigins: ["https://x.example/path"] },
      },
      /^agent-sandbox:runtime\.consoleOrigins\.0: must be an origin/,
    ],
  ])("rejects %j naming the key", (config, expected) => {
    const problems = problemsOf(config);
    expect(
      problems.some((problem) => expected.test(problem)),
      problems.join("\n"),
    ).toBe(true);
  });

  it("reports a file without a config section, and unparseable YAML, with the file name", () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "stack-config-"));
    const empty = path.join(dir, "Pulumi.empty.yaml");
    writeFileSync(empty, "encryptionsalt: x\n");
    expect(() => readStackConfigFile(empty)).toThrow(
      /Pulumi\.empty\.yaml: invalid configuration\n  - missing 'config:'/,
    );
    const broken = path.join(dir, "Pulumi.broken.yaml");
    writeFileSync(broken, "config:\n  agent-sandbox:target: [\n");
    expect(() => readStackConfigFile(broken)).toThrow(/Pulumi\.broken\.yaml: invalid configuration/);
  });
});
