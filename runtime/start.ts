// The runtime bundle's entry (dist/runtime/main.mjs, scripts/bundles.ts): the Pulumi SDK's closure serializer
// deferred (lib/deferred-requires.ts), then the service itself (runtime/main.ts, bundled as app.mjs beside
// this one). Two files because a bundle's package imports all run before any of its own code: the deferral
// must be in place before the service's first import of the SDK. The SDK's promises are made without a stack
// trace each (lib/promise-stacks.ts): the tenant programs run in this process.
import { deferPulumiClosureDependencies } from "../lib/deferred-requires.js";
import { withoutPromiseStacks } from "../lib/promise-stacks.js";

deferPulumiClosureDependencies();
withoutPromiseStacks();
await import(new URL("./app.mjs", import.meta.url).href);
