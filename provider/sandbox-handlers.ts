import { RESOURCE_TYPES } from "../lib/constants.js";
import type { AnyHandler } from "./handler.js";
import { caddyServiceHandler } from "./resources/caddy-service.js";
import { containerEngineHandler } from "./resources/container-engine.js";
import { dockerContainerHandler } from "./resources/docker-container.js";
import { dockerNetworkHandler } from "./resources/docker-network.js";
import { dockerVolumeHandler } from "./resources/docker-volume.js";
import { firewallBaselineHandler } from "./resources/firewall-baseline.js";
import { frontDoorRouteHandler } from "./resources/front-door-route.js";
import { hostDirectoryHandler } from "./resources/host-directory.js";
import { hostFileHandler } from "./resources/host-file.js";
import { hostFilesystemHandler } from "./resources/host-filesystem.js";
import { microVmHandler } from "./resources/microvm.js";
import { registryServiceHandler } from "./resources/registry-service.js";
import { squidServiceHandler } from "./resources/squid-service.js";
import { squidTenantHandler } from "./resources/squid-tenant.js";
import { sshKeyPairHandler } from "./resources/ssh-keypair.js";
import { tenantFirewallHandler } from "./resources/tenant-firewall.js";
import { trafficShaperHandler } from "./resources/traffic-shaper.js";

/**
 * Every resource type the `sandbox` plugin serves, with its handler: what the plugin's main hands the SDK's
 * provider server, and what the runtime's in-process drift pre-check reads with (runtime/tenants/drift-precheck.ts).
 * Apart from the main so that importing it starts no provider.
 */
export const SANDBOX_HANDLERS: Readonly<Record<string, AnyHandler>> = {
  [RESOURCE_TYPES.hostFile]: hostFileHandler,
  [RESOURCE_TYPES.dockerNetwork]: dockerNetworkHandler,
  [RESOURCE_TYPES.dockerVolume]: dockerVolumeHandler,
  [RESOURCE_TYPES.dockerContainer]: dockerContainerHandler,
  [RESOURCE_TYPES.tenantFirewall]: tenantFirewallHandler,
  [RESOURCE_TYPES.trafficShaper]: trafficShaperHandler,
  [RESOURCE_TYPES.squidTenant]: squidTenantHandler,
  [RESOURCE_TYPES.hostDirectory]: hostDirectoryHandler,
  [RESOURCE_TYPES.sshKeyPair]: sshKeyPairHandler,
  [RESOURCE_TYPES.firewallBaseline]: firewallBaselineHandler,
  [RESOURCE_TYPES.containerEngine]: containerEngineHandler,
  [RESOURCE_TYPES.squidService]: squidServiceHandler,
  [RESOURCE_TYPES.registryService]: registryServiceHandler,
  [RESOURCE_TYPES.frontDoorRoute]: frontDoorRouteHandler,
  [RESOURCE_TYPES.caddyService]: caddyServiceHandler,
  [RESOURCE_TYPES.hostFilesystem]: hostFilesystemHandler,
  [RESOURCE_TYPES.microVm]: microVmHandler,
};
