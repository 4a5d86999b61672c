import { z } from "zod";
import { PORTS } from "../../lib/constants.js";
import { DEFAULT_FIREWALL_NAMES, validateFirewallNames } from "../../lib/host/render.js";
import { absolutePath, port } from "./shared.js";

/** `agent-sandbox:host`: the sandbox host's baseline (this machine for `local`, the VM for `gcp`). */
export const HostConfig = z
  .object({
    dockerSocket: absolutePath.default("/var/run/docker.sock"),
    squidPort: port.default(PORTS.squid),
    registryPort: port.default(PORTS.registry),
    /** The front door (our Caddy): dev servers at `http://<label>[-<name>].sandbox.localhost:<port>`. */
    frontDoorPort: port.default(PORTS.frontDoor),
    /** Caddy's admin API, on 127.0.0.1 only: tenant stacks register their routes through it. */
    frontDoorAdminPort: port.default(PORTS.frontDoorAdmin),
    configDir: absolutePath.default("/etc/agent-sandbox"),
    dataDir: absolutePath.default("/var/lib/agent-sandbox"),
    logDir: absolutePath.default("/var/log/agent-sandbox"),
    runDir: absolutePath.default("/run/agent-sandbox"),
    /**
     * Names of the firewall baseline. Only an isolated test host changes them: the tenant stacks' rules
     * go into the released chains (CHAINS).
     */
    firewall: z
      .object({
        inputChain: z.string().default(DEFAULT_FIREWALL_NAMES.inputChain),
        forwardChain: z.string().default(DEFAULT_FIREWALL_NAMES.forwardChain),
        bridgeMatch: z.string().default(DEFAULT_FIREWALL_NAMES.bridgeMatch),
      })
      .strict()
      .superRefine((names, context) => {
        for (const problem of validateFirewallNames(names))
          context.addIssue({ code: "custom", message: problem });
      })
      .default(DEFAULT_FIREWALL_NAMES),
  })
  .strict();
export type HostConfig = z.infer<typeof HostConfig>;
