// Benchmark: pause and wake of a container sandbox (issue 44). A running project is paused as E2B's pause
// does (a stop of the platform's own), then woken by the next exec through the API (`node -v`): from the
// request to the command's output. Beside it in the same run, the bare engine's part: `docker stop`, then
// `docker start` + `docker exec node -v` of a container of the same image. Prints figures; asserts nothing
// (npm run bench). Moonshot: resume to an answering sandbox <= 1 s for a container.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { requestOperation } from "../../runtime/tenants/service.js";
import { E2B_PAUSE, operationSettled } from "../../runtime/tenants/wake.js";
import { apiHarness } from "../helpers/api.js";
import { testPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { percentile, report, timed } from "./report.js";

const run = promisify(execFile);
const ROUNDS = Number(process.env.BENCH_WAKE_ROUNDS ?? 10);

const figures = (values: number[]) =>
  `p50 ${percentile(values, 50).toFixed(0)} ms, min ${Math.min(...values).toFixed(0)}, max ${Math.max(...values).toFixed(0)}`;

async function main(): Promise<void> {
  const platform = await testPlatform({
    subnetPool: "10.241.14.0/24",
    sshPortRange: [27660, 27665],
    leaseSeconds: 10,
  });
  const h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice"],
    reconciler: true,
  });
  const bareName = `bench-wake-bare-${process.pid}`;
  try {
    const created = await h.as("alice", "POST", "/projects", { name: "bench-wake" });
    const id = created.json().project_id as string;
    await h.waitForStatus("alice", id, "running", 600_000);
    const image = platform.config.tenants.image;

    const paused: number[] = [];
    const woken: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      paused.push(
        await timed(async () => {
          const { operation } = await requestOperation(h.db, id, "stop", `${E2B_PAUSE}${id}-bench-${i}`);
          await operationSettled(h.db, operation, { timeoutMs: 300_000 });
        }),
      );
      let answer: Awaited<ReturnType<typeof h.as>> | undefined;
      woken.push(
        await timed(async () => {
          answer = await h.as("alice", "POST", `/projects/${id}/exec`, { command: ["node", "-v"] });
        }),
      );
      const body = answer!.json() as { exit_code?: number; stdout?: string };
      if (answer!.statusCode !== 200 || body.exit_code !== 0 || !body.stdout?.startsWith("v"))
        throw new Error(`round ${i}: the woken exec answered ${answer!.statusCode} ${answer!.body}`);
    }
    const starts = await h.db.query<{ created_at: Date; finished_at: Date }>(
      "select created_at, finished_at from operations where project_id = $1 and kind = 'start'",
      [id],
    );
    const startMs = starts.rows.map((o) => o.finished_at.getTime() - o.created_at.getTime());

    // The bare engine's part: the same image's container stopped and started, then node -v in it.
    // --init: its PID 1 ends on SIGTERM, as the sandbox's does (a bare `sleep` would wait out the stop's 10 s).
    await run("docker", [
      "run",
      "-d",
      "--init",
      "--name",
      bareName,
      "--entrypoint",
      "sleep",
      image,
      "infinity",
    ]);
    const bareStop: number[] = [];
    const bareWake: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      bareStop.push(await timed(() => run("docker", ["stop", "-t", "10", bareName])));
      bareWake.push(
        await timed(async () => {
          await run("docker", ["start", bareName]);
          await run("docker", ["exec", bareName, "node", "-v"]);
        }),
      );
    }

    const wakeP50 = percentile(woken, 50);
    const bareP50 = percentile(bareWake, 50);
    console.log(
      `pause and wake of a container sandbox, ${ROUNDS} rounds (issue 44; moonshot wake <= 1000 ms)`,
    );
    console.log(`  pause (a platform stop, queued -> done):       ${figures(paused)}`);
    console.log(`  wake: exec of node -v on the paused sandbox:   ${figures(woken)}`);
    console.log(`    of which its start operation (queued -> done): ${figures(startMs)}`);
    console.log(`  baseline: docker stop:                          ${figures(bareStop)}`);
    console.log(`  baseline: docker start + docker exec node -v:   ${figures(bareWake)}`);
    console.log(`  ratio (wake p50 / bare start + exec p50): ${(wakeP50 / bareP50).toFixed(1)}x`);
    report("wake", [
      {
        figure: "wake a paused container: exec node -v → output",
        unit: "ms",
        p50: wakeP50,
        tail: { label: "max", value: Math.max(...woken) },
        baseline: { label: "docker start + docker exec", p50: bareP50 },
        goal: "≤ 1000 ms",
        samples: woken.length,
      },
      {
        figure: "pause a container (platform stop)",
        unit: "ms",
        p50: percentile(paused, 50),
        tail: { label: "max", value: Math.max(...paused) },
        baseline: { label: "docker stop", p50: percentile(bareStop, 50) },
        goal: "—",
        samples: paused.length,
      },
    ]);
  } finally {
    await run("docker", ["rm", "-f", bareName]).catch(() => undefined);
    await h.close();
    await platform.stop();
  }
}

main().catch((error: Error) => {
  console.error(error);
  process.exit(1);
});
