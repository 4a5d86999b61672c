// The host's Squid runs two workers so that one tenant's reconfigure never refuses another's connection,
// and a reconfigure is done only when every worker has re-read the config (lib/host/squid.ts).
import { promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { renderSquidConf, SQUID_HOST_WORKERS } from "../../lib/host/render.js";
import { reconfigureEvidence, reconfigureSquid, workersReconfigured } from "../../lib/host/squid.js";
import { tenantProxyConfig, EGRESS_PROXY } from "../../components/tenant/kubernetes/egress-proxy.js";

const dirs = { configDir: "/etc/x", logDir: "/var/log/x", runDir: "/run/x" };

// Lines as Squid 5.7 writes them with `workers 2` (kid3 is the coordinator), trimmed.
const at = "2026/11/28 14:51:48";
const line = (kid: number | undefined, text: string) => `${at} ${kid ? `kid${kid}| ` : ""}${text}`;
const reconfiguring = (kid?: number) => line(kid, "Reconfiguring Squid Cache (version 5.7)...");
const closing = (kid?: number) => line(kid, "Closing HTTP(S) port 127.0.0.1:23128");
const starting = (kid?: number) => line(kid, "Starting Squid Cache version 5.7 for x86_64-pc-linux-gnu...");
const accepting = (kid?: number) =>
  line(kid, "Accepting HTTP Socket connections at conn11 local=127.0.0.1:23128 remote=[::] FD 23 flags=1");

describe("the host's Squid workers", () => {
  it("are two on the host, one in a kubernetes tenant's own proxy", () => {
    expect(SQUID_HOST_WORKERS).toBe(2);
    expect(renderSquidConf({ port: 3999, ...dirs })).toMatch(/^workers 2$/m);
    expect(renderSquidConf({ port: 3999, workers: 3, ...dirs })).toMatch(/^workers 3$/m);
    expect(tenantProxyConfig("t1", ["example.com"])[EGRESS_PROXY.mainFile]).toMatch(/^workers 1$/m);
  });
});

describe("a reconfigure is done", () => {
  it("when every worker has logged its reconfigure and then accepts again, in any order", () => {
    const log = [
      reconfiguring(2),
      closing(2),
      reconfiguring(3),
      reconfiguring(1),
      closing(1),
      accepting(1),
      accepting(2),
    ];
    expect(workersReconfigured(log.join("\n"), 2)).toBe(true);
    expect(workersReconfigured(log.slice(0, 6).join("\n"), 2)).toBe(false); // kid2 still re-reading
  });

  it("not while a worker re-reads again, after a second signal, and not on an accept without a reconfigure", () => {
    const again = [reconfiguring(1), reconfiguring(2), accepting(1), accepting(2), reconfiguring(1)];
    expect(workersReconfigured(again.join("\n"), 2)).toBe(false);
    expect(workersReconfigured([...again, accepting(1)].join("\n"), 2)).toBe(true);
    expect(workersReconfigured([accepting(1), accepting(2)].join("\n"), 2)).toBe(false);
    expect(workersReconfigured("", 1)).toBe(false);
  });

  it("when a worker started again meanwhile (it read the config at its start) accepts", () => {
    const restarted = [reconfiguring(1), reconfiguring(2), accepting(1), starting(2)];
    expect(workersReconfigured(restarted.join("\n"), 2)).toBe(false);
    expect(reconfigureEvidence(restarted.join("\n"), 2)).toBe("kid1 accepting, kid2 reconfiguring");
    expect(workersReconfigured([...restarted, accepting(2)].join("\n"), 2)).toBe(true);
    // Started without a reconfigure logged: its start is its reading of the config.
    expect(
      workersReconfigured([reconfiguring(1), accepting(1), starting(2), accepting(2)].join("\n"), 2),
    ).toBe(true);
  });

  it("for one worker, whether or not its lines name the kid; the coordinator is never waited for", () => {
    expect(workersReconfigured([reconfiguring(), accepting()].join("\n"), 1)).toBe(true);
    expect(workersReconfigured([reconfiguring(1), accepting(1)].join("\n"), 1)).toBe(true);
    expect(workersReconfigured([reconfiguring(1), reconfiguring(3), accepting(1)].join("\n"), 1)).toBe(true);
    expect(workersReconfigured([reconfiguring(1), accepting(1)].join("\n"), 2)).toBe(false);
  });
});

describe("a reconfigure that did not finish", () => {
  it("names each worker's state and the last errors of the log since its signal", () => {
    const fatal = line(2, "FATAL: Unable to open HTTP Socket");
    const log = [reconfiguring(1), reconfiguring(2), accepting(1), closing(2), fatal];
    expect(reconfigureEvidence(log.join("\n"), 2)).toBe(
      `kid1 accepting, kid2 reconfiguring; last errors: ${fatal}`,
    );
    expect(reconfigureEvidence("", 2)).toBe("kid1 no reconfigure logged, kid2 no reconfigure logged");
    const errors = [1, 2, 3, 4].map((n) => line(1, `ERROR: number ${n}`));
    expect(reconfigureEvidence([reconfiguring(1), ...errors].join("\n"), 1)).toBe(
      `kid1 reconfiguring; last errors: ${errors.slice(1).join(" | ")}`,
    );
  });
});

describe("a reconfigure that runs past its bound", () => {
  /** A config naming a cache log with two workers, and a `send` that appends `lines` to that log. */
  async function instance() {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), "squid-reconfigure-"));
    const [config, log] = [path.join(dir, "squid.conf"), path.join(dir, "cache.log")];
    await fs.writeFile(config, `workers 2\ncache_log ${log}\n`);
    await fs.writeFile(log, "");
    const sent: number[] = [];
    const send = (lines: string[]) => async () => {
      sent.push(performance.now());
      await fs.appendFile(log, `${lines.join("\n")}\n`);
    };
    return { dir, config, log, sent, send };
  }
  const TIMEOUT_MS = 600;
  /** The call's error and when it came; a call that succeeds fails the test. */
  const failure = (call: Promise<void>) =>
    call.then(
      () => {
        throw new Error("the reconfigure succeeded");
      },
      (error: Error) => ({ error, at: performance.now() }),
    );

  it("fails naming each worker's state, and holds the lock while they may still finish: the next caller signals after", async () => {
    const squid = await instance();
    try {
      const started = performance.now();
      const stuck = failure(
        reconfigureSquid(
          squid.config,
          squid.send([reconfiguring(1), reconfiguring(2), accepting(1)]),
          TIMEOUT_MS,
        ),
      );
      await new Promise((resolve) => setTimeout(resolve, 100));
      // A caller whose files were written meanwhile queues for the lock.
      const next = reconfigureSquid(
        squid.config,
        squid.send([reconfiguring(1), reconfiguring(2), accepting(1), accepting(2)]),
        TIMEOUT_MS,
      );
      const failed = await stuck;
      expect(failed.error.message).toMatch(/not ready after 600 ms: kid1 accepting, kid2 reconfiguring$/);
      // Its bound, then as long again for the workers.
      expect(failed.at - started).toBeGreaterThanOrEqual(2 * TIMEOUT_MS);
      await next;
      expect(squid.sent).toHaveLength(2);
      expect(squid.sent[1]!).toBeGreaterThanOrEqual(failed.at - 50);
    } finally {
      await fs.rm(squid.dir, { recursive: true, force: true });
    }
  });

  it("succeeds when the workers finish within as long again: the change is applied", async () => {
    const squid = await instance();
    try {
      // kid2 accepts after the first wait has given up (its bound and at most one poll's pause past it) and
      // before the second one's bound.
      const [bound, lateMs] = [1_000, 1_800];
      const started = performance.now();
      const late = setTimeout(() => void fs.appendFile(squid.log, `${accepting(2)}\n`), lateMs);
      await reconfigureSquid(
        squid.config,
        squid.send([reconfiguring(1), reconfiguring(2), accepting(1)]),
        bound,
      ).finally(() => clearTimeout(late));
      expect(performance.now() - started).toBeGreaterThanOrEqual(lateMs);
    } finally {
      await fs.rm(squid.dir, { recursive: true, force: true });
    }
  });
});
