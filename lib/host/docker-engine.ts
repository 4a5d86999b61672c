import Docker from "dockerode";
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
});

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
  await startDaemon(
    "dockerd",
    ["--host", `unix://${options.socket}`, "--pidfile", files.pidFile],
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
