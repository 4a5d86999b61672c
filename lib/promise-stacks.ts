/**
 * The Pulumi SDK's promise bookkeeping without a stack trace per promise. The SDK's `debuggablePromise`
 * (runtime/debuggable.js), which every resource registration, output and invoke goes through, records
 * `new Error().stack` on each promise it wraps, for one purpose: to print where a promise was made when it
 * is still pending at exit and `PULUMI_DEBUG_PROMISE_LEAKS` is set. Formatting a stack is the costly part of
 * an Error, and under `node --enable-source-maps` (how the runtime and the shared provider run: their
 * errors name the TypeScript sources) each frame is looked up in the bundle's source map too; the runtime
 * runs every tenant program inline, so it paid this for every promise of every create.
 *
 * Without `PULUMI_DEBUG_PROMISE_LEAKS`, the SDK's own function still runs (ids, contexts, the leak count and
 * its message at exit), with `Error.stackTraceLimit` at 0 for its duration: the recorded stack is the bare
 * `Error` line nobody reads. With it set, nothing is changed, so a leak can still be traced to its source.
 * The SDK is CommonJS and its modules call `debuggable_1.debuggablePromise(...)` through the module's
 * exports object, so replacing the export there reaches every caller.
 */
import { createRequire } from "node:module";

type DebuggablePromise = (promise: Promise<unknown>, context: unknown) => Promise<unknown>;

let installed = false;

/**
 * Installs it for this process (once; later calls do nothing). Answers whether it did: false when
 * `PULUMI_DEBUG_PROMISE_LEAKS` asks for the SDK's stacks.
 */
export function withoutPromiseStacks(): boolean {
  if (process.env.PULUMI_DEBUG_PROMISE_LEAKS) return false;
  if (installed) return true;
  const debuggable = createRequire(import.meta.url)("@pulumi/pulumi/runtime/debuggable.js") as {
    debuggablePromise: DebuggablePromise;
  };
  const original = debuggable.debuggablePromise;
  debuggable.debuggablePromise = function (promise, context) {
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    try {
      return original(promise, context);
    } finally {
      Error.stackTraceLimit = limit;
    }
  };
  installed = true;
  return true;
}
