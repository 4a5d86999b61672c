// The drift check without the engine, when it can prove the engine would find nothing: a `pulumi refresh
// --preview-only` spends ~1 s starting the CLI, opening the state and handshaking with the plugin for ~0.07 s
// of reads (tests/bench/drift-check.ts). Here the stack's checkpoint is read from its file backend, its
// secrets opened with the platform's key, and every resource read and diffed in this process by the plugin's
// own handlers, exactly as the engine would have the plugin do. Pulumi's Kubernetes provider cannot be asked in
// process; a stack's Kubernetes objects are clean here only when they are, uid and resourceVersion, the ones
// the engine's last clean refresh saw with the same checkpoint (the API server changes an object's
// resourceVersion with every write to it: ./drift-basis.ts). Anything this cannot vouch for is "not clean", and the engine's
// refresh preview decides as before.
import { createDecipheriv, createHash, pbkdf2 } from "node:crypto";
import { constants, existsSync, promises as fs } from "node:fs";
import * as path from "node:path";
import { gunzip } from "node:zlib";
import { promisify } from "node:util";
import { tenantNames } from "../../components/tenant/names.js";
import { dockerSocketPath } from "../../lib/docker-client.js";
import { toolchain } from "../../lib/toolchain.js";
import { createProvider } from "../../provider/handler.js";
import { SANDBOX_HANDLERS } from "../../provider/sandbox-handlers.js";
import { PLUGIN_VERSION } from "../../provider/version.js";
import type { DriftBasis } from "../store/drift.js";
import { basisDifference, NotVouched, observeBasis, type StackObject } from "./drift-basis.js";
import { fileBackendStacksDir, type TenantStackOptions } from "./stack.js";
import { openWithStackKey, STACK_KEY_NAME, STACK_KEY_PROVIDER, stackKey } from "./stack-keys.js";

export type DriftPrecheck =
  | {
      readonly clean: true;
      /** How many resources were read. */
      readonly resources: number;
      readonly ms: number;
    }
  | {
      readonly clean: false;
      readonly reason: string;
      /**
       * What the check saw of the stack's Kubernetes objects, when it has any and got as far as reading them:
       * what an engine's clean refresh vouches for, if it is the same after that refresh (`observeDriftBasis`).
       */
      readonly basis?: DriftBasis;
    };

/** Thrown inside the pre-check for anything it cannot vouch for; becomes `{ clean: false, reason }`. */
class NotClean extends Error {}

// The engine's property-value signatures (sdk/go/common/resource/sig): a secret, in a checkpoint, is
// `{ <sig key>: <secret sig>, ciphertext }` (or `plaintext` when shown); other signatures mark assets,
// archives, resource references, non-UTF-8 strings and non-finite floats, which no handler here uses.
const SIG_KEY = "4dabf18193072939515e22adb298388d";
const SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270";
/** A value unknown at the time (a preview's placeholder, sdk/go/common/resource/stack `computedValuePlaceholder`). */
const UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

interface CheckpointResource {
  readonly urn: string;
  readonly type: string;
  readonly custom?: boolean;
  readonly id?: string;
  readonly provider?: string;
  readonly inputs?: Record<string, Json>;
  readonly outputs?: Record<string, Json>;
  readonly delete?: boolean;
  readonly pendingReplacement?: boolean;
  readonly external?: boolean;
  readonly viewOf?: string;
}

/** A checkpoint's secrets manager: the passphrase's (its salt) or a cloud one's (its URL and data key). */
interface SecretsProviders {
  readonly type?: string;
  readonly state?: { readonly salt?: string; readonly url?: string; readonly encryptedkey?: string };
}

interface Checkpoint {
  readonly version?: number;
  readonly checkpoint?: {
    readonly latest?: {
      readonly secrets_providers?: SecretsProviders;
      readonly resources?: readonly CheckpointResource[];
      readonly pending_operations?: readonly unknown[];
    };
  };
}

/**
 * Whether the tenant's stack is provably without drift: what `pulumi refresh --preview-only` would report
 * as no change. Never throws: whatever it cannot decide, it answers `clean: false` with the reason.
 */
export async function precheckDrift(
  projectId: string,
  options: TenantStackOptions,
  vouched?: DriftBasis,
): Promise<DriftPrecheck> {
  const started = performance.now();
  const seen: { basis?: DriftBasis } = {};
  try {
    const resources = await readAll(projectId, options, vouched, seen);
    return { clean: true, resources, ms: performance.now() - started };
  } catch (error) {
    return {
      clean: false,
      reason:
        error instanceof NotClean || error instanceof NotVouched
          ? error.message
          : `the pre-check failed: ${(error as Error).message}`,
      ...(seen.basis ? { basis: seen.basis } : {}),
    };
  }
}

/**
 * The stack's basis as it is now (its checkpoint, its Kubernetes objects as the cluster answers), or undefined
 * when it has no Kubernetes objects or they cannot all be read. After an engine's clean refresh: equal to the
 * basis seen before it, nothing changed while the engine read, and the refresh vouches for it.
 */
export async function observeDriftBasis(
  projectId: string,
  options: TenantStackOptions,
): Promise<DriftBasis | undefined> {
  try {
    const { latest, digest } = await readDeployment(projectId, options);
    const decrypt = await stackDecrypter(latest.secrets_providers, options.passphrase);
    const byUrn = new Map(latest.resources!.map((resource) => [resource.urn, resource]));
    const objects = latest.resources!.filter((resource) => readable(resource, byUrn) === "kubernetes");
    return objects.length > 0 ? await observeBasis(digest, stackObjects(objects, byUrn, decrypt)) : undefined;
  } catch {
    return undefined;
  }
}

async function readAll(
  projectId: string,
  options: TenantStackOptions,
  vouched: DriftBasis | undefined,
  seen: { basis?: DriftBasis },
): Promise<number> {
  await sameEnvironmentAsPlugin(options);
  const { latest, digest } = await readDeployment(projectId, options);
  const decrypt = await stackDecrypter(latest.secrets_providers, options.passphrase);
  const resources = latest.resources!;
  const byUrn = new Map(resources.map((resource) => [resource.urn, resource]));
  const kinds = new Map(resources.map((resource) => [resource, readable(resource, byUrn)]));
  const ours = resources.filter((resource) => kinds.get(resource) === "sandbox");
  const objects = resources.filter((resource) => kinds.get(resource) === "kubernetes");
  if (objects.length > 0) {
    seen.basis = await observeBasis(digest, stackObjects(objects, byUrn, decrypt));
    if (!vouched)
      throw new NotClean(
        "no refresh by the engine has found its Kubernetes objects clean yet to compare with",
      );
    const differs = basisDifference(vouched, seen.basis);
    if (differs !== undefined) throw new NotClean(`since the engine's last clean refresh, ${differs}`);
  }
  await Promise.all(
    ours.map(async (resource) =>
      compare(resource, reveal(resource.outputs ?? {}, decrypt), reveal(resource.inputs ?? {}, decrypt)),
    ),
  );
  return ours.length + objects.length;
}

/** A stack's Kubernetes objects as the basis reads them: outputs and their provider's inputs revealed. */
function stackObjects(
  objects: readonly CheckpointResource[],
  byUrn: ReadonlyMap<string, CheckpointResource>,
  decrypt: (ciphertext: string) => string,
): StackObject[] {
  return objects.map((resource) => {
    const reference = resource.provider ?? "";
    const provider = byUrn.get(reference.slice(0, reference.lastIndexOf("::")))!;
    return {
      urn: resource.urn,
      type: resource.type,
      id: resource.id!,
      outputs: reveal(resource.outputs ?? {}, decrypt),
      provider: { urn: provider.urn, inputs: reveal(provider.inputs ?? {}, decrypt) as Record<string, Json> },
    };
  });
}

/** The checkpoint's deployment, checked as the engine would take it, and the digest of its bytes. */
async function readDeployment(
  projectId: string,
  options: TenantStackOptions,
): Promise<{ latest: NonNullable<NonNullable<Checkpoint["checkpoint"]>["latest"]>; digest: string }> {
  const { checkpoint, digest } = await readCheckpoint(projectId, options);
  // The version the pinned CLI writes; another may hold what it would refuse or read otherwise.
  if (checkpoint.version !== 3)
    throw new NotClean(`the checkpoint is of version ${checkpoint.version}, not 3`);
  const latest = checkpoint.checkpoint?.latest;
  if (!latest || !Array.isArray(latest.resources)) throw new NotClean("the checkpoint holds no deployment");
  if ((latest.pending_operations ?? []).length > 0)
    throw new NotClean("the checkpoint has pending operations (an update was interrupted)");
  return { latest, digest };
}

// --- where the checkpoint is, and what the plugin would run with -----------------------------------------

/** The stack's checkpoint from its file backend (`<stack>.json`, or `.json.gz` when the backend gzips). */
async function readCheckpoint(
  projectId: string,
  options: TenantStackOptions,
): Promise<{ checkpoint: Checkpoint; digest: string }> {
  const dir = fileBackendStacksDir(options.backendUrl);
  if (dir === undefined)
    throw new NotClean(`the state backend is not a file backend (${options.backendUrl})`);
  const file = path.join(dir, `${tenantNames(projectId).stack}.json`);
  const [plain, gzipped] = [existsSync(file), existsSync(`${file}.gz`)];
  if (plain && gzipped) throw new NotClean(`both ${file} and its .gz exist`);
  if (!plain && !gzipped) throw new NotClean(`no checkpoint at ${file}`);
  const bytes = plain ? await fs.readFile(file) : await promisify(gunzip)(await fs.readFile(`${file}.gz`));
  return {
    checkpoint: JSON.parse(bytes.toString("utf8")) as Checkpoint,
    digest: createHash("sha256").update(bytes).digest("hex"),
  };
}

/**
 * The plugin runs with this process's environment plus the toolchain's (its directories first on PATH) and
 * the stack's DOCKER_HOST (runtime/tenants/stack.ts `tenantWorkspace`); the handlers read DOCKER_HOST and
 * run host commands through PATH. Reading here is only the same when the engine socket is this process's
 * and no toolchain directory holds a command this process would find elsewhere on its PATH. (A command only
 * the toolchain has fails here, so such a read throws and the engine decides.)
 */
async function sameEnvironmentAsPlugin(options: TenantStackOptions): Promise<void> {
  for (const name of ["PULUMI_ENABLE_LEGACY_REFRESH_DIFF", "PULUMI_RUN_PROGRAM"]) {
    const value = process.env[name];
    // Either changes what a refresh compares (outputs only; or against the program's inputs).
    if (value && !/^(0|false)$/i.test(value)) throw new NotClean(`${name} is set`);
  }
  if (options.dockerHost) {
    const theirs = dockerSocketPath({ DOCKER_HOST: options.dockerHost });
    const ours = dockerSocketPath(process.env);
    if (theirs !== ours)
      throw new NotClean(`the stack's engine ${theirs} is not this process's (${ours}) to read in-process`);
  }
  const ownPath = (process.env.PATH ?? "").split(path.delimiter);
  const pluginPath = toolchain().env.PATH!.split(path.delimiter);
  const added = pluginPath.slice(0, pluginPath.length - ownPath.length);
  if (pluginPath.slice(added.length).join(path.delimiter) !== ownPath.join(path.delimiter))
    throw new NotClean("the plugin's PATH does not extend this process's");
  for (const dir of added) {
    for (const name of await fs.readdir(dir).catch(() => [] as string[])) {
      const [theirs, ours] = [await onPath(name, pluginPath), await onPath(name, ownPath)];
      if (ours !== undefined && ours !== theirs)
        throw new NotClean(`the plugin would run ${theirs} where this process runs ${ours}`);
    }
  }
}

/** The first executable file `name` in `dirs`, as a process spawning it by name would find it. */
async function onPath(name: string, dirs: readonly string[]): Promise<string | undefined> {
  for (const dir of dirs) {
    if (!dir) continue;
    const file = path.join(dir, name);
    const executable = await fs.access(file, constants.X_OK).then(
      () => fs.stat(file).then((stat) => stat.isFile()),
      () => false,
    );
    if (executable) return file;
  }
  return undefined;
}

// --- secrets --------------------------------------------------------------------------------------------

const keys = new Map<string, Promise<Buffer>>();

/**
 * The passphrase secrets manager's key (pkg/secrets/passphrase, sdk/go/common/resource/config/crypt.go):
 * PBKDF2-HMAC-SHA256 of the passphrase and the stack's salt, 1,000,000 iterations, 32 bytes. That costs
 * ~0.3 s of CPU, so each (salt, passphrase) is derived once per process, off the event loop.
 */
function derivedKey(salt: Buffer, passphrase: string): Promise<Buffer> {
  const id = `${salt.toString("base64")}:${createHash("sha256").update(passphrase).digest("hex")}`;
  let key = keys.get(id);
  if (!key) {
    key = promisify(pbkdf2)(passphrase, salt, 1_000_000, 32, "sha256");
    keys.set(id, key);
    key.catch(() => keys.delete(id));
  }
  return key;
}

/** `v1:<base64 nonce>:<base64 ciphertext with its 16-byte GCM tag>` → plaintext (crypt.go `DecryptValue`). */
function decryptValue(key: Buffer, value: string): string {
  const parts = value.split(":");
  if (parts.length !== 3 || parts[0] !== "v1")
    throw new NotClean("a secret is not a v1 passphrase ciphertext");
  const nonce = Buffer.from(parts[1]!, "base64");
  const sealed = Buffer.from(parts[2]!, "base64");
  if (nonce.length !== 12 || sealed.length < 16) throw new NotClean("a secret's ciphertext is malformed");
  const decipher = createDecipheriv("aes-256-gcm", key, nonce);
  decipher.setAuthTag(sealed.subarray(sealed.length - 16));
  return Buffer.concat([decipher.update(sealed.subarray(0, sealed.length - 16)), decipher.final()]).toString(
    "utf8",
  );
}

/**
 * The checkpoint's secrets decrypter, as its engine opens them: the key service's data key, or its passphrase
 * provider's salt (`v1:<base64 salt>:<ciphertext of "pulumi">`) with the stack's passphrase, checked against
 * that known plaintext as the CLI does.
 */
async function stackDecrypter(
  providers: SecretsProviders | undefined,
  passphrase: string | undefined,
): Promise<(ciphertext: string) => string> {
  if (providers?.type === "cloud") return keyServiceDecrypter(providers, passphrase);
  if (providers?.type !== "passphrase")
    throw new NotClean(`the stack's secrets provider is ${providers?.type ?? "none"}, not a passphrase`);
  if (!passphrase) throw new NotClean("no passphrase to open the stack's secrets");
  const state = providers.state?.salt ?? "";
  const [version, salt] = state.split(":");
  if (version !== "v1" || !salt) throw new NotClean("the stack's passphrase salt is malformed");
  const key = await derivedKey(Buffer.from(salt, "base64"), passphrase);
  let check: string | undefined;
  try {
    check = decryptValue(key, state.split(":").slice(2).join(":"));
  } catch {
    check = undefined;
  }
  if (check !== "pulumi") throw new NotClean("the passphrase does not open the stack's secrets");
  return decrypterOf(key);
}

/**
 * A stack made with the key service (`hashivault://agent-sandbox-tenants`, pkg/secrets/cloud): its random
 * data key, sealed by the service's key, opened here with the same key the service would use.
 */
async function keyServiceDecrypter(
  providers: SecretsProviders,
  passphrase: string | undefined,
): Promise<(ciphertext: string) => string> {
  const { url, encryptedkey } = providers.state ?? {};
  if (url !== STACK_KEY_PROVIDER)
    throw new NotClean(`the stack's secrets provider is ${url}, not the key service`);
  if (!passphrase) throw new NotClean("no passphrase to open the stack's secrets");
  if (typeof encryptedkey !== "string") throw new NotClean("the stack's data key is missing");
  let dataKey: Buffer;
  try {
    const sealed = Buffer.from(encryptedkey, "base64").toString("utf8");
    dataKey = openWithStackKey(await stackKey(passphrase, STACK_KEY_NAME), STACK_KEY_NAME, sealed);
  } catch {
    throw new NotClean("the key service's key does not open the stack's data key");
  }
  if (dataKey.length !== 32) throw new NotClean("the stack's data key is not 32 bytes");
  return decrypterOf(dataKey);
}

/** Pulumi's symmetric crypter (config.NewSymmetricCrypter) under `key`, failures as NotClean. */
function decrypterOf(key: Buffer): (ciphertext: string) => string {
  return (ciphertext) => {
    try {
      return decryptValue(key, ciphertext);
    } catch (error) {
      if (error instanceof NotClean) throw error;
      throw new NotClean("a secret does not decrypt with the stack's key");
    }
  };
}

/**
 * A checkpoint value as the plugin receives it: secrets as their plain values. Inside a secret, a nested one
 * was serialized without encryption (`ciphertext` is its JSON); any other signature or a value unknown at
 * the time is not something this check reads.
 */
function reveal(value: Json, decrypt: (ciphertext: string) => string): Json {
  if (value === UNKNOWN) throw new NotClean("the checkpoint holds a value unknown at the time");
  if (Array.isArray(value)) return value.map((item) => reveal(item, decrypt));
  if (value === null || typeof value !== "object") return value;
  if (SIG_KEY in value) {
    if (value[SIG_KEY] !== SECRET_SIG) throw new NotClean(`a value of signature ${String(value[SIG_KEY])}`);
    const { ciphertext, plaintext } = value;
    const text = typeof plaintext === "string" ? plaintext : decrypt(String(ciphertext));
    return reveal(JSON.parse(text) as Json, (inner) => inner);
  }
  return Object.fromEntries(Object.entries(value).map(([key, item]) => [key, reveal(item, decrypt)]));
}

// --- the resources --------------------------------------------------------------------------------------

/**
 * How this check reads a resource the engine's refresh would read: through the `sandbox` plugin's handlers,
 * or as a Kubernetes object of Pulumi's provider (compared with the vouched basis); components, the stack
 * and provider resources it never reads (and neither does this). Anything of another plugin, or in a state
 * a refresh treats apart (pending deletion or replacement, external, a view), is not this check's.
 */
function readable(
  resource: CheckpointResource,
  byUrn: ReadonlyMap<string, CheckpointResource>,
): "sandbox" | "kubernetes" | undefined {
  if (resource.delete || resource.pendingReplacement || resource.external || resource.viewOf)
    throw new NotClean(`${resource.urn} is pending deletion or replacement, external or a view`);
  if (!resource.custom || resource.type.startsWith("pulumi:providers:")) return undefined;
  // `<provider urn>::<provider id>`: the engine runs the plugin of the version that provider resource names.
  const reference = resource.provider ?? "";
  const provider = byUrn.get(reference.slice(0, reference.lastIndexOf("::")));
  if (resource.type.startsWith("kubernetes:") && provider?.type === "pulumi:providers:kubernetes") {
    if (!resource.id) throw new NotClean(`${resource.urn} has no id`);
    return "kubernetes";
  }
  if (!Object.hasOwn(SANDBOX_HANDLERS, resource.type))
    throw new NotClean(`a resource of type ${resource.type} is not ours to read (${resource.urn})`);
  if (!resource.id) throw new NotClean(`${resource.urn} has no id`);
  const version = provider?.inputs?.version;
  if (provider?.type !== "pulumi:providers:sandbox" || (version !== undefined && version !== PLUGIN_VERSION))
    throw new NotClean(`${resource.urn}'s provider is not this sandbox plugin ${PLUGIN_VERSION}`);
  return "sandbox";
}

let plugin: ReturnType<typeof createProvider> | undefined;

/**
 * One resource as the engine refreshes it (pkg/resource/deploy/step.go `RefreshStep`): the plugin's Read of
 * its id and outputs, then, its diff result deciding, the plugin's Diff of the observed outputs against the
 * recorded inputs; only "no changes" is no drift. This also wants the observed outputs equal to the recorded
 * ones, so that what is clean here would be clean by the older, outputs-only comparison as well.
 */
async function compare(resource: CheckpointResource, outputs: Json, inputs: Json): Promise<void> {
  plugin ??= createProvider(PLUGIN_VERSION, SANDBOX_HANDLERS);
  let read: Awaited<ReturnType<NonNullable<typeof plugin.read>>>;
  try {
    read = await plugin.read!(resource.id!, resource.urn, outputs as Record<string, unknown>);
  } catch (error) {
    throw new NotClean(`reading ${resource.urn} failed: ${(error as Error).message}`);
  }
  if (!read.id || read.props === undefined) throw new NotClean(`${resource.urn} no longer exists`);
  const observed = wireValue(read.props, resource.urn, "");
  const differs = firstDifference(outputs, observed, "");
  if (differs !== undefined) throw new NotClean(`${resource.urn} differs at ${differs || "(outputs)"}`);
  const diff = await plugin.diff!(resource.id!, resource.urn, observed, inputs as Record<string, unknown>);
  if (diff.changes !== false)
    throw new NotClean(`${resource.urn}: the plugin's diff against its inputs is not "no changes"`);
}

/**
 * The observed value as it reaches the engine: the SDK's provider server sends it as a protobuf Struct
 * (`Struct.fromJavaScript`, which refuses `undefined`). Anything the engine would refuse or read otherwise
 * (a non-finite number, a signature key, the unknown placeholder, a non-plain object) is not vouched for.
 */
function wireValue(value: unknown, urn: string, at: string): Json {
  const refuse = (what: string) => new NotClean(`${urn} reads ${what} at ${at || "(outputs)"}`);
  if (value === null || typeof value === "boolean") return value;
  if (typeof value === "string") {
    if (value === UNKNOWN) throw refuse("the unknown placeholder");
    return value;
  }
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw refuse("a non-finite number");
    return value;
  }
  if (Array.isArray(value)) return value.map((item, i) => wireValue(item, urn, `${at}[${i}]`));
  if (typeof value === "object" && Object.getPrototypeOf(value) === Object.prototype) {
    if (SIG_KEY in value) throw refuse("a signature key");
    return Object.fromEntries(
      Object.entries(value).map(([key, item]) => [key, wireValue(item, urn, at ? `${at}.${key}` : key)]),
    );
  }
  throw refuse(value === undefined ? "undefined" : `a ${typeof value}`);
}

/** The path of the first difference between two JSON values (object keys in any order), or undefined. */
function firstDifference(a: Json, b: Json, at: string): string | undefined {
  const here = at || "(outputs)";
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return here;
    for (let i = 0; i < a.length; i++) {
      const differs = firstDifference(a[i]!, b[i]!, `${at}[${i}]`);
      if (differs !== undefined) return differs;
    }
    return undefined;
  }
  if (a !== null && b !== null && typeof a === "object" && typeof b === "object") {
    for (const key of [...new Set([...Object.keys(a), ...Object.keys(b)])].sort()) {
      const child = at ? `${at}.${key}` : key;
      if (!(key in a) || !(key in b)) return child;
      const differs = firstDifference(a[key]!, b[key]!, child);
      if (differs !== undefined) return differs;
    }
    return undefined;
  }
  return a === b ? undefined : here;
}
