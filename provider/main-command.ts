import * as provider from "@pulumi/pulumi/provider/index.js";
import { createProvider } from "./handler.js";
import { localCommandHandler } from "./command/local-command.js";
import { PLUGIN_VERSION } from "./version.js";

await provider.main(
  createProvider(PLUGIN_VERSION, { "command:local:Command": localCommandHandler }),
  process.argv.slice(2),
);
