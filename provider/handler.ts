import type * as provider from "@pulumi/pulumi/provider/index.js";
import { z } from "zod";

/**
 * One resource type served by a provider plugin. Inputs are validated by the handler's zod schema in
 * `check`, so every other method receives parsed, typed values.
 */
export interface ResourceHandler<I, O extends I> {
  readonly inputs: z.ZodType<I>;
  diff(id: string, olds: O, news: I): Promise<provider.DiffResult>;
  create(inputs: I): Promise<{ id: string; outs: O }>;
  /** Observed state, or `undefined` when the object no longer exists (refresh then drops it). */
  read(id: string, olds: O): Promise<O | undefined>;
  update(id: string, olds: O, news: I): Promise<O>;
  delete(id: string, olds: O): Promise<void>;
}

// The handler map is heterogeneous; each entry is only ever called with values its own schema parsed.
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AnyHandler = ResourceHandler<any, any>;

/** `urn:pulumi:<stack>::<project>::<parent$...$type>::<name>` → `<type>`. */
export function resourceTypeOfUrn(urn: string): string {
  const parts = urn.split("::");
  const qualified = parts[2];
  if (parts.length < 4 || qualified === undefined) throw new Error(`malformed URN: ${urn}`);
  return qualified.split("$").at(-1) ?? qualified;
}

/**
 * The labels an object carries that the resource declared (the engine adds its own, and so may images):
 * what refresh compares, so a changed or removed label is drift and a foreign extra one is not.
 */
export function declaredLabels(
  actual: Record<string, string>,
  declared: Record<string, string> = {},
): Record<string, string> {
  return Object.fromEntries(
    Object.keys(declared)
      .filter((key) => key in actual)
      .map((key) => [key, actual[key]!]),
  );
}

/** zod issues → Pulumi check failures naming the offending property path. */
export function checkFailures(error: z.ZodError): provider.CheckFailure[] {
  return error.issues.map((issue) => ({
    property: issue.path.map(String).join(".") || "(inputs)",
    reason: issue.message,
  }));
}

/** Names of top-level properties whose values differ (deep equality on JSON values). */
export function changedKeys<T extends object>(olds: T, news: T, keys: readonly (keyof T)[]): string[] {
  return keys
    .filter((key) => JSON.stringify(canonical(olds[key])) !== JSON.stringify(canonical(news[key])))
    .map(String);
}

function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value !== null && typeof value === "object") {
    return Object.fromEntries(
      Object.entries(value as Record<string, unknown>)
        .filter(([, v]) => v !== undefined)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([k, v]) => [k, canonical(v)]),
    );
  }
  return value;
}

const SIG_KEY = "4dabf18193072939515e22adb298388d";
const SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270";

/**
 * The engine hands providers secret values wrapped as `{ <sig>: <secret sig>, value }` (pulumi/sdk
 * rpc.ts). Handlers work on plain values; the engine keeps outputs secret through the resource's
 * `additionalSecretOutputs` and the secretness of the inputs they came from.
 */
export function unwrapSecrets(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(unwrapSecrets);
  if (value !== null && typeof value === "object") {
    const record = value as Record<string, unknown>;
    if (record[SIG_KEY] === SECRET_SIG) return unwrapSecrets(record.value);
    return Object.fromEntries(Object.entries(record).map(([k, v]) => [k, unwrapSecrets(v)]));
  }
  return value;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const plain = (value: unknown): any => unwrapSecrets(value);

/** Whether any part of `value` is a secret as the engine hands it to a provider. */
function holdsSecret(value: unknown): boolean {
  if (Array.isArray(value)) return value.some(holdsSecret);
  if (value === null || typeof value !== "object") return false;
  const record = value as Record<string, unknown>;
  return record[SIG_KEY] === SECRET_SIG || Object.values(record).some(holdsSecret);
}

/**
 * The checked inputs with each top-level property that held a secret in `news` wrapped as a secret again.
 * The engine records what Check answers as the resource's inputs, and marks an output secret where the input of
 * its name is: answered plain, a project secret's file content (`pulumi.secret`) was stored in the stack's state
 * in plain text, inputs and outputs alike, whatever the program asked. A whole property is kept secret when any
 * part of it was (a list with one secret item): coarser than the program's, never less secret.
 */
export function keepSecret(
  news: Record<string, unknown>,
  checked: Record<string, unknown>,
): Record<string, unknown> {
  return Object.fromEntries(
    Object.entries(checked).map(([key, value]) => [
      key,
      holdsSecret(news[key]) && value !== undefined ? { [SIG_KEY]: SECRET_SIG, value } : value,
    ]),
  );
}

/** Adapts type-token → handler maps to the SDK's `Provider` interface. */
export function createProvider(version: string, handlers: Record<string, AnyHandler>): provider.Provider {
  const handlerFor = (urn: string): AnyHandler => {
    const type = resourceTypeOfUrn(urn);
    const handler = handlers[type];
    if (!handler) {
      throw new Error(
        `unknown resource type ${type}; this plugin serves ${Object.keys(handlers).join(", ")}`,
      );
    }
    return handler;
  };
  return {
    version,
    async check(urn, _olds, news) {
      const parsed = handlerFor(urn).inputs.safeParse(stripInternal(plain(news)));
      if (parsed.success) return { inputs: keepSecret(news, parsed.data as Record<string, unknown>) };
      // In a preview, a value computed by another resource is not known yet: it is checked once it is.
      const failures = checkFailures(parsed.error).filter(
        (failure) => valueAt(plain(news), failure.property) !== UNKNOWN,
      );
      return { inputs: news, ...(failures.length > 0 ? { failures } : {}) };
    },
    diff: (id, urn, olds, news) => handlerFor(urn).diff(id, plain(olds), plain(news)),
    create: (urn, inputs) => handlerFor(urn).create(plain(inputs)),
    async read(id, urn, props) {
      const observed = await handlerFor(urn).read(id, plain(props));
      return observed === undefined ? {} : { id, props: observed, inputs: observed };
    },
    update: async (id, urn, olds, news) => ({
      outs: await handlerFor(urn).update(id, plain(olds), plain(news)),
    }),
    delete: (id, urn, props) => handlerFor(urn).delete(id, plain(props)),
  };
}

/** The engine's placeholder for a value not known until another resource is created (sdk rpc.ts). */
const UNKNOWN = "04da6b54-80e4-46f7-96ec-b56ff0331ba9";

function valueAt(value: unknown, property: string): unknown {
  return property
    .split(".")
    .reduce<unknown>(
      (at, key) => (at !== null && typeof at === "object" ? (at as Record<string, unknown>)[key] : undefined),
      value,
    );
}

/** The engine adds `__defaults` and similar bookkeeping keys to inputs; schemas should not see them. */
function stripInternal(news: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(news ?? {}).filter(([key]) => !key.startsWith("__")));
}
