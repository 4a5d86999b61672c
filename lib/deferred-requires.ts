/**
 * The Pulumi SDK's closure serializer, loaded when it is first used instead of with the SDK. `@pulumi/pulumi`
 * requires TypeScript's compiler (runtime/closure/parseFunction) and npm's Arborist (runtime/closure/codePaths)
 * as it loads, for `pulumi.runtime.serializeFunction` (dynamic providers, function callbacks), which nothing of
 * the platform calls. A process that imports the SDK (the runtime: the Automation API and the inline tenant
 * programs) paid for both at every start: 54 MiB of resident memory, and most of the SDK's load time (measured
 * in session 51 with the full import list of the runtime's bundle: 143 against 89 MiB).
 *
 * Each of the two, required from inside the SDK, is answered with an object that loads the real module at its
 * first use and then behaves as it: nothing is missing, a serializer that runs gets the real compiler. Node's
 * CommonJS loader is the hook (`Module._load`, what require-in-the-middle and OpenTelemetry's instrumentation
 * wrap too): the SDK is CommonJS, and Node 20 has no synchronous resolve hook for `require`.
 */
import Module from "node:module";
import * as path from "node:path";

/** What the SDK requires as it loads and uses only to serialize a function. */
const DEFERRED = new Set(["typescript", "@npmcli/arborist"]);
const SDK_DIR = `${path.sep}node_modules${path.sep}@pulumi${path.sep}pulumi${path.sep}`;

type Load = (
  this: unknown,
  request: string,
  parent: { filename?: string } | undefined,
  isMain: boolean,
) => unknown;

let installed = false;

/**
 * Installs the deferral for this process (once; later calls do nothing). Call it before the SDK is first
 * imported: a module already loaded stays loaded.
 */
export function deferPulumiClosureDependencies(): void {
  if (installed) return;
  installed = true;
  const loader = Module as unknown as { _load: Load };
  const load = loader._load;
  loader._load = function (this: unknown, request, parent, isMain) {
    if (!DEFERRED.has(request) || !parent?.filename?.includes(SDK_DIR))
      return load.call(this, request, parent, isMain);
    let real: Record<PropertyKey, unknown> | undefined;
    const module = () => (real ??= load.call(this, request, parent, isMain) as Record<PropertyKey, unknown>);
    return new Proxy(
      {},
      {
        get(_target, key) {
          // TypeScript's `__importStar` asks first: "yes" keeps the module unloaded and hands back this object,
          // whose `default` is then what `__importStar` would have made of the real one.
          if (key === "__esModule") return real === undefined ? true : (real.__esModule ?? true);
          if (key === "default") return module().__esModule ? module().default : module();
          return Reflect.get(module(), key);
        },
        has: (_target, key) => (key === "__esModule" && real === undefined) || Reflect.has(module(), key),
        ownKeys: () => Reflect.ownKeys(module()),
        getOwnPropertyDescriptor(_target, key) {
          // A loader's interop asks this way as it loads the SDK's module (tsx's, in the tests and the dev tools:
          // `__esModule`, and its own `module.exports`, which neither real module has).
          if (real === undefined && key === "__esModule")
            return { value: true, writable: false, enumerable: false, configurable: true };
          if (real === undefined && key === "module.exports") return undefined;
          const descriptor = Reflect.getOwnPropertyDescriptor(module(), key);
          return descriptor && { ...descriptor, configurable: true };
        },
      },
    );
  };
}
