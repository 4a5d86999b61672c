// Benchmark (issue 16): `sbx start` of a 50 MB repository to an attached prompt, and `sbx sync` of 100
// commits made inside, each beside plain git over the same SSH measured in the same run (`git push` of the
// same repository into a fresh repository in the same sandbox; `git fetch` of the same commits into a copy).
// Prints figures; asserts nothing (npm run bench).
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import * as fs from "node:fs/promises";
import type { AddressInfo } from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { tenantNames } from "../../components/tenant/names.js";
import { apiHarness, emailOf, PASSWORD } from "../helpers/api.js";
import { execIn } from "../helpers/containers.js";
import { testPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { HostTmux, SBX, sbx } from "../helpers/sbx.js";
import { report, type Figure } from "./report.js";

const ROUNDS = Number(process.env.BENCH_SBX_ROUNDS ?? 3);
const MB = Number(process.env.BENCH_SBX_REPO_MB ?? 50);
const COMMITS = 100;

const gitEnv = {
  ...process.env,
  GIT_AUTHOR_NAME: "dev",
  GIT_AUTHOR_EMAIL: "dev@host.test",
  GIT_COMMITTER_NAME: "dev",
  GIT_COMMITTER_EMAIL: "dev@host.test",
};
const git = (cwd: string, args: string[], env: NodeJS.ProcessEnv = {}) =>
  execFileSync("git", ["-C", cwd, ...args], {
    encoding: "utf8",
    env: { ...gitEnv, ...env },
    maxBuffer: 64 << 20,
  }).trim();
const seconds = async (work: () => Promise<unknown>): Promise<number> => {
  const t0 = performance.now();
  await work();
  return (performance.now() - t0) / 1000;
};
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
/** The figures for `npm run bench`'s table (each a single run or a median, beside plain git). */
const figures: Figure[] = [];
const row = (what: string, sbxS: number, plainS: number) => {
  figures.push({
    figure: what,
    unit: "s",
    p50: sbxS,
    baseline: { label: "plain git over SSH", p50: plainS },
  });
  console.log(
    `${what.padEnd(44)} sbx ${sbxS.toFixed(2)} s   plain git ${plainS.toFixed(2)} s   ratio ${(sbxS / plainS).toFixed(2)}x`,
  );
};

/** `sbx start` in text mode; when each progress line (stderr) appeared, in seconds from the spawn. */
async function timedStart(
  home: string,
  cwd: string,
  args: string[],
): Promise<{ projectId: string; at: (prefix: string, otherwise: number) => number }> {
  const t0 = performance.now();
  const lines: { s: number; line: string }[] = [];
  const child = spawn(SBX, args, { cwd, env: { ...process.env, XDG_CONFIG_HOME: home } });
  let stdout = "";
  let partial = "";
  child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
  child.stderr.on("data", (c: Buffer) => {
    const s = (performance.now() - t0) / 1000;
    const text = partial + c.toString();
    const complete = text.split("\n");
    partial = complete.pop() ?? "";
    for (const line of complete) lines.push({ s, line });
  });
  const code = await new Promise<number>((resolve) => child.once("close", (c) => resolve(c ?? 1)));
  if (code !== 0) throw new Error(`sbx start exited ${code}: ${lines.map((l) => l.line).join("\n")}`);
  const projectId = /\(([0-9a-f-]{36})\)/.exec(stdout)?.[1];
  if (!projectId) throw new Error(`sbx start printed no project id: ${stdout}`);
  return {
    projectId,
    at: (prefix, otherwise) => lines.find((l) => l.line.startsWith(prefix))?.s ?? otherwise,
  };
}

async function main(): Promise<void> {
  const platform = await testPlatform({
    subnetPool: "10.245.24.0/22",
    sshPortRange: [28020, 28025],
    leaseSeconds: 10,
  });
  const h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice"],
    reconciler: true,
    terminal: true,
  });
  const work = await fs.mkdtemp(path.join(os.tmpdir(), "sbx-bench-"));
  const tmux = new HostTmux();
  const home = path.join(work, "config");
  let repo = "";
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

    // A 50 MB repository: incompressible files over a few commits, two branches.
    repo = path.join(work, "app");
    await fs.mkdir(repo);
    git(repo, ["init", "-q", "-b", "main"]);
    for (let i = 0; i < MB; i++) {
      await fs.writeFile(path.join(repo, `blob-${i}.bin`), randomBytes(1024 * 1024));
      if (i % 10 === 9) {
        git(repo, ["add", "-A"]);
        git(repo, ["commit", "-q", "-m", `blobs to ${i}`]);
      }
    }
    git(repo, ["add", "-A"]);
    git(repo, ["commit", "-q", "--allow-empty", "-m", "last"]);
    git(repo, ["branch", "feature"]);
    console.log(
      `repository: ${git(repo, ["count-objects", "-vH"])
        .split("\n")
        .filter((l) => /^size(-pack)?:/.test(l))
        .join(", ")}, ${MB} files`,
    );

    // sbx start (create, wait, push, protect) and then attach until the prompt shows; its progress lines
    // (stderr) are timed to split the start into its phases.
    const t0 = performance.now();
    const phases = await timedStart(home, repo, ["start", "--max-size", "200"]);
    const startS = (performance.now() - t0) / 1000;
    await tmux.open("bench", `XDG_CONFIG_HOME=${home} ${SBX} attach`, repo);
    await tmux.waitFor("bench", /agent@[^\n]*\$\s*$/m, 120_000);
    const promptS = (performance.now() - t0) / 1000;
    const projectId = phases.projectId;
    const container = tenantNames(projectId).container;
    const view = (await h.as("alice", "GET", `/projects/${projectId}`)).json<{
      ssh: { host: string; port: number };
    }>();
    const key = path.join(home, "agent-sandbox", "keys", projectId);
    const sshCommand = `ssh -F /dev/null -i ${key} -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes`;
    const url = (dir: string) => `ssh://agent@${view.ssh.host}:${view.ssh.port}/home/agent/${dir}`;

    // Baseline: the same push, plain git over the same SSH, into a fresh repository in the same sandbox.
    await execIn(
      container,
      "git init -q ~/plain-push && git -C ~/plain-push config receive.denyCurrentBranch updateInstead",
    );
    const pushS = await seconds(async () =>
      git(repo, ["push", "-q", url("plain-push"), "refs/heads/*:refs/heads/*"], {
        GIT_SSH_COMMAND: sshCommand,
      }),
    );
    const pushPhase = phases.at("applying", startS) - phases.at("pushing", 0);
    console.log(
      `sbx start of a ${MB} MB repository: ${startS.toFixed(2)} s to exit, ${promptS.toFixed(2)} s to an attached prompt ` +
        `(create to running and sshd up ${phases.at("pushing", 0).toFixed(2)} s, push ${pushPhase.toFixed(2)} s, ` +
        `protected paths (container replaced) ${(startS - phases.at("applying", startS)).toFixed(2)} s, attach ${(promptS - startS).toFixed(2)} s)`,
    );
    row(`push of the ${MB} MB repository (in sbx start)`, pushPhase, pushS);
    row(`sbx start, to exit`, startS, pushS);
    row(`sbx start, to an attached prompt`, promptS, pushS);

    // sync: 100 commits inside, fetched by sbx sync; the same commits fetched by plain git into a copy.
    const syncs: number[] = [];
    const fetches: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const made = await execIn(
        container,
        `cd /workspace/app && for i in $(seq 1 ${COMMITS}); do echo "$i ${round}" > "c-${round}-$i.txt"; git add "c-${round}-$i.txt"; git commit -q -m "inside ${round} $i"; done`,
      );
      if (made.code !== 0) throw new Error(made.stderr);
      const copy = path.join(work, `copy-${round}`);
      execFileSync("cp", ["-a", repo, copy]);
      fetches.push(
        await seconds(async () =>
          git(copy, ["fetch", "-q", url("workspace/app"), "+refs/heads/*:refs/remotes/plain/*"], {
            GIT_SSH_COMMAND: sshCommand,
          }),
        ),
      );
      syncs.push(
        await seconds(async () => {
          const synced = await sbx(home, repo, ["sync", "--json"]);
          if (synced.code !== 0) throw new Error(synced.stderr);
        }),
      );
      await fs.rm(copy, { recursive: true, force: true });
    }
    console.log(
      `sbx sync of ${COMMITS} commits, ${ROUNDS} rounds: ${syncs.map((s) => s.toFixed(2)).join(", ")} s; plain git fetch: ${fetches.map((s) => s.toFixed(2)).join(", ")} s`,
    );
    row(`sync of ${COMMITS} commits (median)`, median(syncs), median(fetches));
    report("sbx", figures);
  } finally {
    await tmux.stop();
    // No tenant outlives the run (its subnet and SSH port are the next run's).
    if (repo) await sbx(home, repo, ["rm", "--yes"]).catch(() => undefined);
    await h.close();
    await platform.stop();
    await fs.rm(work, { recursive: true, force: true });
  }
}

await main();
