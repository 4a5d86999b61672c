// Benchmark (issue 18): what a kept repository costs a git command (docs/security.md, "Kept repositories").
// In one sandbox container run as the tenant stacks run it, `git status` and `git commit` in a kept
// repository (through the agent's git, the keeper's socket and its checks) beside the same commands by
// /usr/bin/git in an identical repository of the agent's own, interleaved, timed inside the container so
// that `docker exec` is not part of either figure. Prints figures; asserts nothing (npm run bench).
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { SANDBOX_CAPABILITIES } from "../../lib/constants.js";
import { buildSandboxImage } from "../../sandbox-image/build.js";
import { percentile, report, type Figure } from "./report.js";

const run = promisify(execFile);
const ROUNDS = Number(process.env.BENCH_KEPT_GIT_ROUNDS ?? 50);
const docker = async (...args: string[]) =>
  (await run("docker", args, { maxBuffer: 16 << 20 })).stdout.trim();

/** Milliseconds of each of ROUNDS runs of `kept` and `own`, interleaved, measured by bash inside. */
const TIMING = `
t() { local s=$EPOCHREALTIME; "$@" >/dev/null 2>&1 || echo "FAILED $*" >&2; local e=$EPOCHREALTIME; echo $(( (\${e/./} - \${s/./}) ))" "; }
for i in $(seq "$ROUNDS"); do
  echo "status kept $(cd ~/kept && t git status --short)"
  echo "status own $(cd ~/own && t /usr/bin/git status --short)"
  echo "commit kept $(cd ~/kept && echo $i >> f && t git commit -qam c$i)"
  echo "commit own $(cd ~/own && echo $i >> f && t /usr/bin/git commit -qam c$i)"
done`;

async function main(): Promise<void> {
  const image = (await buildSandboxImage({ base: "local", log: () => undefined })).tag;
  const suffix = Math.random().toString(16).slice(2, 10);
  const volume = `bench-kept-git-${suffix}`;
  const container = `bench-kept-git-${suffix}`;
  try {
    await docker("volume", "create", volume);
    // Two identical repositories with a hook, made as the agent; then the sandbox with kept's hooks protected.
    await docker(
      "run",
      "--rm",
      "-u",
      "agent",
      "--mount",
      `type=volume,src=${volume},dst=/home/agent`,
      "--entrypoint",
      "bash",
      image,
      "-c",
      "set -e; git config --global user.name a; git config --global user.email a@a.test; for r in kept own; do git init -q ~/$r; cd ~/$r; printf '#!/bin/sh\\nexit 0\\n' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; echo 0 > f; git add f; git commit -qm init; done",
    );
    const mountpoint = await docker("volume", "inspect", "--format", "{{.Mountpoint}}", volume);
    await docker(
      "run",
      "--detach",
      "--name",
      container,
      "--cap-drop",
      "ALL",
      ...SANDBOX_CAPABILITIES.flatMap((cap) => ["--cap-add", cap]),
      "--security-opt",
      "no-new-privileges",
      "--mount",
      `type=volume,src=${volume},dst=/home/agent`,
      "--mount",
      `type=bind,src=${mountpoint}/kept/.git/hooks,dst=/home/agent/kept/.git/hooks,readonly`,
      image,
    );
    for (let i = 0; ; i++) {
      const owner = await docker(
        "exec",
        container,
        "sh",
        "-c",
        "stat -c %U /home/agent/kept/.git; test -S /run/agent-sandbox/git-keeper.sock && echo serving",
      ).catch(() => "");
      if (owner === "gitkeeper\nserving") break;
      if (i > 100) throw new Error(`the repository was not kept: ${owner}`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    const { stdout, stderr } = await run(
      "docker",
      ["exec", "-u", "agent", "-e", `ROUNDS=${ROUNDS}`, container, "bash", "-c", TIMING],
      { maxBuffer: 16 << 20 },
    );
    if (stderr.includes("FAILED")) throw new Error(stderr);
    const times = new Map<string, number[]>();
    for (const line of stdout.split("\n")) {
      const [command, where, micros] = line.trim().split(/\s+/);
      if (!command || !micros) continue;
      const key = `${command} ${where}`;
      times.set(key, [...(times.get(key) ?? []), Number(micros) / 1000]);
    }
    const figures: Figure[] = [];
    console.log(`git in a kept repository vs /usr/bin/git in the agent's own, ${ROUNDS} each, interleaved`);
    for (const command of ["status", "commit"]) {
      const kept = times.get(`${command} kept`) ?? [];
      const own = times.get(`${command} own`) ?? [];
      const [a, b] = [percentile(kept, 50), percentile(own, 50)];
      figures.push({
        figure: `git ${command} in a kept repository (through the keeper)`,
        unit: "ms",
        p50: a,
        tail: { label: "p95", value: percentile(kept, 95) },
        baseline: { label: "/usr/bin/git, the agent's repository", p50: b },
        samples: kept.length,
      });
      console.log(
        `  git ${command}: kept p50 ${a.toFixed(1)} ms, own p50 ${b.toFixed(1)} ms, ratio ${(a / b).toFixed(1)}x`,
      );
    }
    report("kept-git", figures);
  } finally {
    await docker("rm", "--force", container).catch(() => undefined);
    await docker("volume", "rm", "--force", volume).catch(() => undefined);
  }
}

main().catch((error: Error) => {
  console.error(error);
  process.exit(1);
});
