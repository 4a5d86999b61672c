import { execFile } from "node:child_process";
import { existsSync, promises as fs } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { hostLock } from "./host-lock.js";

const run = promisify(execFile);

/**
 * dist/web built from the sources under test, as the runtime serves it: rebuilt only when web/'s sources (or
 * the locked packages) differ from what it was built from (scripts/web-stamp.sh, as `npm test`'s set-up
 * decides), one file at a time. A build empties dist/web first (vite's emptyOutDir), so a rebuild beside a
 * file whose runtime is serving the console answered its page's `GET /` with a 404 (session 52's full run:
 * agent-pane's desktop page, while web-console's beforeAll built).
 */
export async function webConsoleBuilt(): Promise<void> {
  const lock = await hostLock("web-console-build");
  try {
    const stamp = (await run("bash", [path.join(REPO_ROOT, "scripts", "web-stamp.sh")])).stdout.trim();
    const stampFile = path.join(REPO_ROOT, "dist", ".web-source-stamp");
    const built = await fs.readFile(stampFile, "utf8").catch(() => "");
    if (existsSync(path.join(REPO_ROOT, "dist", "web", "index.html")) && built.trim() === stamp) return;
    await run("npm", ["run", "--silent", "build:web"], { cwd: REPO_ROOT });
    await fs.writeFile(stampFile, `${stamp}\n`);
  } finally {
    await lock.release();
  }
}
