import { execFileSync } from "node:child_process";
import { promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { imageRegistry, registryInstance, stopRegistry } from "../../lib/host/registry.js";
import { hostLock } from "./host-lock.js";

/**
 * The suite's one image registry, which the side-by-side files' platforms push their snapshots to (each
 * into `sandboxes/<project>`, its images labelled with its own instance, as platforms sharing a registry
 * do: the orphan sweep judges the label). A snapshot is the sandbox image and a layer, and the first push
 * of those ~1.4 GB into a registry makes the engine compress every layer: 70-100 s of dockerd's CPU here,
 * paid again by every file when each had a registry of its own (issue 39: about ten a run); into this one the
 * engine mounts the layers it has pushed before. Started by the first file that asks, under a host lock,
 * and left running for the next run; its storage goes at a run's start once it has grown past
 * `LIMIT_BYTES`. The files that kill or restart a registry (tests/chaos) keep their own.
 */
export const SHARED_REGISTRY_PORT = 26_990;
const ROOT = path.join(os.tmpdir(), "agent-sandbox-test-registry");
const LIMIT_BYTES = 8 * 1024 ** 3;
const dirs = {
  configDir: path.join(ROOT, "etc"),
  dataDir: path.join(ROOT, "lib"),
  logDir: path.join(ROOT, "log"),
  runDir: path.join(ROOT, "run"),
};

/** The shared registry's port, once it answers (started now if it does not run). */
export async function sharedRegistryPort(): Promise<number> {
  const lock = await hostLock("test-registry");
  try {
    const check = await imageRegistry({ port: SHARED_REGISTRY_PORT, ...dirs }).ensure(() => undefined);
    if (!check.ready) throw new Error(`the suite's registry is not ready: ${check.detail}`);
    return SHARED_REGISTRY_PORT;
  } finally {
    await lock.release();
  }
}

/** At a run's start (tests/global-setup.ts): a registry whose storage outgrew its bound is stopped and emptied. */
export async function boundSharedRegistry(): Promise<void> {
  const instance = registryInstance({ port: SHARED_REGISTRY_PORT, ...dirs });
  let bytes = 0;
  try {
    bytes = Number(
      execFileSync("du", ["-sb", instance.storageDir], {
        encoding: "utf8",
        stdio: ["ignore", "pipe", "ignore"],
      }).split("\t")[0],
    );
  } catch {
    return; // none yet
  }
  if (!(bytes > LIMIT_BYTES)) return;
  const lock = await hostLock("test-registry");
  try {
    await stopRegistry(instance);
    await fs.rm(instance.storageDir, { recursive: true, force: true });
  } finally {
    await lock.release();
  }
}
