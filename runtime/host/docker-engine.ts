import Docker from "dockerode";
import * as path from "node:path";
import type { Check, HostPart } from "./check.js";
import { startDaemon, waitFor } from "./process.js";

export interface DockerEngineOptions {
  readonly socket: string;
  readonly logDir: string;
  readonly runDir: string;
}

/**
 * The Docker Engine (Debian's docker.io). There is no systemd here, so dockerd is started by hand
 * as ENVIRONMENT.md measured; an engine that already answers on the socket is left alone.
 */
export function dockerEngine(options: DockerEngineOptions): HostPart {
  const name = "container-engine";
  const docker = new Docker({ socketPath: options.socket, timeout: 2_000 });
  const probe = async (): Promise<Check> => {
    try {
      const version = await docker.version();
      return {
        name,
        ready: true,
        detail: `Docker Engine ${version.Version}, API ${version.ApiVersion}, unix://${options.socket}`,
      };
    } catch (error) {
      return {
        name,
        ready: false,
        detail: `no engine answers on unix://${options.socket}: ${(error as Error).message}`,
      };
    }
  };
  return {
    name,
    probe,
    async ensure(log) {
      const current = await probe();
      if (current.ready) return current;
      const logFile = path.join(options.logDir, "dockerd.log");
      log(`starting dockerd on unix://${options.socket} (log: ${logFile})`);
      await startDaemon(
        "dockerd",
        ["--host", `unix://${options.socket}`, "--pidfile", path.join(options.runDir, "dockerd.pid")],
        logFile,
        path.join(options.runDir, "dockerd.launcher.pid"),
      );
      return waitFor("dockerd", 60_000, async () => {
        const check = await probe();
        return check.ready ? check : undefined;
      });
    },
  };
}
