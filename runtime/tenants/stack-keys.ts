import { createCipheriv, createDecipheriv, hkdf, pbkdf2, randomBytes, timingSafeEqual } from "node:crypto";
import { mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import * as http from "node:http";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";

/**
 * The tenant stacks' key, served to the Pulumi CLI by the process that runs it.
 *
 * Pulumi's passphrase secrets manager derives its key with 1,000,000 PBKDF2-SHA256 iterations in every CLI
 * process that opens a stack's secrets (sdk/go/common/resource/config/crypt.go): `stack init` and every `up`,
 * `refresh`, `preview` and `destroy` paid 0.25 s of CPU for it here, a third of an unchanged `up`. The CLI's
 * `hashivault://` provider (gocloud.dev/secrets/hashivault) instead keeps a random data key per stack,
 * encrypted by a key service it asks once per process. This module is that service, for this process's own
 * CLI runs: the two calls of Vault's transit API the provider makes (`PUT /v1/transit/encrypt/<key>`,
 * `PUT /v1/transit/decrypt/<key>`), on a unix socket in a directory only its user can enter, answering only
 * the token its CLI runs are given (`VAULT_ADDR`, `VAULT_TOKEN`). Its key is derived from the platform's state
 * passphrase once per process, so every process of the platform (the runtime, a worker, a script) serves the
 * same key, and a stack is opened by whichever runs its engine. Stacks made before it keep the passphrase
 * provider they were made with; the passphrase still opens them (docs/tenant-stacks.md).
 */

/** The key's name in the stacks' provider URL (`secretsprovider` of each stack's config, and its state). */
export const STACK_KEY_NAME = "agent-sandbox-tenants";
/** The secrets provider new tenant stacks are made with (`pulumi stack init --secrets-provider`). */
export const STACK_KEY_PROVIDER = `hashivault://${STACK_KEY_NAME}`;

/** What a ciphertext of this service starts with: Vault's own prefix and the key's version. */
const CIPHERTEXT_PREFIX = "vault:v1:";
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
/** A data key is 32 bytes; a request many times that is not the CLI's. */
const MAX_BODY_BYTES = 64 * 1024;
/** Key names the service answers for: what a `hashivault://` URL's host and path can hold, bounded. */
const KEY_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

const masterKeys = new Map<string, Promise<Buffer>>();

/**
 * The service's root key for `passphrase`: PBKDF2-SHA256, 1,000,000 iterations (as Pulumi's passphrase
 * manager, since an operator's AGENT_SANDBOX_STATE_PASSPHRASE may be a phrase), paid once per process, off
 * the event loop. Each key name then gets its own key from it (HKDF-SHA256).
 */
function masterKey(passphrase: string): Promise<Buffer> {
  let key = masterKeys.get(passphrase);
  if (!key) {
    key = promisify(pbkdf2)(passphrase, "agent-sandbox/tenant-stack-keys/v1", 1_000_000, 32, "sha256");
    masterKeys.set(passphrase, key);
    key.catch(() => masterKeys.delete(passphrase));
  }
  return key;
}

/** The key named `name` (a provider URL's `hashivault://<name>`) under `passphrase`. */
export async function stackKey(passphrase: string, name: string): Promise<Buffer> {
  if (!KEY_NAME.test(name)) throw new StackKeyError(400, `the key name ${JSON.stringify(name)} is not valid`);
  const key = await promisify(hkdf)("sha256", await masterKey(passphrase), "", `stack key ${name}`, 32);
  return Buffer.from(key);
}

/** An error the service answers with, its status Vault's for the same case. */
export class StackKeyError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** `plaintext` sealed under `key` (AES-256-GCM, the key's name as associated data): `vault:v1:<base64>`. */
export function sealWithStackKey(key: Buffer, name: string, plaintext: Buffer): string {
  const nonce = randomBytes(NONCE_BYTES);
  const cipher = createCipheriv("aes-256-gcm", key, nonce);
  cipher.setAAD(Buffer.from(name));
  const sealed = Buffer.concat([nonce, cipher.update(plaintext), cipher.final(), cipher.getAuthTag()]);
  return CIPHERTEXT_PREFIX + sealed.toString("base64");
}

/** The plaintext of a `sealWithStackKey` ciphertext, or a StackKeyError naming what is wrong with it. */
export function openWithStackKey(key: Buffer, name: string, ciphertext: string): Buffer {
  if (!ciphertext.startsWith(CIPHERTEXT_PREFIX))
    throw new StackKeyError(400, `the ciphertext does not start with ${CIPHERTEXT_PREFIX}`);
  const sealed = Buffer.from(ciphertext.slice(CIPHERTEXT_PREFIX.length), "base64");
  if (sealed.length < NONCE_BYTES + TAG_BYTES) throw new StackKeyError(400, "the ciphertext is too short");
  const decipher = createDecipheriv("aes-256-gcm", key, sealed.subarray(0, NONCE_BYTES));
  decipher.setAAD(Buffer.from(name));
  decipher.setAuthTag(sealed.subarray(sealed.length - TAG_BYTES));
  try {
    return Buffer.concat([
      decipher.update(sealed.subarray(NONCE_BYTES, sealed.length - TAG_BYTES)),
      decipher.final(),
    ]);
  } catch {
    throw new StackKeyError(400, `the ciphertext was not sealed by the key ${name}`);
  }
}

/** A running key service: what a CLI run needs in its environment to reach it. */
export interface StackKeyService {
  readonly env: { readonly VAULT_ADDR: string; readonly VAULT_TOKEN: string };
  readonly socket: string;
  close(): Promise<void>;
}

const services = new Map<string, Promise<StackKeyService>>();

/**
 * This process's key service for `passphrase`, started at its first use: one per passphrase, kept for the
 * process's life (it never keeps the process alive, and its socket's directory goes when the process exits).
 */
export function stackKeyService(passphrase: string): Promise<StackKeyService> {
  let service = services.get(passphrase);
  if (!service) {
    service = startStackKeyService(passphrase);
    services.set(passphrase, service);
    service.catch(() => services.delete(passphrase));
  }
  return service;
}

/** Starts a key service (`stackKeyService` shares one per passphrase; a test may own one). */
export async function startStackKeyService(passphrase: string): Promise<StackKeyService> {
  await masterKey(passphrase); // a passphrase that cannot be used fails here, not in the engine
  const token = randomBytes(32).toString("hex");
  removeDeadServicesDirs();
  // mkdtemp makes the directory 0700: nobody but this user reaches the socket, and it is named by nobody else.
  const dir = mkdtempSync(path.join(os.tmpdir(), `${DIR_PREFIX}${process.pid}-`));
  const socket = path.join(dir, "transit.sock");
  const server = http.createServer((request, response) => {
    void answer(request, passphrase, token).then(
      (data) => reply(response, 200, { data }),
      (error: unknown) =>
        error instanceof StackKeyError
          ? reply(response, error.status, { errors: [error.message] })
          : reply(response, 500, { errors: [`the key service failed: ${(error as Error).message}`] }),
    );
  });
  const removeDir = () => rmSync(dir, { recursive: true, force: true });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(socket, () => resolve());
  }).catch((error: unknown) => {
    removeDir();
    throw error;
  });
  server.unref();
  process.once("exit", removeDir);
  return {
    env: { VAULT_ADDR: `unix://${socket}`, VAULT_TOKEN: token },
    socket,
    close: () =>
      new Promise<void>((resolve) => {
        process.off("exit", removeDir);
        server.close(() => {
          removeDir();
          resolve();
        });
        server.closeAllConnections();
      }),
  };
}

/** A service's directory: `<tmp>/agent-sandbox-keys-<pid>-<random>`. */
const DIR_PREFIX = "agent-sandbox-keys-";

/**
 * The directories of services whose process is gone without its exit handler (SIGKILL: the chaos loops kill
 * runtimes so): this user's, named with a pid that no longer runs. Best effort.
 */
function removeDeadServicesDirs(): void {
  let names: string[];
  try {
    names = readdirSync(os.tmpdir());
  } catch {
    return;
  }
  for (const name of names) {
    const pid = Number(new RegExp(`^${DIR_PREFIX}(\\d+)-`).exec(name)?.[1]);
    if (!pid || pid === process.pid || pidAlive(pid)) continue;
    const dir = path.join(os.tmpdir(), name);
    try {
      if (statSync(dir).uid === process.getuid?.()) rmSync(dir, { recursive: true, force: true });
    } catch {
      // gone already, or not ours to remove
    }
  }
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM";
  }
}

function reply(response: http.ServerResponse, status: number, body: unknown): void {
  response.writeHead(status, { "content-type": "application/json" });
  response.end(JSON.stringify(body));
}

/** One request: the token, the route, the body, then the key's answer (Vault's `data`). */
async function answer(
  request: http.IncomingMessage,
  passphrase: string,
  token: string,
): Promise<Record<string, string>> {
  const given = Buffer.from(String(request.headers["x-vault-token"] ?? ""));
  const expected = Buffer.from(token);
  if (given.length !== expected.length || !timingSafeEqual(given, expected))
    throw new StackKeyError(403, "permission denied: the X-Vault-Token header is not this service's token");
  const route = /^\/v1\/transit\/(encrypt|decrypt)\/([^/?]+)$/.exec(request.url ?? "");
  if (!route)
    throw new StackKeyError(404, `no route ${request.url}: only /v1/transit/{encrypt,decrypt}/<key>`);
  if (request.method !== "PUT" && request.method !== "POST")
    throw new StackKeyError(405, `${request.method} is not PUT or POST`);
  const body = await readJson(request);
  const [, operation, name] = route as unknown as [string, "encrypt" | "decrypt", string];
  const key = await stackKey(passphrase, name);
  if (operation === "encrypt") {
    const plaintext = body.plaintext;
    if (typeof plaintext !== "string") throw new StackKeyError(400, "missing plaintext to encrypt");
    return { ciphertext: sealWithStackKey(key, name, Buffer.from(plaintext, "base64")) };
  }
  const ciphertext = body.ciphertext;
  if (typeof ciphertext !== "string") throw new StackKeyError(400, "missing ciphertext to decrypt");
  return { plaintext: openWithStackKey(key, name, ciphertext).toString("base64") };
}

async function readJson(request: http.IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of request as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES)
      throw new StackKeyError(413, `the request body is over ${MAX_BODY_BYTES} bytes`);
    chunks.push(chunk);
  }
  let body: unknown;
  try {
    body = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch {
    throw new StackKeyError(400, "the request body is not JSON");
  }
  if (typeof body !== "object" || body === null || Array.isArray(body))
    throw new StackKeyError(400, "the request body is not a JSON object");
  return body as Record<string, unknown>;
}
