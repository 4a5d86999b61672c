// Benchmark: fork ×10 of a running container sandbox (issue 44). A project with a 1 GiB home holding
// BENCH_FORK_DATA_MIB of random data is forked ten times through the API: the answer (the copies made under
// one freeze of the source), how long the source's writes were held, the bytes the copies take, and the wall
// time until all ten run. Beside it in the same run, the baselines: ten plain creates of the same user at
// once (what the forks' creates cost without a copy), and a bare `cp` of the source's image (what the host's
// disk does). Prints figures; asserts nothing (npm run bench). Moonshot: 10 copies of a 1 GiB home <= 5 s.
import { execFile } from "node:child_process";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import { tenantDiskPaths } from "../../components/tenant/names.js";
import { RuntimeConfig } from "../../stacks/config.js";
import { apiHarness } from "../helpers/api.js";
import { testPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { report, timed } from "./report.js";

const run = promisify(execFile);
const FORKS = 10;
const DATA_MIB = Number(process.env.BENCH_FORK_DATA_MIB ?? 128);

async function main(): Promise<void> {
  const platform = await testPlatform({
    subnetPool: "10.241.32.0/20",
    sshPortRange: [27740, 27770],
    leaseSeconds: 10,
    backupIntervalSeconds: 3600,
    homeBytes: 1024 * 1024 * 1024,
  });
  const h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice"],
    reconciler: true,
    server: {
      limits: RuntimeConfig.parse({
        projectQuota: 2 * FORKS + 2,
        rateLimits: { createProject: { burst: 100, perHour: 1000 } },
      }),
    },
  });
  const scratch = path.join(platform.config.host.dataDir, "bench-fork-cp.img");
  try {
    const created = await h.as("alice", "POST", "/projects", { name: "bench-fork" });
    const id = created.json().project_id as string;
    await h.waitForStatus("alice", id, "running", 600_000);
    await run("docker", [
      "exec",
      "-u",
      "agent",
      `sbx-${id}`,
      "sh",
      "-c",
      `head -c ${DATA_MIB * 2 ** 20} /dev/urandom > ~/data.bin && sync`,
    ]);

    // Fork ×10: the answer, then all ten running.
    let answer: Awaited<ReturnType<typeof h.as>> | undefined;
    const answerMs = await timed(async () => {
      answer = await h.as("alice", "POST", `/projects/${id}/fork`, { count: FORKS });
    });
    if (answer!.statusCode !== 202) throw new Error(`fork answered ${answer!.statusCode} ${answer!.body}`);
    const body = answer!.json() as {
      projects: { project_id: string }[];
      copy: { frozen_ms: number; total_ms: number; bytes_allocated: number };
    };
    const running = await timed(() =>
      Promise.all(body.projects.map((p) => h.waitForStatus("alice", p.project_id, "running", 900_000))),
    );
    const forkWall = answerMs + running;
    for (const p of body.projects) await h.as("alice", "DELETE", `/projects/${p.project_id}`);
    await Promise.all(body.projects.map((p) => h.waitForStatus("alice", p.project_id, "gone", 900_000)));

    // Baseline: ten plain creates at once (the forks' creates without a copy).
    const plain = await timed(async () => {
      const made = await Promise.all(
        Array.from({ length: FORKS }, (_, i) =>
          h.as("alice", "POST", "/projects", { name: `bench-plain-${i}` }),
        ),
      );
      await Promise.all(
        made.map((m) => h.waitForStatus("alice", m.json().project_id as string, "running", 900_000)),
      );
    });
    // Baseline: the host's disk, one bare copy of the source's image as the fork copies it.
    const disks = path.join(path.resolve(platform.config.host.dataDir), "disks");
    const image = tenantDiskPaths(disks, id, "home").imagePath;
    const bareCp = await timed(() => run("cp", ["--reflink=auto", "--sparse=always", image, scratch]));

    const mib = (bytes: number) => (bytes / 2 ** 20).toFixed(0);
    console.log(
      `fork ×${FORKS} of a running container sandbox, 1 GiB home holding ${DATA_MIB} MiB (issue 44)`,
    );
    console.log(
      `  answer (the ${FORKS} copies made): ${answerMs.toFixed(0)} ms; the source's writes held ${body.copy.frozen_ms} ms; copies ${body.copy.total_ms} ms, ${mib(body.copy.bytes_allocated)} MiB written`,
    );
    console.log(`  all ${FORKS} running: ${forkWall.toFixed(0)} ms after the request`);
    console.log(`  baseline: ${FORKS} plain creates at once to running: ${plain.toFixed(0)} ms`);
    console.log(`  baseline: one bare cp of the image: ${bareCp.toFixed(0)} ms`);
    console.log(`  ratio (fork ×${FORKS} wall / ${FORKS} plain creates): ${(forkWall / plain).toFixed(2)}x`);
    report("fork", [
      {
        figure: `fork ×${FORKS} of a running container (1 GiB home, ${DATA_MIB} MiB in it): request → all running`,
        unit: "ms",
        p50: forkWall,
        baseline: { label: `${FORKS} plain creates at once`, p50: plain },
        goal: "≤ 5000 ms",
        samples: 1,
      },
      {
        figure: `fork ×${FORKS}: the API's answer (the copies made, under one freeze)`,
        unit: "ms",
        p50: answerMs,
        baseline: { label: "one bare cp of the image", p50: bareCp },
        goal: "—",
        samples: 1,
      },
      {
        figure: `fork ×${FORKS}: the source's writes held (fsfreeze)`,
        unit: "ms",
        p50: body.copy.frozen_ms,
        goal: "—",
        samples: 1,
      },
      {
        figure: `fork ×${FORKS}: written by the copies`,
        unit: "MiB",
        p50: body.copy.bytes_allocated / 2 ** 20,
        baseline: { label: `${FORKS} full copies of the 1 GiB image`, p50: FORKS * 1024 },
        goal: "—",
        samples: 1,
      },
    ]);
  } finally {
    await fs.rm(scratch, { force: true });
    await h.close();
    await platform.stop();
  }
}

main().catch((error: Error) => {
  console.error(error);
  process.exit(1);
});
