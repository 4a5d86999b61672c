// What `sbx start` does with a repository's devcontainer.json: its image (named, or built FROM the sandbox
// image, with its local features installed), then its containerEnv and remoteEnv, forwardPorts (front-door
// routes), postCreateCommand and postStartCommand.
import { createHash } from "node:crypto";
import * as fs from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";
import type { CliClient } from "../client.js";
import type { ConfigStore } from "../config.js";
import { follow, running, settled, sshTarget } from "../context.js";
import {
  featureContextDir,
  renderEnvFile,
  renderFeatureEnvFile,
  renderFeaturesDockerfile,
  renderRemoteEnvFile,
  type DevContainer,
} from "../devcontainer.js";
import { CliError, EXIT } from "../errors.js";
import { note } from "../output.js";
import { CONTAINER_ENV, POST_CREATE, POST_START, runScript } from "../sandbox-scripts.js";
import { capture, waitForSsh, type SshTarget } from "../ssh.js";

const SANDBOX_IMAGE = "agent-sandbox/sandbox:latest";

const imageName = (repoName: string, digest: string) =>
  `agent-sandbox/repo-${repoName.toLowerCase().replace(/[^a-z0-9-]/g, "-")}:${digest.slice(0, 12)}`;

/** `docker build` with the classic builder; a failed step's container goes too (nothing half-made). */
const dockerBuild = (args: readonly string[]) =>
  capture("docker", ["build", "--force-rm", ...args], {
    env: { ...process.env, DOCKER_BUILDKIT: "0" },
  }).catch((error: Error) => ({ code: 1, stdout: "", stderr: error.message }));

const lastLines = (text: string) => text.trim().split("\n").slice(-3).join(" ");

/**
 * A devcontainer's image: `image` as named (it must be on the engine), or `build.dockerfile` built FROM the
 * sandbox image; then its local features installed on top. Built before anything is made or changed.
 */
export async function devcontainerImage(
  dc: DevContainer,
  root: string,
  repoName: string,
): Promise<string | undefined> {
  let image = dc.image;
  if (dc.build) {
    const digest = createHash("sha256")
      .update(await fs.readFile(dc.build.dockerfile))
      .digest("hex");
    image = imageName(repoName, digest);
    note(`building ${path.relative(root, dc.build.dockerfile)} FROM the sandbox image as ${image}`);
    // As `npm run image:repo` does: the Dockerfile's BASE_IMAGE argument is the sandbox image.
    const built = await dockerBuild([
      "-q",
      "--build-arg",
      `BASE_IMAGE=${SANDBOX_IMAGE}`,
      "-f",
      dc.build.dockerfile,
      "-t",
      image,
      dc.build.context,
    ]);
    if (built.code !== 0)
      throw new CliError(
        EXIT.badInput,
        `${dc.file}: build.dockerfile failed: ${lastLines(built.stderr)}; nothing was created or changed`,
      );
  }
  return dc.features.length > 0 ? featuresImage(dc, image ?? SANDBOX_IMAGE, repoName) : image;
}

/** Every file under `dir`, relative, sorted (what a feature's folder brings into the image). */
async function filesUnder(dir: string): Promise<string[]> {
  const entries = await fs.readdir(dir, { recursive: true, withFileTypes: true });
  return entries
    .filter((e) => e.isFile())
    .map((e) => path.relative(dir, path.join(e.parentPath, e.name)))
    .sort();
}

/** `base` with the devcontainer's local features installed, tagged by what went in. */
async function featuresImage(dc: DevContainer, base: string, repoName: string): Promise<string> {
  const inspected = await capture("docker", ["image", "inspect", "-f", "{{.Config.User}}", base]);
  if (inspected.code !== 0)
    throw new CliError(
      EXIT.badInput,
      `${dc.file}: features: the image ${base} is not on this machine's engine; nothing was created or changed`,
    );
  const context = await fs.mkdtemp(path.join(os.tmpdir(), "sbx-features-"));
  try {
    const dockerfile = renderFeaturesDockerfile(base, inspected.stdout.trim(), dc.features);
    const digest = createHash("sha256").update(dockerfile);
    for (const [i, feature] of dc.features.entries()) {
      const into = path.join(context, featureContextDir(feature, i));
      await fs.cp(feature.dir, into, { recursive: true });
      await fs.writeFile(path.join(into, "devcontainer-features.env"), renderFeatureEnvFile(feature));
      for (const file of await filesUnder(into))
        digest.update(`\0${i}/${file}\0`).update(await fs.readFile(path.join(into, file)));
    }
    await fs.writeFile(path.join(context, "Dockerfile"), dockerfile);
    // The base's own id too: a rebuilt sandbox image makes a new tag.
    digest.update((await capture("docker", ["image", "inspect", "-f", "{{.Id}}", base])).stdout);
    const tag = imageName(repoName, digest.digest("hex"));
    note(`installing feature(s) ${dc.features.map((f) => f.ref).join(", ")} FROM ${base} as ${tag}`);
    const built = await dockerBuild(["-t", tag, context]);
    if (built.code !== 0) {
      // The failing install.sh's own last lines, then the line its RUN prints (not -q: the step's output is wanted).
      // The classic builder colours a step's standard error.
      const output = `${built.stdout}\n${built.stderr}`.replace(/\u001b\[[0-9;]*m/g, "");
      const failed = /^sbx-feature-failed (\d+): (install\.sh exited \d+)$/m.exec(output);
      const feature = failed ? dc.features[Number(failed[1])] : undefined;
      const said = failed
        ? output
            .slice(0, failed.index)
            .split(/^ ---> Running in \w+$/m)
            .at(-1)!
            .trim()
            .split("\n")
            .slice(-3)
            .join(" ")
        : "";
      throw new CliError(
        EXIT.badInput,
        feature
          ? `${dc.file}: feature ${feature.ref} (${feature.id}) failed to install: ${failed![2]}${said ? ` (${said})` : ""}; nothing was created or changed`
          : `${dc.file}: features failed to build: ${lastLines(built.stderr)}; nothing was created or changed`,
      );
    }
    return tag;
  } finally {
    await fs.rm(context, { recursive: true, force: true });
  }
}

/** Applies a devcontainer's containerEnv, forwardPorts and postCreateCommand; the target may be new. */
export async function applyDevcontainer(
  api: CliClient,
  store: ConfigStore,
  target: SshTarget,
  id: string,
  repoName: string,
  dc: DevContainer,
): Promise<{ notes: string[]; target: SshTarget }> {
  const notes: string[] = [];
  // containerEnv, then remoteEnv (which may refer to it), in the one file the agent's login shells load.
  const containerKeys = Object.keys(dc.containerEnv);
  const remoteKeys = Object.keys(dc.remoteEnv);
  if (containerKeys.length + remoteKeys.length > 0) {
    await runScript(target, "containerEnv", CONTAINER_ENV, [
      renderEnvFile(dc.containerEnv) + renderRemoteEnvFile(dc.remoteEnv),
    ]);
    if (containerKeys.length > 0)
      notes.push(`containerEnv ${containerKeys.join(", ")} in the agent's login shells`);
    if (remoteKeys.length > 0) notes.push(`remoteEnv ${remoteKeys.join(", ")} in the agent's login shells`);
  }
  if (dc.forwardPorts.length > 0) {
    // The front door's routes come from the project's declared ports (devcontainer forwardPorts).
    const ports = dc.forwardPorts.map((port) => ({ port }));
    const applied = await api.call("PATCH", "/projects/{id}", { params: { id }, body: { ports } }).then(
      ({ data }) => data,
      (error: unknown) => {
        if (error instanceof CliError && error.code === EXIT.badInput) return error.message;
        throw error;
      },
    );
    // The routes are the stack's: wait for the operation, and read the host key again in case the
    // container was replaced.
    if (typeof applied !== "string" && !settled(applied)) {
      const project = (await follow(api, id, (p) => running(p) && settled(p)))!;
      target = await sshTarget(api, store, project);
      await waitForSsh(target);
    }
    notes.push(
      typeof applied !== "string"
        ? `forwardPorts ${dc.forwardPorts.join(", ")} declared (front-door routes)`
        : `forwardPorts NOT applied: ${applied}`,
    );
  }
  if (dc.postCreateCommand) {
    note(`running postCreateCommand in /workspace/${repoName}`);
    const out = await runScript(target, "postCreateCommand", POST_CREATE, [repoName, dc.postCreateCommand]);
    notes.push(
      out.trim() === "already run"
        ? "postCreateCommand already run for this repository"
        : "postCreateCommand ran",
    );
  }
  if (dc.postStartCommand) {
    note(`running postStartCommand in /workspace/${repoName}`);
    await runScript(target, "postStartCommand", POST_START, [repoName, dc.postStartCommand]);
    notes.push("postStartCommand ran");
  }
  return { notes, target };
}
