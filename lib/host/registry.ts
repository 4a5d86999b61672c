import { promises as fs } from "node:fs";
import * as path from "node:path";
import { renderRegistryConfig } from "./render.js";
import { writeFileAtomic } from "../files.js";
import type { Check, HostPart } from "./check.js";
import { livePid, startDaemon, waitFor } from "../process.js";

export interface RegistryOptions {
  readonly port: number;
  readonly configDir: string;
  readonly dataDir: string;
  readonly logDir: string;
  readonly runDir: string;
}

/** One docker-registry instance: the files a daemon-level resource needs, whatever wrote its config. */
export interface RegistryInstance {
  readonly port: number;
  readonly config: string;
  readonly storageDir: string;
  readonly pidFile: string;
  readonly logFile: string;
}

export function registryInstance(options: RegistryOptions): RegistryInstance {
  return {
    port: options.port,
    config: path.join(options.configDir, "registry", "config.yml"),
    storageDir: path.join(options.dataDir, "registry"),
    pidFile: path.join(options.runDir, "registry.pid"),
    logFile: path.join(options.logDir, "registry.log"),
  };
}

const registryUrl = (port: number) => `http://127.0.0.1:${port}/v2/`;

async function answers(port: number): Promise<boolean> {
  try {
    return (await fetch(registryUrl(port), { signal: AbortSignal.timeout(1_000) })).ok;
  } catch {
    return false;
  }
}

/** The instance's pid when it runs and its API answers, else undefined. */
export async function registryServing(instance: RegistryInstance): Promise<number | undefined> {
  const pid = await livePid(instance.pidFile, "docker-registry");
  return pid !== undefined && (await answers(instance.port)) ? pid : undefined;
}

/** Stops the instance started from `pidFile` (if it runs) and waits until it is gone. */
export async function stopRegistry(instance: RegistryInstance): Promise<void> {
  const running = await livePid(instance.pidFile, "docker-registry");
  if (running === undefined) return;
  process.kill(running, "SIGTERM");
  await waitFor("registry to stop", 10_000, async () =>
    (await livePid(instance.pidFile, "docker-registry")) ? undefined : true,
  );
  await fs.rm(instance.pidFile, { force: true }); // ours (startDaemon's), not the registry's
}

/** Starts the instance when it is not running (restarting it first when `restart`); waits until it answers. */
export async function runRegistry(
  instance: RegistryInstance,
  restart: boolean,
  log: (line: string) => void,
): Promise<number> {
  if (restart && (await livePid(instance.pidFile, "docker-registry")) !== undefined) {
    log(`restarting the registry for its new config`);
    await stopRegistry(instance);
  }
  if ((await livePid(instance.pidFile, "docker-registry")) === undefined) {
    if (await answers(instance.port))
      throw new Error(
        `port ${instance.port} is taken by another registry; stop it or set agent-sandbox:host.registryPort`,
      );
    await fs.mkdir(instance.storageDir, { recursive: true });
    log(`starting docker-registry on 127.0.0.1:${instance.port} (log: ${instance.logFile})`);
    await startDaemon("docker-registry", ["serve", instance.config], instance.logFile, instance.pidFile);
  }
  // Either it answers or it has exited (a port taken, a config it refuses): then its own words, not a wait.
  const outcome = await waitFor(`registry (see ${instance.logFile})`, 30_000, async () => {
    const pid = await livePid(instance.pidFile, "docker-registry");
    if (pid === undefined) return "exited" as const;
    return (await answers(instance.port)) ? pid : undefined;
  });
  if (outcome !== "exited") return outcome;
  const written = await fs.readFile(instance.logFile, "utf8").catch(() => "");
  const last = written.trim().split("\n").slice(-5).join("\n");
  throw new Error(
    `the registry on 127.0.0.1:${instance.port} exited before it answered; the end of ${instance.logFile}:\n${last}`,
  );
}

/** The local image registry (Debian's docker-registry) that snapshots are pushed to; loopback only. */
export function imageRegistry(options: RegistryOptions): HostPart {
  const name = "registry";
  const instance = registryInstance(options);
  const url = registryUrl(options.port);
  const probe = async (): Promise<Check> => {
    // This instance's process first: another registry answering on the port (a freed port taken by someone
    // else's) is not this one running.
    if ((await livePid(instance.pidFile, "docker-registry")) === undefined)
      return { name, ready: false, detail: `not running (no live pid in ${instance.pidFile})` };
    const response = await fetch(url, { signal: AbortSignal.timeout(1_000) });
    return response.ok
      ? { name, ready: true, detail: `localhost:${options.port} (${url} answers ${response.status})` }
      : { name, ready: false, detail: `${url} answers ${response.status}` };
  };
  return {
    name,
    probe,
    async ensure(log) {
      const desired = renderRegistryConfig({ storageDir: instance.storageDir, port: options.port });
      const current = await fs.readFile(instance.config, "utf8").catch(() => "");
      const changed = current !== desired;
      if (changed) {
        log(`writing ${instance.config}`);
        await writeFileAtomic(instance.config, desired, "0644");
      }
      await runRegistry(instance, changed, log);
      return probe();
    },
  };
}
