import { z } from "zod";
import { LABELS, MANAGED_BY } from "../../lib/constants.js";
import { dockerClient, unlessNotFound } from "../../lib/docker-client.js";
import { changedKeys, declaredLabels, type ResourceHandler } from "../handler.js";

/** A named local volume: a sandbox's `/home/agent`, kept when the container is replaced. */
export const DockerVolumeInputs = z.object({
  name: z.string().regex(/^[a-zA-Z0-9][a-zA-Z0-9_.-]{1,127}$/, {
    message: "must be 2-128 letters, digits, '_', '.' or '-', starting with a letter or digit",
  }),
  labels: z.record(z.string(), z.string()).default({}),
  /**
   * The `local` driver's options: `{ type: "none", o: "bind", device: <dir> }` makes the volume a directory of
   * the host's (a size-limited filesystem's, sandbox:host:Filesystem). Absent: a plain volume.
   */
  driverOpts: z.record(z.string(), z.string()).optional(),
});
export type DockerVolumeInputs = z.infer<typeof DockerVolumeInputs>;
export type DockerVolumeOutputs = DockerVolumeInputs & { mountpoint: string };

export const dockerVolumeHandler: ResourceHandler<DockerVolumeInputs, DockerVolumeOutputs> = {
  inputs: DockerVolumeInputs,

  async diff(_id, olds, news) {
    const changed = changedKeys(olds, news, ["name", "labels", "driverOpts"]);
    return { changes: changed.length > 0, replaces: changed, deleteBeforeReplace: true };
  },

  async create(inputs) {
    const docker = dockerClient();
    const existing = await unlessNotFound(docker.getVolume(inputs.name).inspect());
    if (existing) {
      // Adopt only our own volume with exactly these labels (a create retried after a crash); any
      // other volume of that name holds someone else's data.
      const actual = existing.Labels ?? {};
      const labels = declaredLabels(actual, inputs.labels);
      const ours = actual[LABELS.managedBy] === MANAGED_BY;
      const options = existing.Options ?? undefined;
      if (
        !ours ||
        changedKeys({ labels }, { labels: inputs.labels }, ["labels"]).length > 0 ||
        changedKeys({ options }, { options: inputs.driverOpts }, ["options"]).length > 0
      ) {
        throw new Error(
          `volume ${inputs.name} already exists and is not this resource's; refusing to take over its data`,
        );
      }
      return { id: inputs.name, outs: { ...inputs, mountpoint: existing.Mountpoint } };
    }
    await docker.createVolume({
      Name: inputs.name,
      Driver: "local",
      Labels: { ...inputs.labels, [LABELS.managedBy]: MANAGED_BY },
      ...(inputs.driverOpts ? { DriverOpts: inputs.driverOpts } : {}),
    });
    const { Mountpoint } = await docker.getVolume(inputs.name).inspect();
    return { id: inputs.name, outs: { ...inputs, mountpoint: Mountpoint } };
  },

  async read(id, olds) {
    const info = await unlessNotFound(dockerClient().getVolume(id).inspect());
    if (!info) return undefined;
    return {
      name: info.Name,
      labels: declaredLabels(info.Labels ?? {}, olds.labels),
      ...(olds.driverOpts === undefined ? {} : { driverOpts: info.Options ?? {} }),
      mountpoint: info.Mountpoint,
    };
  },

  async update() {
    throw new Error("docker volumes cannot be updated in place; diff always asks for a replacement");
  },

  async delete(id) {
    await unlessNotFound(dockerClient().getVolume(id).remove());
  },
};
