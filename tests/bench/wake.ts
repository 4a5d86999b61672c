// Benchmark: pause and wake of a container sandbox (issue 44). A running project is paused as E2B's pause
// does (a stop of the platform's own), then woken by the next exec through the API (`node -v`): from the
// request to the command's output. Beside it in the same run, the bare engine's part: `docker stop`, then
// `docker start` + `docker exec node -v` of a container of the same image. Then the same for a microVM
// project where this host runs them (under TCG here), whose stop keeps its memory: the wake resumes it, and
// a process started before the pause is checked to live on; its baseline, in the same run, is the same
// project woken after its memory image was removed (a cold boot through the same path). Prints figures;
// asserts nothing (npm run bench). Moonshot: resume to an answering sandbox <= 1 s for a container, <= 1.5 s
// for a microVM under TCG.
import { execFile } from "node:child_process";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { detectMicroVmSupport } from "../../runtime/microvm-support.js";
import { tenantDefaults } from "../../runtime/tenants/config.js";
import { requestOperation } from "../../runtime/tenants/service.js";
import { E2B_PAUSE, operationSettled } from "../../runtime/tenants/wake.js";
import { apiHarness } from "../helpers/api.js";
import { testPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { percentile, report, timed } from "./report.js";

const run = promisify(execFile);
const ROUNDS = Number(process.env.BENCH_WAKE_ROUNDS ?? 10);
/** A microVM's rounds (each a suspend and a resume under TCG); 0 leaves the microVM out. */
const MICROVM_ROUNDS = Number(process.env.BENCH_WAKE_MICROVM_ROUNDS ?? 3);

const figures = (values: number[]) =>
  `p50 ${percentile(values, 50).toFixed(0)} ms, min ${Math.min(...values).toFixed(0)}, max ${Math.max(...values).toFixed(0)}`;

async function main(): Promise<void> {
  const platform = await testPlatform({
    subnetPool: "10.241.14.0/23",
    sshPortRange: [27660, 27665],
    leaseSeconds: 10,
  });
  const microvm =
    MICROVM_ROUNDS > 0
      ? await detectMicroVmSupport({ repoRoot: REPO_ROOT, dataDir: platform.config.host.dataDir })
      : undefined;
  const h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice"],
    reconciler: true,
    ...(microvm?.available
      ? { server: { projects: { defaults: { ...tenantDefaults(platform.config), microvm: () => microvm } } } }
      : {}),
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
    if (!microvm) return;
    if (!microvm.available) {
      console.log(`  a microVM's pause and wake: not measured, ${microvm.reason}`);
      return;
    }
    await benchMicroVm(h, microvm.host.accelerator, microvm.host.stateRoot);
  } finally {
    await run("docker", ["rm", "-f", bareName]).catch(() => undefined);
    await h.close();
    await platform.stop();
  }
}

/**
 * A microVM project paused (its memory kept) and woken by an exec, MICROVM_ROUNDS times; a counting process
 * started before the first pause must live through every one. Then as many wakes with the memory image
 * removed before each: the cold boot the same wake would be without it.
 */
async function benchMicroVm(
  h: Awaited<ReturnType<typeof apiHarness<"alice">>>,
  accelerator: string,
  stateRoot: string,
): Promise<void> {
  const created = await h.as("alice", "POST", "/projects", { name: "bench-wake-vm", backend: "microvm" });
  if (created.statusCode !== 202)
    throw new Error(`the microVM's create: ${created.statusCode} ${created.body}`);
  const id = created.json().project_id as string;
  await h.waitForStatus("alice", id, "running", 900_000);
  const exec = async (command: string[]) => {
    const answer = await h.as("alice", "POST", `/projects/${id}/exec`, { command, timeout_s: 120 });
    const body = answer.json() as { exit_code?: number; stdout?: string };
    if (answer.statusCode !== 200 || body.exit_code !== 0)
      throw new Error(`exec ${command.join(" ")}: ${answer.statusCode} ${answer.body}`);
    return body.stdout ?? "";
  };
  const pid = (
    await exec([
      "bash",
      "-c",
      "setsid -f bash -c 'echo $$ > /dev/shm/pid; while :; do sleep 1; done' </dev/null >/dev/null 2>&1; sleep 0.5; cat /dev/shm/pid",
    ])
  ).trim();
  const round = async (i: number, cold: boolean) => {
    const pause = await timed(async () => {
      const { operation } = await requestOperation(h.db, id, "stop", `${E2B_PAUSE}${id}-vm-${cold}-${i}`);
      await operationSettled(h.db, operation, { timeoutMs: 300_000 });
    });
    if (cold) await fs.rm(path.join(stateRoot, id, "memory.state"));
    let out = "";
    const wake = await timed(async () => {
      out = await exec(["node", "-v"]);
    });
    if (!out.startsWith("v")) throw new Error(`round ${i}: the woken exec printed ${out}`);
    const alive = (
      await exec(["bash", "-c", `kill -0 ${pid} 2>/dev/null && echo alive || echo gone`])
    ).trim();
    if (alive !== (cold ? "gone" : "alive"))
      throw new Error(
        `round ${i}: the process from before the pause is ${alive} after a ${cold ? "cold" : "kept"} wake`,
      );
    return { pause, wake };
  };
  const kept: { pause: number; wake: number }[] = [];
  for (let i = 0; i < MICROVM_ROUNDS; i++) kept.push(await round(i, false));
  const cold: { pause: number; wake: number }[] = [];
  for (let i = 0; i < MICROVM_ROUNDS; i++) cold.push(await round(i, true));
  const wakes = kept.map((r) => r.wake);
  const colds = cold.map((r) => r.wake);
  console.log(
    `pause and wake of a microVM sandbox (${accelerator}), ${MICROVM_ROUNDS} rounds (moonshot wake <= 1500 ms under TCG)`,
  );
  console.log(`  pause (a platform stop keeping its memory):    ${figures(kept.map((r) => r.pause))}`);
  console.log(`  wake: exec of node -v, its processes resumed:  ${figures(wakes)}`);
  console.log(`  baseline: the same wake, memory image removed: ${figures(colds)}`);
  console.log(
    `  ratio (resumed p50 / cold p50): ${(percentile(wakes, 50) / percentile(colds, 50)).toFixed(2)}x`,
  );
  report("wake-microvm", [
    {
      figure: `wake a paused microVM (${accelerator}): exec node -v → output, processes kept`,
      unit: "ms",
      p50: percentile(wakes, 50),
      tail: { label: "max", value: Math.max(...wakes) },
      baseline: { label: "the same wake booting cold", p50: percentile(colds, 50) },
      goal: "≤ 1500 ms",
      samples: wakes.length,
    },
  ]);
  await h.as("alice", "DELETE", `/projects/${id}`);
  await h.waitForStatus("alice", id, "gone", 600_000);
}

main().catch((error: Error) => {
  console.error(error);
  process.exit(1);
});
