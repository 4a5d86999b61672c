import * as provider from "@pulumi/pulumi/provider/index.js";
import { createProvider } from "./handler.js";
import { exitWithParent } from "./lifetime.js";
import { SANDBOX_HANDLERS } from "./sandbox-handlers.js";
import { PLUGIN_VERSION } from "./version.js";

exitWithParent();

await provider.main(createProvider(PLUGIN_VERSION, SANDBOX_HANDLERS), process.argv.slice(2));
