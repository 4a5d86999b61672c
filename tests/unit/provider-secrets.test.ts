// A secret a tenant program hands the sandbox plugin stays a secret in the stack's state: the engine records
// what the plugin's Check answers as the resource's inputs and marks an output secret where the input of its
// name is, so Check must answer a secret as one (provider/handler.ts `keepSecret`). Before, a project secret's
// file content (`pulumi.secret`, components/tenant/secrets.ts) was in the checkpoint in plain text, inputs and
// outputs alike. The real Pulumi CLI, the plugin as the tenant stacks run it, a file backend with a passphrase.
import { promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as pulumi from "@pulumi/pulumi";
import { Stack } from "@pulumi/pulumi/automation/index.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HostFile } from "../../components/resources/host-file.js";
import { keepSecret } from "../../provider/handler.js";
import { fileBackendStacksDir, tenantWorkspace } from "../../runtime/tenants/stack.js";

const SECRET = "project-secret-value-6f1d";
const SIG = { "4dabf18193072939515e22adb298388d": "1b47061264138c4ac30d75fd1eb44270" };
let dir: string;
let stack: Stack;
let checkpoint: string;

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), "provider-secrets-"));
  await fs.mkdir(path.join(dir, "state"));
  const options = {
    backendUrl: `file://${path.join(dir, "state")}`,
    workRoot: path.join(dir, "work"),
    passphrase: "provider-secrets",
  };
  const name = "tenant-secrets-unit";
  const program = async () => {
    // As TenantSecrets writes a project secret: the content a secret, no additionalSecretOutputs.
    new HostFile("secret", { path: path.join(dir, "secret"), content: pulumi.secret(SECRET), mode: "0444" });
    new HostFile("plain", { path: path.join(dir, "plain"), content: "not a secret\n", mode: "0444" });
  };
  stack = await Stack.create(
    name,
    await tenantWorkspace(path.join(options.workRoot, name), program, options),
  );
  await stack.up({ onOutput: () => undefined });
  checkpoint = await fs.readFile(
    path.join(fileBackendStacksDir(options.backendUrl)!, `${name}.json`),
    "utf8",
  );
}, 180_000);

afterAll(async () => {
  await stack?.destroy({ onOutput: () => undefined });
  if (dir) await fs.rm(dir, { recursive: true, force: true });
}, 120_000);

describe("the sandbox plugin's secrets in the stack's state", () => {
  it("a secret input is encrypted in the checkpoint, as input and as output; the file has it", async () => {
    expect(checkpoint).not.toContain(SECRET);
    const resources = (
      JSON.parse(checkpoint) as {
        checkpoint: { latest: { resources: { urn: string; inputs?: any; outputs?: any }[] } }; // eslint-disable-line @typescript-eslint/no-explicit-any
      }
    ).checkpoint.latest.resources;
    const secret = resources.find((r) => r.urn.endsWith("::secret"))!;
    for (const value of [secret.inputs.content, secret.outputs.content])
      expect(value).toEqual({ ...SIG, ciphertext: expect.stringMatching(/^v1:/) });
    // Only what was secret: the other properties and the other file stay readable.
    expect(secret.inputs.mode).toBe("0444");
    expect(resources.find((r) => r.urn.endsWith("::plain"))!.outputs.content).toBe("not a secret\n");
    expect(await fs.readFile(path.join(dir, "secret"), "utf8")).toBe(SECRET);
  });

  it("keepSecret wraps a property whose value held a secret anywhere, and nothing else", () => {
    const news = {
      content: { ...SIG, value: "x" },
      list: ["a", { ...SIG, value: "b" }],
      mode: "0444",
    };
    expect(keepSecret(news, { content: "x", list: ["a", "b"], mode: "0444", added: 1 })).toEqual({
      content: { ...SIG, value: "x" },
      list: { ...SIG, value: ["a", "b"] },
      mode: "0444",
      added: 1,
    });
  });
});
