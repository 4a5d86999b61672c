// Benchmark (seed 004 SC-003, "a commit inside is on the host within 5 s"): how long after a commit made inside
// (as the agent, on a worktree's branch) `sbx sync --watch` has it under refs/remotes/sandbox/* on the host,
// beside a one-shot `sbx sync` started right after a commit in the same run (the CLI's start, the project's GET,
// the host key's read, the fetch). Then a restart of the sandbox: the time from its running again to the same
// watch's reconnection, and a commit's arrival after it. Prints figures; asserts nothing (npm run bench).
import { spawn } from "node:child_process";
import * as fs from "node:fs/promises";
import type { AddressInfo } from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { tenantNames } from "../../components/tenant/names.js";
import { waitFor } from "../../lib/process.js";
import { apiHarness, emailOf, PASSWORD } from "../helpers/api.js";
import { execIn } from "../helpers/containers.js";
import { testPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { hostGit, SBX, sbx } from "../helpers/sbx.js";
import { percentile, report, type Figure } from "./report.js";

const ROUNDS = Number(process.env.BENCH_SYNC_WATCH_ROUNDS ?? 10);

const git = hostGit;

/** The host's refs/remotes/sandbox/<branch>, or undefined. */
function onHost(repo: string, branch: string): string | undefined {
  try {
    return git(repo, ["rev-parse", "--verify", "-q", `refs/remotes/sandbox/${branch}`]);
  } catch {
    return undefined;
  }
}

async function main(): Promise<void> {
  const platform = await testPlatform({
    subnetPool: "10.245.28.0/22",
    sshPortRange: [28030, 28035],
    leaseSeconds: 10,
  });
  const h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice"],
    reconciler: true,
  });
  const work = await fs.mkdtemp(path.join(os.tmpdir(), "sync-watch-bench-"));
  const home = path.join(work, "config");
  const repo = path.join(work, "app");
  let started = false;
  let watch: ReturnType<typeof spawn> | undefined;
  try {
    await h.app.listen({ host: "127.0.0.1", port: 0 });
    const base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    const login = await sbx(
      home,
      work,
      ["login", "--api", base, "--email", emailOf("alice"), "--password-stdin"],
      { input: PASSWORD },
    );
    if (login.code !== 0) throw new Error(login.stderr);
    await fs.mkdir(repo);
    git(repo, ["init", "-q", "-b", "main"]);
    await fs.writeFile(path.join(repo, "README.md"), "# app\n");
    git(repo, ["add", "-A"]);
    git(repo, ["commit", "-q", "-m", "first"]);
    // A kept repository (its hooks protected), as sbx start makes by default: commits go through the keeper.
    const start = await sbx(home, repo, ["start", "--json"]);
    if (start.code !== 0) throw new Error(start.stderr);
    started = true;
    const projectId = start.json<{ project_id: string }>().project_id;
    const container = tenantNames(projectId).container;
    const added = await sbx(home, repo, ["worktree", "add", "agent"]);
    if (added.code !== 0) throw new Error(added.stderr);
    let n = 0;
    /**
     * A commit inside as the agent, and the moment (Date.now()'s clock) it was done, read inside right after it:
     * a container's clock is the host's, and `docker exec` may take a while to return on a busy machine.
     */
    const commit = async (): Promise<{ sha: string; at: number }> => {
      n++;
      const made = await execIn(
        container,
        `cd /workspace/app/.worktrees/agent && echo ${n} > c-${n}.txt && git add c-${n}.txt && git commit -q -m "inside ${n}" && date +%s%3N && git rev-parse HEAD`,
      );
      if (made.code !== 0) throw new Error(made.stderr);
      const [at, sha] = made.stdout.split("\n");
      return { sha: sha!, at: Number(at) };
    };

    // Baseline: a one-shot sbx sync started as soon as the commit is made.
    const oneShot: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const { sha, at } = await commit();
      const synced = await sbx(home, repo, ["sync", "--json"]);
      if (synced.code !== 0 || onHost(repo, "agent") !== sha) throw new Error(`sync: ${synced.stderr}`);
      oneShot.push(Date.now() - at);
    }

    // The watch: each commit waited for on the host (its ref read every 20 ms).
    watch = spawn(SBX, ["sync", "--watch", "--json"], {
      cwd: repo,
      env: { ...process.env, XDG_CONFIG_HOME: home },
      stdio: ["ignore", "pipe", "inherit"],
    });
    let events = "";
    watch.stdout!.on("data", (c: Buffer) => (events += c.toString()));
    const said = (event: string, timeoutMs: number, from = 0) =>
      waitFor(`the watch's ${event}`, timeoutMs, async () =>
        events.slice(from).includes(`{"event":"${event}"`) ? true : undefined,
      );
    await said("watching", 60_000);
    const arrival = async (sha: string, at: number): Promise<number> => {
      while (onHost(repo, "agent") !== sha) {
        if (Date.now() - at > 60_000) throw new Error(`the watch did not fetch ${sha}: ${events}`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      return Date.now() - at;
    };
    const watched: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const { sha, at } = await commit();
      watched.push(await arrival(sha, at));
      // Commits a second apart, as an agent's are at the most.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
    }

    // A restart: from the sandbox running again to the watch's reconnection, then a commit's arrival.
    const stopped = await sbx(home, repo, ["stop"]);
    if (stopped.code !== 0) throw new Error(stopped.stderr);
    const mark = events.length;
    const t0 = performance.now();
    const restarted = await sbx(home, repo, ["start", "--json"]);
    if (restarted.code !== 0) throw new Error(restarted.stderr);
    const running = performance.now();
    await said("reconnected", 180_000, mark);
    const reconnectS = (performance.now() - running) / 1000;
    const after = await commit();
    const afterRestart = await arrival(after.sha, after.at);
    console.log(
      `restart: sbx start ${((running - t0) / 1000).toFixed(2)} s, then the watch reconnected after ${reconnectS.toFixed(2)} s; a commit then arrived in ${(afterRestart / 1000).toFixed(2)} s`,
    );
    watch.kill("SIGINT");
    const code = await new Promise<number | null>((resolve) => watch!.once("close", resolve));
    watch = undefined;

    const p50 = percentile(watched, 50) / 1000;
    const base50 = percentile(oneShot, 50) / 1000;
    console.log(
      `commit inside → refs/remotes/sandbox/agent on the host, ${ROUNDS} commits each:\n` +
        `  sbx sync --watch    ${watched.map((v) => (v / 1000).toFixed(2)).join(" ")} s (p50 ${p50.toFixed(2)} s, max ${(Math.max(...watched) / 1000).toFixed(2)} s)\n` +
        `  one-shot sbx sync   ${oneShot.map((v) => (v / 1000).toFixed(2)).join(" ")} s (p50 ${base50.toFixed(2)} s)\n` +
        `  ratio ${(p50 / base50).toFixed(2)}x; the watch exited ${code} on SIGINT`,
    );
    const figures: Figure[] = [
      {
        figure: "SC-003: commit inside → ref on the host, sbx sync --watch",
        unit: "s",
        p50,
        tail: { label: "max", value: Math.max(...watched) / 1000 },
        baseline: { label: "one-shot sbx sync right after the commit", p50: base50 },
        goal: "≤ 5 s",
        samples: watched.length,
      },
      {
        figure: "sbx sync --watch: sandbox running again → reconnected",
        unit: "s",
        p50: reconnectS,
        samples: 1,
      },
    ];
    report("sync-watch", figures);
  } finally {
    watch?.kill("SIGKILL");
    // No tenant outlives the run (its subnet and SSH port are the next run's).
    if (started) await sbx(home, repo, ["rm", "--yes"]).catch(() => undefined);
    await h.close();
    await platform.stop();
    await fs.rm(work, { recursive: true, force: true });
  }
}

await main();
