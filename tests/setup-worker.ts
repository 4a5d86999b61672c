// Each test file's process, before the file's own imports: the Pulumi SDK's closure serializer deferred, as the
// runtime's bundle defers it (lib/deferred-requires.ts, runtime/start.ts). The in-process runtimes of the tests
// (tests/helpers/api.ts) then load the SDK as the runtime does, and no file pays for a compiler it never uses.
import { deferPulumiClosureDependencies } from "../lib/deferred-requires.js";

deferPulumiClosureDependencies();
