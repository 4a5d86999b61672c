import { chmodSync, mkdtempSync, promises as fs } from "node:fs";
import { createServer } from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { livePid, run, waitFor } from "../../lib/process.js";
import { squidPaths, squidProxy } from "../../lib/host/squid.js";
import { HostConfig } from "../../stacks/config.js";

/** A port nothing listens on right now (the kernel's pick). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/**
 * A host config whose Squid and registry are the test's own instances (own ports, own directories),
 * sharing only the machine's Docker engine, so stopping them cannot disturb anything else.
 */
export async function isolatedHostConfig(): Promise<HostConfig> {
  const root = mkdtempSync(path.join(os.tmpdir(), "host-test-"));
  chmodSync(root, 0o755); // Squid drops to the "proxy" user and must reach its log directory
  return HostConfig.parse({
    squidPort: await freePort(),
    registryPort: await freePort(),
    configDir: path.join(root, "etc"),
    dataDir: path.join(root, "lib"),
    logDir: path.join(root, "log"),
    runDir: path.join(root, "run"),
  });
}

/**
 * An isolated host config with the test's own Squid running on it. `hosts` (name → address) become the
 * proxy's hosts file, for names that only exist in the test's own network. `stop()` shuts Squid down and
 * removes every directory the host used.
 */
export async function isolatedSquidHost(hosts: Record<string, string> = {}) {
  const host = await isolatedHostConfig();
  const hostsFile = path.join(host.configDir, "hosts");
  await fs.mkdir(host.configDir, { recursive: true });
  await fs.writeFile(
    hostsFile,
    Object.entries(hosts)
      .map(([name, address]) => `${address} ${name}\n`)
      .join(""),
  );
  const squid = squidProxy({ port: host.squidPort, hostsFile, ...host });
  await squid.ensure(() => undefined);
  const paths = squidPaths(host);
  return {
    host,
    /** Starts (again) the test's Squid. */
    ensureSquid: () => squid.ensure(() => undefined),
    async stopSquid() {
      await run("squid", ["-k", "shutdown", "-f", paths.config]).catch(() => undefined);
      await waitFor("squid to exit", 15_000, async () => ((await livePid(paths.pidFile)) ? undefined : true));
    },
    async stop() {
      await this.stopSquid().catch(() => undefined);
      await fs.rm(path.dirname(host.configDir), { recursive: true, force: true });
    },
  };
}
