import { z } from "zod";
import { LABELS, MANAGED_BY } from "../../lib/constants.js";
import { dockerClient, unlessNotFound } from "../../lib/docker-client.js";
import { changedKeys, declaredLabels, type ResourceHandler } from "../handler.js";
import { cidrContains, parseCidr, parseIPv4 } from "../../lib/ipv4.js";

const BRIDGE_NAME_OPTION = "com.docker.network.bridge.name";

/** A user-defined bridge network with a fixed subnet and a named bridge interface; IPv6 always off. */
export const DockerNetworkInputs = z
  .object({
    name: z.string().regex(/^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$/, {
      message: "must be 1-63 letters, digits, '_', '.' or '-', starting with a letter or digit",
    }),
    subnet: z
      .string()
      .refine((s) => parseCidr(s) !== undefined, { message: "must be an IPv4 CIDR like 10.0.0.0/24" }),
    gateway: z.string().refine((s) => parseIPv4(s) !== undefined, { message: "must be an IPv4 address" }),
    bridgeName: z.string().regex(/^[a-zA-Z0-9_.-]{1,15}$/, {
      message: "must be at most 15 characters (Linux interface name limit) of letters, digits, '_', '.', '-'",
    }),
    internal: z.boolean().default(false),
    labels: z.record(z.string(), z.string()).default({}),
  })
  .refine(
    (n) => {
      const subnet = parseCidr(n.subnet);
      const gateway = parseIPv4(n.gateway);
      // Malformed values are reported by their own field checks above.
      return subnet === undefined || gateway === undefined || cidrContains(subnet, gateway);
    },
    {
      message: "gateway must lie inside subnet",
      path: ["gateway"],
    },
  );
export type DockerNetworkInputs = z.infer<typeof DockerNetworkInputs>;
export type DockerNetworkOutputs = DockerNetworkInputs & { networkId: string };

const COMPARED = ["name", "subnet", "gateway", "bridgeName", "internal", "labels"] as const;

export const dockerNetworkHandler: ResourceHandler<DockerNetworkInputs, DockerNetworkOutputs> = {
  inputs: DockerNetworkInputs,

  // The engine cannot change a network in place: every difference is a replacement, and the old one
  // goes first because the name and bridge interface must stay unique.
  async diff(_id, olds, news) {
    const changed = changedKeys(olds, news, COMPARED);
    return { changes: changed.length > 0, replaces: changed, deleteBeforeReplace: true };
  },

  async create(inputs) {
    const docker = dockerClient();
    const existing = await unlessNotFound(docker.getNetwork(inputs.name).inspect());
    if (existing) {
      // Adopt only our own network with this exact shape (a create retried after a crash).
      const ipam = existing.IPAM?.Config?.[0] ?? {};
      const same =
        existing.Labels?.[LABELS.managedBy] === MANAGED_BY &&
        ipam.Subnet === inputs.subnet &&
        existing.Options?.[BRIDGE_NAME_OPTION] === inputs.bridgeName &&
        changedKeys(
          { labels: declaredLabels(existing.Labels ?? {}, inputs.labels) },
          { labels: inputs.labels },
          ["labels"],
        ).length === 0;
      if (!same) throw new Error(`a network named ${inputs.name} already exists and is not this resource's`);
      return { id: existing.Id, outs: { ...inputs, networkId: existing.Id } };
    }
    const network = await docker.createNetwork({
      Name: inputs.name,
      Driver: "bridge",
      CheckDuplicate: true,
      EnableIPv6: false,
      Internal: inputs.internal,
      IPAM: { Driver: "default", Config: [{ Subnet: inputs.subnet, Gateway: inputs.gateway }] },
      Options: { [BRIDGE_NAME_OPTION]: inputs.bridgeName },
      Labels: { ...inputs.labels, [LABELS.managedBy]: MANAGED_BY },
    });
    return { id: network.id, outs: { ...inputs, networkId: network.id } };
  },

  async read(id, olds) {
    const info = await unlessNotFound(dockerClient().getNetwork(id).inspect());
    if (!info) return undefined;
    const ipam = info.IPAM?.Config?.[0] ?? {};
    return {
      name: info.Name,
      subnet: ipam.Subnet ?? "",
      gateway: ipam.Gateway ?? "",
      bridgeName: info.Options?.[BRIDGE_NAME_OPTION] ?? "",
      internal: Boolean(info.Internal),
      labels: declaredLabels(info.Labels ?? {}, olds.labels),
      networkId: info.Id,
    };
  },

  async update() {
    throw new Error("docker networks cannot be updated in place; diff always asks for a replacement");
  },

  async delete(id) {
    await unlessNotFound(dockerClient().getNetwork(id).remove());
  },
};
