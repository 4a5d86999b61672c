import { promises as fs } from "node:fs";
import * as path from "node:path";
import type Docker from "dockerode";
import { z } from "zod";
import { LABELS, MANAGED_BY } from "../../lib/constants.js";
import { dockerClient, dockerSocketPath, isNotFound, unlessNotFound } from "../../lib/docker-client.js";
import { changedKeys, type ResourceHandler } from "../handler.js";
import { parseIPv4 } from "../../lib/ipv4.js";

const CAPABILITY = /^[A-Z_]+$/;

const Mount = z.object({
  type: z.enum(["volume", "bind", "tmpfs"]),
  source: z.string().default(""),
  target: z.string().startsWith("/", { message: "must be an absolute path" }),
  readOnly: z.boolean().default(false),
  /**
   * tmpfs only: its size, past which writes fail with ENOSPC (its pages count against the memory limit
   * too), and the mode of its root directory (0o1777 for /tmp).
   */
  tmpfs: z
    .object({
      sizeBytes: z
        .number()
        .int()
        .min(1024 * 1024, { message: "must be at least 1 MiB" }),
      mode: z.number().int().min(0).max(0o7777),
    })
    .optional(),
});

const PortBinding = z.object({
  containerPort: z.number().int().min(1).max(65535),
  hostPort: z.number().int().min(1).max(65535),
  hostIp: z
    .string()
    .refine((ip) => parseIPv4(ip) !== undefined, { message: "must be an IPv4 address" })
    .default("0.0.0.0"),
});

/**
 * A sandbox container. Hardening is not optional: every capability is dropped except `capAdd`,
 * no-new-privileges is set, it is never privileged, and the engine's socket can never be mounted into it.
 */
export const DockerContainerInputs = z
  .object({
    name: z
      .string()
      .regex(/^[a-zA-Z0-9][a-zA-Z0-9_.-]{1,127}$/, { message: "must be a valid container name" }),
    image: z.string().min(1),
    env: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/), z.string()).default({}),
    labels: z.record(z.string(), z.string()).default({}),
    memoryBytes: z
      .number()
      .int()
      .min(64 * 1024 * 1024, { message: "must be at least 64 MiB" }),
    nanoCpus: z.number().int().min(10_000_000, { message: "must be at least 0.01 CPU" }),
    pidsLimit: z.number().int().min(16),
    capAdd: z
      .array(z.string().regex(CAPABILITY, { message: "must be a capability name such as CHOWN" }))
      .default([]),
    network: z.string().min(1),
    ipv4Address: z
      .string()
      .refine((ip) => parseIPv4(ip) !== undefined, { message: "must be an IPv4 address" }),
    dns: z.array(z.string()).default(["127.0.0.1"]),
    mounts: z.array(Mount).default([]),
    ports: z.array(PortBinding).default([]),
    running: z.boolean().default(true),
    /** The engine's OCI runtime (`runsc`: gVisor, docs/security.md); the engine's default when absent. */
    runtime: z
      .string()
      .regex(/^[a-z][a-z0-9._-]{0,63}$/, { message: "must be an OCI runtime's name on the engine" })
      .optional(),
  })
  .superRefine((inputs, ctx) => {
    inputs.mounts.forEach((mount, index) => {
      if (mount.type === "bind" && /(^|\/)(docker|containerd|podman)\.sock$/.test(mount.source)) {
        ctx.addIssue({
          code: "custom",
          path: ["mounts", index, "source"],
          message: "the container engine's socket is never mounted into a sandbox",
        });
      }
      if (mount.type !== "tmpfs" && mount.tmpfs) {
        ctx.addIssue({
          code: "custom",
          path: ["mounts", index, "tmpfs"],
          message: `only a tmpfs mount has a size and mode, not a ${mount.type} mount`,
        });
      }
      if (mount.type !== "tmpfs" && !mount.source) {
        ctx.addIssue({
          code: "custom",
          path: ["mounts", index, "source"],
          message: `a ${mount.type} mount needs a source`,
        });
      }
    });
    if (inputs.capAdd.includes("SYS_ADMIN") || inputs.capAdd.includes("ALL")) {
      ctx.addIssue({
        code: "custom",
        path: ["capAdd"],
        message: "SYS_ADMIN and ALL are never granted to a sandbox",
      });
    }
  });
export type DockerContainerInputs = z.infer<typeof DockerContainerInputs>;
export type DockerContainerOutputs = DockerContainerInputs & { containerId: string; imageId: string };

/**
 * What replaces the container (compute is throwaway). `running` and the limits (`memoryBytes`,
 * `nanoCpus`, `pidsLimit`) change in place: the engine updates a running container's cgroup, so the
 * agent's processes keep running.
 */
const REPLACED_ON_CHANGE = [
  "name",
  "image",
  "env",
  "labels",
  "capAdd",
  "network",
  "ipv4Address",
  "dns",
  "mounts",
  "ports",
  "runtime",
] as const;

const IN_PLACE = ["running", "memoryBytes", "nanoCpus", "pidsLimit"] as const;

/** The engine's option string of a sized tmpfs (bytes and an octal mode, as the kernel takes them). */
function tmpfsOptions(readOnly: boolean, tmpfs: { sizeBytes: number; mode: number }): string {
  return `${readOnly ? "ro" : "rw"},exec,nosuid,nodev,size=${tmpfs.sizeBytes},mode=${tmpfs.mode.toString(8)}`;
}

/** A sized tmpfs as the engine reports it in `HostConfig.Tmpfs`, in the inputs' shape. */
function tmpfsMount(target: string, options: string): z.infer<typeof Mount> {
  const option = (name: string) =>
    options
      .split(",")
      .find((o) => o.startsWith(`${name}=`))
      ?.slice(name.length + 1);
  return {
    type: "tmpfs",
    source: "",
    target,
    readOnly: options.split(",").includes("ro"),
    tmpfs: { sizeBytes: Number(option("size") ?? 0), mode: Number.parseInt(option("mode") ?? "0", 8) },
  };
}

function createOptions(inputs: DockerContainerInputs): Docker.ContainerCreateOptions {
  const socket = dockerSocketPath();
  for (const mount of inputs.mounts) {
    if (mount.type === "bind" && mount.source === socket)
      throw new Error("the engine socket is never mounted into a sandbox");
  }
  return {
    name: inputs.name,
    Image: inputs.image,
    Env: Object.entries(inputs.env).map(([key, value]) => `${key}=${value}`),
    Labels: { ...inputs.labels, [LABELS.managedBy]: MANAGED_BY },
    ExposedPorts: Object.fromEntries(inputs.ports.map((p) => [`${p.containerPort}/tcp`, {}])),
    HostConfig: {
      Memory: inputs.memoryBytes,
      MemorySwap: inputs.memoryBytes, // no swap beyond the memory limit
      NanoCpus: inputs.nanoCpus,
      PidsLimit: inputs.pidsLimit,
      CapDrop: ["ALL"],
      CapAdd: inputs.capAdd,
      SecurityOpt: ["no-new-privileges"],
      Privileged: false,
      NetworkMode: inputs.network,
      Dns: inputs.dns,
      Mounts: inputs.mounts
        .filter((m) => !m.tmpfs)
        .map((m) => ({
          Type: m.type,
          Source: m.type === "tmpfs" ? "" : m.source,
          Target: m.target,
          ReadOnly: m.readOnly,
        })),
      // A sized tmpfs goes through the engine's older `Tmpfs` map: `Mounts` on this engine (API 1.41) can
      // only make it noexec, and /tmp must run what a build or `go run` puts there.
      Tmpfs: Object.fromEntries(
        inputs.mounts.flatMap((m) => (m.tmpfs ? [[m.target, tmpfsOptions(m.readOnly, m.tmpfs)]] : [])),
      ),
      PortBindings: Object.fromEntries(
        inputs.ports.map((p) => [
          `${p.containerPort}/tcp`,
          [{ HostIp: p.hostIp, HostPort: String(p.hostPort) }],
        ]),
      ),
      RestartPolicy: { Name: "no" },
      ...(inputs.runtime === undefined ? {} : { Runtime: inputs.runtime }),
    },
    NetworkingConfig: {
      EndpointsConfig: { [inputs.network]: { IPAMConfig: { IPv4Address: inputs.ipv4Address } } },
    },
  };
}

/**
 * Refuses a bind mount whose source passes through a symbolic link. The engine mounts where the links point,
 * resolved on the host as root, at every start; a protected path's source lies in the tenant's home, where
 * the agent can put a link (`repo/.git/hooks -> /`) and so be given any host directory at its next start.
 * Checked while the container is not running: nothing of the agent's runs then to swap a name afterwards.
 */
export async function assertBindSourcesHaveNoLinks(
  mounts: readonly { type: string; source: string; target: string }[],
) {
  for (const mount of mounts) {
    if (mount.type !== "bind") continue;
    if (!path.isAbsolute(mount.source) || path.normalize(mount.source) !== mount.source.replace(/\/+$/, ""))
      throw new Error(
        `bind mount ${mount.target}: its source ${mount.source} is not an absolute, normalized path`,
      );
    let at = "/";
    for (const name of mount.source.split("/").filter(Boolean)) {
      at = path.join(at, name);
      const link = await fs.readlink(at).catch(() => undefined);
      if (link !== undefined)
        throw new Error(
          `bind mount ${mount.target}: ${at} is a symbolic link (to ${link}); the engine would mount where it points, so the container is not started with it (remove the link, or the mount)`,
        );
    }
  }
}

function inspectOrUndefined(docker: Docker, id: string): Promise<Docker.ContainerInspectInfo | undefined> {
  return unlessNotFound(docker.getContainer(id).inspect());
}

/** The container as the engine has it, in the inputs' shape (only keys the resource set are compared). */
function observed(info: Docker.ContainerInspectInfo, olds: DockerContainerOutputs): DockerContainerOutputs {
  const env = Object.fromEntries(
    (info.Config.Env ?? []).map((entry) => [
      entry.slice(0, entry.indexOf("=")),
      entry.slice(entry.indexOf("=") + 1),
    ]),
  );
  const pick = (source: Record<string, string>, keys: string[]) =>
    Object.fromEntries(keys.filter((key) => key in source).map((key) => [key, source[key]!]));
  const host = info.HostConfig;
  // The engine keeps mounts and sized tmpfs apart: they are compared in the order the inputs gave them.
  const targets = olds.mounts.map((m) => m.target);
  const order = (target: string) => (targets.includes(target) ? targets.indexOf(target) : targets.length);
  const endpoint = info.NetworkSettings.Networks?.[olds.network];
  return {
    name: info.Name.replace(/^\//, ""),
    image: info.Config.Image,
    env: pick(env, Object.keys(olds.env)),
    labels: pick(info.Config.Labels ?? {}, Object.keys(olds.labels)),
    memoryBytes: host.Memory ?? 0,
    nanoCpus: host.NanoCpus ?? 0,
    pidsLimit: host.PidsLimit ?? 0,
    capAdd: host.CapAdd ?? [],
    network: endpoint ? olds.network : (Object.keys(info.NetworkSettings.Networks ?? {})[0] ?? ""),
    ipv4Address: endpoint?.IPAMConfig?.IPv4Address ?? endpoint?.IPAddress ?? "",
    dns: host.Dns ?? [],
    mounts: [
      ...(host.Mounts ?? []).map((m) => ({
        type: m.Type as "volume" | "bind" | "tmpfs",
        source: m.Source ?? "",
        target: m.Target,
        readOnly: Boolean(m.ReadOnly),
      })),
      ...Object.entries((host as { Tmpfs?: Record<string, string> }).Tmpfs ?? {}).map(([target, options]) =>
        tmpfsMount(target, options),
      ),
    ].sort((a, b) => order(a.target) - order(b.target)),
    ports: Object.entries(host.PortBindings ?? {}).flatMap(([port, bindings]) =>
      ((bindings as { HostIp: string; HostPort: string }[] | null) ?? []).map((b) => ({
        containerPort: Number.parseInt(port, 10),
        hostPort: Number(b.HostPort),
        hostIp: b.HostIp || "0.0.0.0",
      })),
    ),
    running: Boolean(info.State.Running),
    // Compared where the resource set one: a container made before there was a choice runs the default.
    ...(olds.runtime === undefined ? {} : { runtime: host.Runtime ?? "" }),
    containerId: info.Id,
    imageId: info.Image,
  };
}

export const dockerContainerHandler: ResourceHandler<DockerContainerInputs, DockerContainerOutputs> = {
  inputs: DockerContainerInputs,

  async diff(_id, olds, news) {
    const replaces = changedKeys(olds, news, REPLACED_ON_CHANGE);
    const changed = changedKeys(olds, news, [...REPLACED_ON_CHANGE, ...IN_PLACE]);
    return { changes: changed.length > 0, replaces, deleteBeforeReplace: true };
  },

  async create(inputs) {
    const docker = dockerClient();
    const image = await docker
      .getImage(inputs.image)
      .inspect()
      .catch((error: unknown) => {
        if (isNotFound(error))
          throw new Error(`image ${inputs.image} is not on the engine; build or pull it first`);
        throw error;
      });
    const stale = await inspectOrUndefined(docker, inputs.name);
    if (stale) {
      // Our own leftover from an interrupted create is throwaway compute; anything else is not ours.
      if (stale.Config.Labels?.[LABELS.managedBy] !== MANAGED_BY) {
        throw new Error(`a container named ${inputs.name} exists and is not managed by agent-sandbox`);
      }
      await docker.getContainer(stale.Id).remove({ force: true });
    }
    await assertBindSourcesHaveNoLinks(inputs.mounts);
    const container = await docker.createContainer(createOptions(inputs));
    try {
      if (inputs.running) await container.start();
    } catch (error) {
      await container.remove({ force: true }).catch(() => undefined); // nothing half-made
      throw error;
    }
    return { id: container.id, outs: { ...inputs, containerId: container.id, imageId: image.Id } };
  },

  async read(id, olds) {
    const info = await inspectOrUndefined(dockerClient(), id);
    return info && observed(info, olds);
  },

  async update(id, _olds, news) {
    const container = dockerClient().getContainer(id);
    const info = await container.inspect();
    const host = info.HostConfig;
    if (
      host.Memory !== news.memoryBytes ||
      host.MemorySwap !== news.memoryBytes ||
      host.NanoCpus !== news.nanoCpus ||
      host.PidsLimit !== news.pidsLimit
    ) {
      // A memory limit below what the processes use now is refused by the engine, and nothing changes.
      await container.update({
        Memory: news.memoryBytes,
        MemorySwap: news.memoryBytes,
        NanoCpus: news.nanoCpus,
        PidsLimit: news.pidsLimit,
      });
    }
    if (news.running && !info.State.Running) {
      await assertBindSourcesHaveNoLinks(news.mounts);
      await container.start();
    }
    if (!news.running && info.State.Running) await container.stop({ t: 10 });
    return observed(await container.inspect(), { ...news, containerId: id, imageId: info.Image });
  },

  async delete(id) {
    await unlessNotFound(dockerClient().getContainer(id).remove({ force: true }));
  },
};
