import Docker from "dockerode";
import { promises as fs } from "node:fs";
import { connect } from "node:net";
import * as path from "node:path";
import type { Check, HostPart } from "./check.js";
import { livePid, processAlive, startDaemon, waitFor } from "../process.js";

export interface DockerEngineOptions {
  readonly socket: string;
  readonly logDir: string;
  readonly runDir: string;
}

/** The engine's version when one answers on the socket, else undefined. */
export async function engineVersion(
  socket: string,
): Promise<{ version: string; apiVersion: string } | undefined> {
  try {
    const version = await new Docker({ socketPath: socket, timeout: 2_000 }).version();
    return { version: version.Version, apiVersion: version.ApiVersion };
  } catch {
    return undefined;
  }
}

const pidFiles = (options: DockerEngineOptions) => ({
  pidFile: path.join(options.runDir, "dockerd.pid"),
  launcherPidFile: path.join(options.runDir, "dockerd.launcher.pid"),
  logFile: path.join(options.logDir, "dockerd.log"),
  /** The engine's configuration as the platform starts it: the host's own daemon.json, plus gVisor. */
  configFile: path.join(options.runDir, "dockerd.json"),
});

/** The OCI runtime name gVisor's `runsc` is registered under, on an engine the platform starts. */
export const GVISOR_RUNTIME = "runsc";

/** Where Debian's `runsc` package puts gVisor's runtime. */
export const RUNSC_BINARY = "/usr/bin/runsc";

/**
 * runsc's flags on this engine. `--network=host`: Debian 12's runsc (a 2022-12-19 build) refuses its own
 * network stack in every network namespace under a 6.x kernel ("cannot run with network enabled in root
 * network namespace": it takes a namespace for the host's when /proc/sys/net/core/rmem_default exists, which
 * such kernels have in each one). With the flag the sandbox's sockets are the host kernel's, in the
 * container's own namespace (its bridge, its address, the tenant's firewall chains and proxy as for runc);
 * every other system call still meets gVisor's kernel, and files its gofer (docs/security.md, "gVisor").
 * `--oci-seccomp`: the engine's seccomp profile applies inside the sandbox too, as under runc (without it
 * gVisor ignores it, and an agent could make user namespaces of gVisor's own kernel).
 */
export const GVISOR_RUNTIME_ARGS = ["--network=host", "--oci-seccomp"] as const;

/** The host's own engine configuration (/etc/docker/daemon.json), kept under the platform's additions. */
const HOST_DAEMON_JSON = "/etc/docker/daemon.json";

/**
 * The configuration file the platform starts dockerd with: the host's daemon.json as it is, with gVisor's
 * runtime added where `runsc` is installed. Returns its path.
 */
async function writeEngineConfig(configFile: string): Promise<string> {
  const text = await fs.readFile(HOST_DAEMON_JSON, "utf8").catch(() => "{}");
  let config: { runtimes?: Record<string, unknown> } & Record<string, unknown>;
  try {
    config = JSON.parse(text) as typeof config;
  } catch (error) {
    throw new Error(
      `${HOST_DAEMON_JSON} is not JSON (${(error as Error).message}); dockerd would refuse it too`,
    );
  }
  const runsc = await fs
    .access(RUNSC_BINARY, fs.constants.X_OK)
    .then(() => true)
    .catch(() => false);
  if (runsc)
    config.runtimes = {
      ...config.runtimes,
      [GVISOR_RUNTIME]: { path: RUNSC_BINARY, runtimeArgs: [...GVISOR_RUNTIME_ARGS] },
    };
  await fs.mkdir(path.dirname(configFile), { recursive: true });
  await fs.writeFile(configFile, `${JSON.stringify(config, null, 2)}\n`, { mode: 0o644 });
  return configFile;
}

/** True when something accepts connections on the unix socket (an engine, busy or starting). */
function socketServed(socket: string): Promise<boolean> {
  return new Promise((resolve) => {
    const connection = connect(socket);
    connection.setTimeout(1_000, () => {
      connection.destroy();
      resolve(true); // accepted but slow: served
    });
    connection.once("connect", () => {
      connection.end();
      resolve(true);
    });
    connection.once("error", () => resolve(false));
  });
}

/**
 * Starts dockerd on the socket (no systemd here, as ENVIRONMENT.md measured) and waits until it answers;
 * returns its pid. An engine that is only slow to answer (a busy machine) is never started over: a second
 * dockerd would unlink the first one's socket.
 */
export async function startEngine(
  options: DockerEngineOptions,
  log: (line: string) => void,
): Promise<number> {
  const files = pidFiles(options);
  if (await socketServed(options.socket)) {
    throw new Error(
      `something serves unix://${options.socket} but does not answer as a Docker engine; not starting another`,
    );
  }
  log(`starting dockerd on unix://${options.socket} (log: ${files.logFile})`);
  const configFile = await writeEngineConfig(files.configFile);
  await startDaemon(
    "dockerd",
    ["--host", `unix://${options.socket}`, "--pidfile", files.pidFile, "--config-file", configFile],
    files.logFile,
    files.launcherPidFile,
  );
  await waitFor("dockerd", 60_000, () => engineVersion(options.socket));
  return waitFor("dockerd's pid file", 10_000, () => livePid(files.pidFile, "dockerd"));
}

/** Stops the dockerd with `pid` (only ever one this project started) and waits until it is gone. */
export async function stopEngine(pid: number): Promise<void> {
  try {
    process.kill(pid, "SIGTERM");
  } catch {
    return; // already gone
  }
  await waitFor("dockerd to stop", 60_000, async () => (processAlive(pid) ? undefined : true));
}

/**
 * The Docker Engine (Debian's docker.io). An engine that already answers on the socket is left alone.
 */
export function dockerEngine(options: DockerEngineOptions): HostPart {
  const name = "container-engine";
  const probe = async (): Promise<Check> => {
    const version = await engineVersion(options.socket);
    return version
      ? {
          name,
          ready: true,
          detail: `Docker Engine ${version.version}, API ${version.apiVersion}, unix://${options.socket}`,
        }
      : { name, ready: false, detail: `no engine answers on unix://${options.socket}` };
  };
  return {
    name,
    probe,
    async ensure(log) {
      const current = await probe();
      if (current.ready) return current;
      await startEngine(options, log);
      return probe();
    },
  };
}
