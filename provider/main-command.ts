import * as provider from "@pulumi/pulumi/provider/index.js";
import { createProvider } from "./handler.js";
import { localCommandHandler } from "./command/local-command.js";
import { exitWithParent } from "./lifetime.js";
import { PLUGIN_VERSION } from "./version.js";

exitWithParent();

await provider.main(
  createProvider(PLUGIN_VERSION, { "command:local:Command": localCommandHandler }),
  process.argv.slice(2),
);
