// The runtime bundle's entry (dist/runtime/main.mjs, scripts/bundles.ts): the Pulumi SDK's closure serializer
// deferred (lib/deferred-requires.ts), then the service itself (runtime/main.ts, bundled as app.mjs beside
// this one). Two files because a bundle's package imports all run before any of its own code: the deferral
// must be in place before the service's first import of the SDK.
import { deferPulumiClosureDependencies } from "../lib/deferred-requires.js";

deferPulumiClosureDependencies();
await import(new URL("./app.mjs", import.meta.url).href);
