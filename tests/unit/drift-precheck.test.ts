// The in-process drift pre-check (runtime/tenants/drift-precheck.ts) on stacks the real Pulumi CLI made: a
// file backend in a temp dir with the platform's key service (and a stack of the passphrase provider), host files (one with secret content) read by the plugin's own
// handlers, and a foreign resource. Each out-of-band change is checked against the engine's own refresh
// preview too: what the pre-check calls clean, the engine must find unchanged.
import { promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { gzipSync } from "node:zlib";
import * as command from "@pulumi/command";
import * as pulumi from "@pulumi/pulumi";
import { Stack, type PulumiFn } from "@pulumi/pulumi/automation/index.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HostFile } from "../../components/resources/host-file.js";
import { tenantNames } from "../../components/tenant/names.js";
import { precheckDrift } from "../../runtime/tenants/drift-precheck.js";
import { STACK_KEY_PROVIDER } from "../../runtime/tenants/stack-keys.js";
import {
  fileBackendStacksDir,
  tenantWorkspace,
  type TenantStackOptions,
} from "../../runtime/tenants/stack.js";

const SECRET = "the-secret-content\n";
let dir: string;
let options: TenantStackOptions;
let plainFile: string;
let secretFile: string;
let stack: Stack;

/** A stack of the tenant project, `tenant-<id>`, deployed with `program` by the real CLI. */
async function deployed(id: string, program: PulumiFn, made = options): Promise<Stack> {
  const name = tenantNames(id).stack;
  const workspace = await tenantWorkspace(path.join(options.workRoot, name), program, made);
  const created = await Stack.create(name, workspace);
  await created.up({ onOutput: () => undefined });
  return created;
}

/** The engine's verdict on the same stack: the refresh preview's changes other than `same`. */
async function engineChanges(of: Stack = stack): Promise<Record<string, number>> {
  const preview = await of.previewRefresh({ onOutput: () => undefined });
  return Object.fromEntries(Object.entries(preview.changeSummary).filter(([op]) => op !== "same"));
}

async function notClean(id = "unit") {
  const result = await precheckDrift(id, options);
  if (result.clean) throw new Error(`expected not clean, got ${JSON.stringify(result)}`);
  return result.reason;
}

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), "drift-precheck-"));
  await fs.mkdir(path.join(dir, "state"));
  await fs.mkdir(path.join(dir, "host"));
  options = {
    backendUrl: `file://${path.join(dir, "state")}`,
    workRoot: path.join(dir, "work"),
    passphrase: "correct horse battery staple",
  };
  plainFile = path.join(dir, "host", "plain.conf");
  secretFile = path.join(dir, "host", "secret.conf");
  stack = await deployed("unit", async () => {
    new HostFile("plain", { path: plainFile, content: "acl ok\n", mode: "0640" });
    // As the tenant program keeps its secrets (an SSH private key, a container's env): a secret output.
    new HostFile(
      "secret",
      { path: secretFile, content: pulumi.secret(SECRET) },
      { additionalSecretOutputs: ["content"] },
    );
    return { token: pulumi.secret("stack-output-secret") };
  });
}, 120_000);

afterAll(async () => {
  await stack?.destroy({ onOutput: () => undefined });
  await fs.rm(dir, { recursive: true, force: true });
});

describe("precheckDrift", () => {
  it("opens the secrets the CLI sealed through the key service and finds an untouched stack clean, as the engine does", async () => {
    const checkpoint = JSON.parse(
      await fs.readFile(path.join(fileBackendStacksDir(options.backendUrl)!, "tenant-unit.json"), "utf8"),
    ) as {
      checkpoint: {
        latest: {
          secrets_providers: unknown;
          resources: { urn: string; outputs?: Record<string, unknown> }[];
        };
      };
    };
    // Made with the key service (the default with a passphrase): a data key sealed by it, no passphrase salt.
    expect(checkpoint.checkpoint.latest.secrets_providers).toEqual({
      type: "cloud",
      state: { url: STACK_KEY_PROVIDER, encryptedkey: expect.any(String) },
    });
    // The secret output is in the checkpoint only encrypted: the pre-check had to decrypt it to compare.
    const secret = checkpoint.checkpoint.latest.resources.find((r) => r.urn.endsWith("::secret"))!;
    expect(secret.outputs!.content).toEqual({
      "4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270",
      ciphertext: expect.stringMatching(/^v1:[A-Za-z0-9+/=]+:[A-Za-z0-9+/=]+$/),
    });
    const result = await precheckDrift("unit", options);
    expect(result).toMatchObject({ clean: true, resources: 2 });
    expect(await engineChanges()).toEqual({});
  });

  it("reads a gzipped checkpoint as the backend writes it with PULUMI_DIY_BACKEND_GZIP", async () => {
    const file = path.join(fileBackendStacksDir(options.backendUrl)!, "tenant-unit.json");
    const text = await fs.readFile(file);
    await fs.writeFile(`${file}.gz`, gzipSync(text));
    try {
      expect(await notClean()).toContain("both");
      await fs.rename(file, `${file}.moved`);
      expect(await precheckDrift("unit", options)).toMatchObject({ clean: true, resources: 2 });
    } finally {
      await fs.rename(`${file}.moved`, file).catch(() => undefined);
      await fs.rm(`${file}.gz`, { force: true });
    }
  });

  it("refuses a wrong passphrase, none at all, a backend that is not a file, another engine", async () => {
    const wrong = await precheckDrift("unit", { ...options, passphrase: "wrong horse" });
    expect(wrong).toEqual({
      clean: false,
      reason: "the key service's key does not open the stack's data key",
    });
    const none = await precheckDrift("unit", { ...options, passphrase: undefined });
    expect(none).toEqual({ clean: false, reason: "no passphrase to open the stack's secrets" });
    const gcs = await precheckDrift("unit", { ...options, backendUrl: "gs://bucket/state" });
    expect(gcs).toMatchObject({ clean: false, reason: expect.stringContaining("not a file backend") });
    expect(await notClean("absent")).toContain("no checkpoint at");
    // The plugin would talk to another engine than this process's handlers do.
    const elsewhere = await precheckDrift("unit", { ...options, dockerHost: "unix:///run/elsewhere.sock" });
    expect(elsewhere).toMatchObject({ clean: false, reason: expect.stringContaining("/run/elsewhere.sock") });
  });

  it("a stack made with Pulumi's passphrase provider (before the key service) is opened by the passphrase, by the pre-check and by the engine", async () => {
    const file = path.join(dir, "host", "passphrase.conf");
    const program: PulumiFn = async () => {
      new HostFile(
        "secret",
        { path: file, content: pulumi.secret(SECRET) },
        { additionalSecretOutputs: ["content"] },
      );
    };
    const older = await deployed("older", program, { ...options, secretsProvider: "passphrase" });
    try {
      const checkpoint = JSON.parse(
        await fs.readFile(path.join(fileBackendStacksDir(options.backendUrl)!, "tenant-older.json"), "utf8"),
      ) as { checkpoint: { latest: { secrets_providers: { type: string } } } };
      expect(checkpoint.checkpoint.latest.secrets_providers.type).toBe("passphrase");
      expect(await precheckDrift("older", options)).toMatchObject({ clean: true, resources: 1 });
      expect(await precheckDrift("older", { ...options, passphrase: "wrong horse" })).toEqual({
        clean: false,
        reason: "the passphrase does not open the stack's secrets",
      });
      // A workspace of today's options (the key service's provider for new stacks) opens it with the passphrase.
      const today = await tenantWorkspace(path.join(options.workRoot, "today-older"), program, options);
      const again = await Stack.select(tenantNames("older").stack, today);
      expect(await engineChanges(again)).toEqual({});
      const up = await again.up({ onOutput: () => undefined });
      expect(up.summary.resourceChanges).toEqual({ same: 2 });
    } finally {
      await older.destroy({ onOutput: () => undefined });
    }
  });

  it("names the resource and property of a secret's content edited behind its back; the engine agrees", async () => {
    await fs.writeFile(secretFile, "edited\n");
    try {
      const reason = await notClean();
      expect(reason).toContain("sandbox:host:File::secret");
      expect(reason).toMatch(/differs at (content|sha256)/);
      expect(await engineChanges()).toEqual({ update: 1 });
    } finally {
      await fs.writeFile(secretFile, SECRET);
    }
    expect(await precheckDrift("unit", options)).toMatchObject({ clean: true });
  });

  it("sees a changed mode, a removed file and a read that throws; the engine sees each too", async () => {
    await fs.chmod(plainFile, 0o644);
    expect(await notClean()).toMatch(/sandbox:host:File::plain differs at mode/);
    expect(await engineChanges()).toEqual({ update: 1 });
    await fs.chmod(plainFile, 0o640);

    await fs.rename(plainFile, `${plainFile}.away`);
    expect(await notClean()).toMatch(/sandbox:host:File::plain no longer exists/);
    expect(await engineChanges()).toEqual({ delete: 1 });

    // A directory where the file was: the handler's read fails (EISDIR), and so does the engine's refresh.
    await fs.mkdir(plainFile);
    expect(await notClean()).toMatch(/reading .*sandbox:host:File::plain failed: .*EISDIR/);
    await expect(engineChanges()).rejects.toThrow(/EISDIR/);
    await fs.rmdir(plainFile);
    await fs.rename(`${plainFile}.away`, plainFile);
    expect(await precheckDrift("unit", options)).toMatchObject({ clean: true });
  });

  it("leaves a stack holding a resource of another plugin to the engine", async () => {
    const foreign = await deployed("foreign", async () => {
      new HostFile("file", { path: path.join(dir, "host", "foreign.conf"), content: "x\n" });
      new command.local.Command("probe", { create: "true" });
    });
    try {
      expect(await notClean("foreign")).toMatch(
        /a resource of type command:local:Command is not ours to read/,
      );
      expect(await engineChanges(foreign)).toEqual({});
    } finally {
      await foreign.destroy({ onOutput: () => undefined });
    }
  });
});
