// What `sbx start` does with a repository's devcontainer.json: its image (named, or built FROM the sandbox
// image), then its containerEnv, forwardPorts (front-door routes) and postCreateCommand.
import * as fs from "node:fs/promises";
import * as path from "node:path";
import type { CliClient } from "../client.js";
import type { ConfigStore } from "../config.js";
import { follow, running, settled, sshTarget } from "../context.js";
import { renderEnvFile, type DevContainer } from "../devcontainer.js";
import { CliError, EXIT } from "../errors.js";
import { note } from "../output.js";
import { CONTAINER_ENV, POST_CREATE, runScript } from "../sandbox-scripts.js";
import { capture, waitForSsh, type SshTarget } from "../ssh.js";

/** A devcontainer's image: `image` as named (it must be on the engine), or `build.dockerfile` built FROM the sandbox image. */
export async function devcontainerImage(
  dc: DevContainer,
  root: string,
  repoName: string,
): Promise<string | undefined> {
  if (dc.image) return dc.image;
  if (!dc.build) return undefined;
  const { createHash } = await import("node:crypto");
  const digest = createHash("sha256")
    .update(await fs.readFile(dc.build.dockerfile))
    .digest("hex")
    .slice(0, 12);
  const tag = `agent-sandbox/repo-${repoName.toLowerCase().replace(/[^a-z0-9-]/g, "-")}:${digest}`;
  note(`building ${path.relative(root, dc.build.dockerfile)} FROM the sandbox image as ${tag}`);
  // As `npm run image:repo` does: the Dockerfile's BASE_IMAGE argument is the sandbox image.
  const built = await capture(
    "docker",
    [
      "build",
      "-q",
      // A failed step's container goes too (the classic builder keeps it otherwise): nothing half-made.
      "--force-rm",
      "--build-arg",
      "BASE_IMAGE=agent-sandbox/sandbox:latest",
      "-f",
      dc.build.dockerfile,
      "-t",
      tag,
      dc.build.context,
    ],
    {
      env: { ...process.env, DOCKER_BUILDKIT: "0" },
    },
  ).catch((error: Error) => ({ code: 1, stdout: "", stderr: error.message }));
  if (built.code !== 0)
    throw new CliError(
      EXIT.badInput,
      `${dc.file}: build.dockerfile failed: ${built.stderr.trim().split("\n").slice(-3).join(" ")}; nothing was created`,
    );
  return tag;
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
  if (Object.keys(dc.containerEnv).length > 0) {
    await runScript(target, "containerEnv", CONTAINER_ENV, [renderEnvFile(dc.containerEnv)]);
    notes.push(`containerEnv ${Object.keys(dc.containerEnv).join(", ")} in the agent's login shells`);
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
  return { notes, target };
}
