import { promises as fs } from "node:fs";
import * as path from "node:path";
import { renderSquidBaselineFragment, renderSquidConf, squidPaths } from "../../components/host/render.js";
import { writeFileAtomic } from "../../provider/resources/host-file.js";
import type { Check, HostPart } from "./check.js";
import { tcpReachable } from "./net.js";
import { livePid, run, waitFor } from "./process.js";

export interface SquidOptions {
  readonly port: number;
  /** Names Squid resolves before asking DNS (default /etc/hosts). */
  readonly hostsFile?: string;
  readonly configDir: string;
  readonly logDir: string;
  readonly runDir: string;
}

export { squidPaths };

export function renderSquidConfig(options: SquidOptions): string {
  return renderSquidConf(options);
}

/** `squid -k parse` of a config; the error names the offending line. */
export async function validateSquidConfig(file: string): Promise<void> {
  try {
    await run("squid", ["-k", "parse", "-f", file]);
  } catch (error) {
    const fatal = (error as Error).message.split("\n").filter((line) => /FATAL|ERROR|Bungled/.test(line));
    throw new Error(`squid rejects ${file}: ${fatal.join(" | ") || (error as Error).message}`);
  }
}

async function readOrEmpty(file: string): Promise<string> {
  return fs.readFile(file, "utf8").catch(() => "");
}

/**
 * The egress proxy: our own Squid instance with its own config, pid file and logs, so it never depends
 * on (or disturbs) a distribution-managed squid service.
 */
export function squidProxy(options: SquidOptions): HostPart {
  const name = "squid";
  const paths = squidPaths(options);
  const probe = async (): Promise<Check> => {
    const pid = await livePid(paths.pidFile, "squid");
    if (pid === undefined)
      return { name, ready: false, detail: `not running (no live pid in ${paths.pidFile})` };
    await tcpReachable("127.0.0.1", options.port, 500);
    return { name, ready: true, detail: `pid ${pid}, port ${options.port}, config ${paths.config}` };
  };
  return {
    name,
    probe,
    async ensure(log) {
      await fs.mkdir(paths.fragmentsDir, { recursive: true });
      await fs.mkdir(paths.logDir, { recursive: true });
      await fs.mkdir(path.dirname(paths.pidFile), { recursive: true });
      await run("chown", ["proxy:proxy", paths.logDir]); // Squid writes its logs after dropping to "proxy"
      const baseline = renderSquidBaselineFragment();
      if ((await readOrEmpty(paths.baselineFragment)) !== baseline)
        await writeFileAtomic(paths.baselineFragment, baseline, "0644");

      const desired = renderSquidConfig(options);
      const changed = (await readOrEmpty(paths.config)) !== desired;
      if (changed) {
        // Validate a candidate next to the live file: a bad config must never replace a good one.
        const candidate = `${paths.config}.candidate`;
        await writeFileAtomic(candidate, desired, "0644");
        try {
          await validateSquidConfig(candidate);
        } finally {
          await fs.rm(candidate, { force: true });
        }
        log(`writing ${paths.config}`);
        await writeFileAtomic(paths.config, desired, "0644");
      }
      const accepting = () =>
        tcpReachable("127.0.0.1", options.port, 300).then(
          () => true,
          () => false,
        );
      let pid = await livePid(paths.pidFile, "squid");
      if (pid !== undefined && !(await accepting())) {
        // Starting up or shutting down: wait until it serves or is gone before deciding.
        await waitFor("squid to settle", 15_000, async () =>
          (await accepting()) || (await livePid(paths.pidFile, "squid")) === undefined ? true : undefined,
        );
        pid = await livePid(paths.pidFile, "squid");
      }
      if (pid !== undefined) {
        if (changed) {
          log(`reconfiguring squid (pid ${pid})`);
          await run("squid", ["-k", "reconfigure", "-f", paths.config]);
        }
      } else {
        if (await accepting()) {
          throw new Error(
            `port ${options.port} is taken by another process; stop it or set agent-sandbox:host.squidPort`,
          );
        }
        log(`starting squid on port ${options.port} (logs: ${paths.logDir})`);
        await run("squid", ["-f", paths.config]);
      }
      return waitFor(`squid (see ${paths.logDir}/cache.log)`, 30_000, async () => {
        const check = await probe();
        return check.ready ? check : undefined;
      });
    },
  };
}
