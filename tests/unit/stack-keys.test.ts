// The tenant stacks' key service (runtime/tenants/stack-keys.ts): Vault's transit calls over its unix socket,
// what it refuses and how it says so, and the pinned Pulumi CLI's `hashivault://` provider using it for real.
import { execFile, spawnSync } from "node:child_process";
import { promises as fs, statSync } from "node:fs";
import * as http from "node:http";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  openWithStackKey,
  sealWithStackKey,
  STACK_KEY_NAME,
  STACK_KEY_PROVIDER,
  stackKey,
  startStackKeyService,
  type StackKeyService,
} from "../../runtime/tenants/stack-keys.js";
import { toolchain } from "../../lib/toolchain.js";

const PASSPHRASE = "correct horse battery staple";
let service: StackKeyService;

interface Answer {
  readonly status: number;
  readonly body: { data?: Record<string, string>; errors?: string[] };
}

/** One request over the service's socket, as Vault's client makes it. */
function call(
  on: StackKeyService,
  url: string,
  body: unknown,
  { token = on.env.VAULT_TOKEN, method = "PUT" }: { token?: string; method?: string } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const request = http.request(
      { socketPath: on.socket, path: url, method, headers: token ? { "x-vault-token": token } : {} },
      (response) => {
        let text = "";
        response.on("data", (chunk: Buffer) => (text += chunk.toString()));
        response.on("end", () =>
          resolve({ status: response.statusCode!, body: JSON.parse(text) as Answer["body"] }),
        );
      },
    );
    request.on("error", reject);
    request.end(body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body));
  });
}

const encrypt = (plaintext: Buffer, on = service, name = STACK_KEY_NAME) =>
  call(on, `/v1/transit/encrypt/${name}`, { plaintext: plaintext.toString("base64") });
const decrypt = (ciphertext: string, on = service, name = STACK_KEY_NAME) =>
  call(on, `/v1/transit/decrypt/${name}`, { ciphertext });

beforeAll(async () => {
  service = await startStackKeyService(PASSPHRASE);
}, 30_000);

afterAll(() => service?.close());

describe("the stack key service", () => {
  it("seals and opens a data key as Vault's transit engine answers, behind a socket only its user reaches", async () => {
    const dataKey = Buffer.from("0123456789abcdef0123456789abcdef");
    const sealed = await encrypt(dataKey);
    expect(sealed.status).toBe(200);
    expect(sealed.body.data!.ciphertext).toMatch(/^vault:v1:[A-Za-z0-9+/]+=*$/);
    expect(sealed.body.data!.ciphertext).not.toContain(dataKey.toString("base64"));
    const opened = await decrypt(sealed.body.data!.ciphertext!);
    expect(opened).toEqual({ status: 200, body: { data: { plaintext: dataKey.toString("base64") } } });
    // Every seal is new (a random nonce); each opens to the same key.
    expect((await encrypt(dataKey)).body.data!.ciphertext).not.toBe(sealed.body.data!.ciphertext);
    expect(statSync(path.dirname(service.socket)).mode & 0o777).toBe(0o700);
    expect(service.env.VAULT_ADDR).toBe(`unix://${service.socket}`);
  });

  it("the same passphrase is the same key in another service (another process of the platform); another passphrase's is not", async () => {
    const other = await startStackKeyService(PASSPHRASE);
    const stranger = await startStackKeyService("another phrase");
    try {
      expect(other.env.VAULT_TOKEN).not.toBe(service.env.VAULT_TOKEN);
      const sealed = (await encrypt(Buffer.from("data key"))).body.data!.ciphertext!;
      expect((await decrypt(sealed, other)).body.data!.plaintext).toBe(
        Buffer.from("data key").toString("base64"),
      );
      expect(await decrypt(sealed, stranger)).toEqual({
        status: 400,
        body: { errors: [`the ciphertext was not sealed by the key ${STACK_KEY_NAME}`] },
      });
    } finally {
      await Promise.all([other.close(), stranger.close()]);
    }
    // Closed: its socket and directory are gone.
    await expect(fs.stat(path.dirname(other.socket))).rejects.toThrow(/ENOENT/);
  });

  it("a service killed without its exit handler leaves a directory the next one started removes; a live one's stays", async () => {
    const dead = spawnSync("true").pid!;
    const deadDir = await fs.mkdtemp(path.join(os.tmpdir(), `agent-sandbox-keys-${dead}-`));
    const liveDir = await fs.mkdtemp(path.join(os.tmpdir(), "agent-sandbox-keys-1-"));
    try {
      const next = await startStackKeyService(PASSPHRASE);
      await next.close();
      await expect(fs.stat(deadDir)).rejects.toThrow(/ENOENT/);
      expect((await fs.stat(liveDir)).isDirectory()).toBe(true);
      expect((await fs.stat(service.socket)).isSocket()).toBe(true);
    } finally {
      await fs.rm(liveDir, { recursive: true, force: true });
    }
  });

  it("refuses a request without its token, or with another, before reading anything", async () => {
    for (const token of ["", "0".repeat(64), `${service.env.VAULT_TOKEN}x`]) {
      const answer = await call(
        service,
        `/v1/transit/encrypt/${STACK_KEY_NAME}`,
        { plaintext: "AA==" },
        { token },
      );
      expect(answer).toEqual({
        status: 403,
        body: { errors: ["permission denied: the X-Vault-Token header is not this service's token"] },
      });
    }
  });

  it("names what is wrong with a bad request: route, method, body, key name, ciphertext", async () => {
    const cases: [string, unknown, { method?: string } | undefined, number, string][] = [
      [
        "/v1/sys/health",
        {},
        undefined,
        404,
        "no route /v1/sys/health: only /v1/transit/{encrypt,decrypt}/<key>",
      ],
      [`/v1/transit/encrypt/${STACK_KEY_NAME}`, undefined, { method: "GET" }, 405, "GET is not PUT or POST"],
      [`/v1/transit/encrypt/${STACK_KEY_NAME}`, "{not json", undefined, 400, "the request body is not JSON"],
      [
        `/v1/transit/encrypt/${STACK_KEY_NAME}`,
        "[1]",
        undefined,
        400,
        "the request body is not a JSON object",
      ],
      [`/v1/transit/encrypt/${STACK_KEY_NAME}`, {}, undefined, 400, "missing plaintext to encrypt"],
      [
        `/v1/transit/decrypt/${STACK_KEY_NAME}`,
        { ciphertext: 1 },
        undefined,
        400,
        "missing ciphertext to decrypt",
      ],
      [
        `/v1/transit/encrypt/-dash`,
        { plaintext: "AA==" },
        undefined,
        400,
        'the key name "-dash" is not valid',
      ],
      [
        `/v1/transit/decrypt/${STACK_KEY_NAME}`,
        { ciphertext: "v1:abc" },
        undefined,
        400,
        "the ciphertext does not start with vault:v1:",
      ],
      [
        `/v1/transit/decrypt/${STACK_KEY_NAME}`,
        { ciphertext: "vault:v1:AAAA" },
        undefined,
        400,
        "the ciphertext is too short",
      ],
      [
        `/v1/transit/encrypt/${STACK_KEY_NAME}`,
        "x".repeat(70_000),
        undefined,
        413,
        "the request body is over 65536 bytes",
      ],
    ];
    for (const [url, body, options, status, message] of cases) {
      expect({ url, ...(await call(service, url, body, options)) }).toEqual({
        url,
        status,
        body: { errors: [message] },
      });
    }
  });

  it("a ciphertext opens only under its own key name, and not once a byte of it changed", async () => {
    const key = await stackKey(PASSPHRASE, STACK_KEY_NAME);
    const sealed = sealWithStackKey(key, STACK_KEY_NAME, Buffer.from("secret"));
    expect(openWithStackKey(key, STACK_KEY_NAME, sealed).toString()).toBe("secret");
    const otherName = await decrypt(sealed, service, "other-key");
    expect(otherName).toEqual({
      status: 400,
      body: { errors: ["the ciphertext was not sealed by the key other-key"] },
    });
    const bytes = Buffer.from(sealed.slice("vault:v1:".length), "base64");
    bytes.writeUInt8(bytes.readUInt8(bytes.length - 20) ^ 1, bytes.length - 20);
    expect(() => openWithStackKey(key, STACK_KEY_NAME, `vault:v1:${bytes.toString("base64")}`)).toThrow(
      `the ciphertext was not sealed by the key ${STACK_KEY_NAME}`,
    );
  });
});

describe("the Pulumi CLI's hashivault:// provider against it", () => {
  let project: string;
  const pulumi = (env: Record<string, string>, ...args: string[]) => {
    const chain = toolchain();
    return promisify(execFile)(chain.pulumiBin, [...args, "--non-interactive"], {
      cwd: project,
      env: { ...process.env, ...chain.env, PULUMI_HOME: path.join(project, ".home"), ...env },
    });
  };

  beforeAll(async () => {
    project = await fs.mkdtemp(path.join(os.tmpdir(), "stack-keys-cli-"));
    await fs.mkdir(path.join(project, "state"));
    await fs.writeFile(
      path.join(project, "Pulumi.yaml"),
      `name: keys\nruntime: nodejs\nbackend:\n  url: file://${project}/state\n`,
    );
  });
  afterAll(() => fs.rm(project, { recursive: true, force: true }));

  it("a stack made with it keeps a secret only the service's key opens; a CLI run with a wrong token is told so", async () => {
    await pulumi({ ...service.env }, "stack", "init", "s", "--secrets-provider", STACK_KEY_PROVIDER);
    const config = await fs.readFile(path.join(project, "Pulumi.s.yaml"), "utf8");
    expect(config).toMatch(new RegExp(`^secretsprovider: ${STACK_KEY_PROVIDER}$`, "m"));
    const sealedKey = /^encryptedkey: (\S+)$/m.exec(config)![1]!;
    expect(Buffer.from(sealedKey, "base64").toString()).toMatch(/^vault:v1:/);
    await pulumi({ ...service.env }, "config", "set", "--secret", "token", "hunter2", "--stack", "s");
    expect(await fs.readFile(path.join(project, "Pulumi.s.yaml"), "utf8")).not.toContain("hunter2");
    // Another process's service (the same passphrase) opens it: the key is the platform's, not the process's.
    const other = await startStackKeyService(PASSPHRASE);
    try {
      const { stdout } = await pulumi({ ...other.env }, "config", "get", "token", "--stack", "s");
      expect(stdout.trim()).toBe("hunter2");
    } finally {
      await other.close();
    }
    const refused = pulumi(
      { ...service.env, VAULT_TOKEN: "wrong" },
      "config",
      "get",
      "token",
      "--stack",
      "s",
    );
    await expect(refused).rejects.toThrow(
      /permission denied: the X-Vault-Token header is not this service's token/,
    );
  }, 60_000);
});
