import { promises as fs } from "node:fs";
import * as path from "node:path";
import { renderRegistryConfig } from "../../components/host/render.js";
import { writeFileAtomic } from "../../provider/resources/host-file.js";
import type { Check, HostPart } from "./check.js";
import { livePid, startDaemon, waitFor } from "./process.js";

export interface RegistryOptions {
  readonly port: number;
  readonly configDir: string;
  readonly dataDir: string;
  readonly logDir: string;
  readonly runDir: string;
}

/** The local image registry (Debian's docker-registry) that snapshots are pushed to; loopback only. */
export function imageRegistry(options: RegistryOptions): HostPart {
  const name = "registry";
  const config = path.join(options.configDir, "registry", "config.yml");
  const pidFile = path.join(options.runDir, "registry.pid");
  const url = `http://127.0.0.1:${options.port}/v2/`;
  const probe = async (): Promise<Check> => {
    const response = await fetch(url, { signal: AbortSignal.timeout(1_000) });
    return response.ok
      ? { name, ready: true, detail: `localhost:${options.port} (${url} answers ${response.status})` }
      : { name, ready: false, detail: `${url} answers ${response.status}` };
  };
  return {
    name,
    probe,
    async ensure(log) {
      const desired = renderRegistryConfig({
        storageDir: path.join(options.dataDir, "registry"),
        port: options.port,
      });
      const current = await fs.readFile(config, "utf8").catch(() => "");
      const running = await livePid(pidFile, "docker-registry");
      if (current !== desired) {
        log(`writing ${config}`);
        await writeFileAtomic(config, desired, "0644");
        if (running !== undefined) {
          log(`restarting the registry (pid ${running}) for its new config`);
          process.kill(running, "SIGTERM");
          await waitFor("registry to stop", 10_000, async () =>
            (await livePid(pidFile, "docker-registry")) ? undefined : true,
          );
        }
      }
      if ((await livePid(pidFile, "docker-registry")) === undefined) {
        const ready = await probe().catch(() => undefined);
        if (ready?.ready)
          throw new Error(
            `port ${options.port} is taken by another registry; stop it or set agent-sandbox:host.registryPort`,
          );
        await fs.mkdir(path.join(options.dataDir, "registry"), { recursive: true });
        const logFile = path.join(options.logDir, "registry.log");
        log(`starting docker-registry on 127.0.0.1:${options.port} (log: ${logFile})`);
        await startDaemon("docker-registry", ["serve", config], logFile, pidFile);
      }
      return waitFor("registry", 30_000, async () => {
        const check = await probe();
        return check.ready ? check : undefined;
      });
    },
  };
}
