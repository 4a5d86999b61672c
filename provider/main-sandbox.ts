import * as provider from "@pulumi/pulumi/provider/index.js";
import { RESOURCE_TYPES } from "../components/constants.js";
import { createProvider } from "./handler.js";
import { dockerNetworkHandler } from "./resources/docker-network.js";
import { hostFileHandler } from "./resources/host-file.js";
import { PLUGIN_VERSION } from "./version.js";

await provider.main(
  createProvider(PLUGIN_VERSION, {
    [RESOURCE_TYPES.hostFile]: hostFileHandler,
    [RESOURCE_TYPES.dockerNetwork]: dockerNetworkHandler,
  }),
  process.argv.slice(2),
);
