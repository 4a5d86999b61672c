import { mkdtempSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { statePassphrase } from "../../runtime/secrets.js";
import { reconcilerOptions } from "../../runtime/reconciler/options.js";
import { tenantDefaults, tenantStackOptions } from "../../runtime/tenants/config.js";
import { parseStackConfig, StackConfig } from "../../stacks/config.js";

const dataDir = () => mkdtempSync(path.join(os.tmpdir(), "tenant-config-"));

describe("tenant stacks per target", () => {
  it("local: a file backend in the data directory, secrets under a passphrase kept root-only", () => {
    const dir = dataDir();
    const config = StackConfig.parse({ target: "local", host: { dataDir: dir } });
    const options = tenantStackOptions(config, {});
    expect(options).toMatchObject({
      backendUrl: `file://${dir}/state`,
      workRoot: `${dir}/work`,
      dockerHost: "unix:///var/run/docker.sock",
    });
    expect(options.passphrase).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(statePassphrase(dir, {})).toBe(options.passphrase); // the same one on every start
    expect(statePassphrase(dir, { AGENT_SANDBOX_STATE_PASSPHRASE: "from-env" })).toBe("from-env");
    expect(tenantDefaults(config)).toMatchObject({
      mode: "local",
      subnetPool: "10.100.0.0/16",
      sshPortRange: [10000, 11000],
      gcp: undefined,
    });
  });

  it("gcp: state in the bucket's state/ prefix, secrets through the KMS key, no passphrase", () => {
    const kmsKey = "projects/sandbox-prod/locations/europe-west1/keyRings/sandbox/cryptoKeys/state";
    const config = StackConfig.parse({
      target: "gcp",
      host: { dataDir: dataDir() },
      gcp: { project: "sandbox-prod", bucket: "sandbox-bucket", domain: "sandboxes.example.test", kmsKey },
    });
    expect(tenantStackOptions(config, {})).toMatchObject({
      backendUrl: "gs://sandbox-bucket/state",
      secretsProvider: `gcpkms://${kmsKey}`,
    });
    expect(tenantStackOptions(config, {}).passphrase).toBeUndefined();
    expect(tenantDefaults(config)).toMatchObject({
      mode: "gcp",
      gcp: { project: "sandbox-prod", bucket: "sandbox-bucket" },
      // Dev servers behind the host's public front door, on the platform's domain over TLS.
      host: {
        frontDoor: {
          adminPort: 2019,
          port: 443,
          domain: "sandboxes.example.test",
          authUpstream: "127.0.0.1:8000",
          tls: true,
        },
      },
    });
  });

  it("the gcp target without its gcp section is refused, naming the key", () => {
    expect(() => parseStackConfig({ "agent-sandbox:target": "gcp" }, "Pulumi.prod.yaml")).toThrow(
      /agent-sandbox:gcp: is required when target is gcp/,
    );
    expect(() =>
      parseStackConfig(
        {
          "agent-sandbox:target": "gcp",
          "agent-sandbox:gcp": {
            project: "p",
            bucket: "b-1",
            domain: "sandboxes.example.test",
            kmsKey: "key",
          },
        },
        "f",
      ),
    ).toThrow(/agent-sandbox:gcp\.kmsKey: must be projects/);
  });
});

describe("reconciler settings", () => {
  it("every reconciler (runtime, standalone worker, tests) gets the registry, recordings, deadlines and drift policy", () => {
    const dir = dataDir();
    const config = StackConfig.parse({
      target: "local",
      host: { dataDir: dir, registryPort: 5999 },
      tenants: {
        leaseSeconds: 7,
        maxConcurrent: 3,
        finalBackupSeconds: 45,
        driftRemediation: "repair",
        warmPool: { settleSeconds: 1.5 },
      },
    });
    expect(reconcilerOptions(config)).toMatchObject({
      stack: { backendUrl: `file://${dir}/state` },
      snapshots: { repository: "127.0.0.1:5999/sandboxes", keep: 5 },
      recordingsDir: `${dir}/terminal-sessions`,
      leaseMs: 7000,
      maxConcurrent: 3,
      finalBackupSeconds: 45,
      driftRemediation: "repair",
      driftStallAfter: 3,
      backgroundSettleMs: 1500,
    });
  });
});
