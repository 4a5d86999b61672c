import { chmodSync, mkdtempSync } from "node:fs";
import { createServer } from "node:net";
import * as os from "node:os";
import * as path from "node:path";
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
