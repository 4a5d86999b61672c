// Benchmark (issues 39 and 43): what an idle sandbox costs its host. COUNT sandbox containers of the image,
// started as kept-git starts one (the tenant stacks' capabilities, no new privileges, a home volume), each
// with its entrypoint's programs running (sshd, the backup daemon, the git keeper, sandbox-sync) and
// nothing asked of them; beside COUNT containers of the same image whose only process is `sleep infinity`
// (no healthcheck), over the same window. CPU from each container's cgroup (the image's healthcheck, which
// docker runs in it every 30 s, included), and its processes' anonymous memory. Prints figures; asserts
// nothing (npm run bench).
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { SANDBOX_CAPABILITIES } from "../../lib/constants.js";
import { waitFor } from "../../lib/process.js";
import { buildSandboxImage } from "../../sandbox-image/build.js";
import { containerAnonBytes, containerCpuNs } from "./cgroup.js";
import { percentile, report } from "./report.js";

const run = promisify(execFile);
const COUNT = Number(process.env.BENCH_IDLE_SANDBOXES ?? 4);
/** Two of the healthcheck's intervals. */
const WINDOW_MS = Number(process.env.BENCH_IDLE_WINDOW_SECONDS ?? 60) * 1000;
if (!Number.isInteger(COUNT) || COUNT < 1 || COUNT > 32)
  throw new Error(`BENCH_IDLE_SANDBOXES must be 1-32, not ${process.env.BENCH_IDLE_SANDBOXES}`);
if (!(WINDOW_MS >= 10_000)) throw new Error("BENCH_IDLE_WINDOW_SECONDS must be at least 10");

const docker = async (...args: string[]) => (await run("docker", args)).stdout.trim();

/** Reads a container's figure, naming the container when its cgroup cannot be read. */
async function must(what: string, id: string, read: (id: string) => Promise<number | undefined>) {
  const value = await read(id);
  if (value === undefined) throw new Error(`no cgroup ${what} for container ${id} on this host`);
  return value;
}

async function main(): Promise<void> {
  const image = (await buildSandboxImage({ base: "local", log: () => undefined })).tag;
  const suffix = Math.random().toString(16).slice(2, 10);
  const names: string[] = [];
  const volumes: string[] = [];
  const sandboxes: string[] = [];
  const sleepers: string[] = [];
  const confined = [
    ...["--cap-drop", "ALL", ...SANDBOX_CAPABILITIES.flatMap((cap) => ["--cap-add", cap])],
    ...["--security-opt", "no-new-privileges"],
  ];
  try {
    for (let i = 0; i < COUNT; i++) {
      const volume = `bench-idle-${suffix}-${i}`;
      volumes.push(volume);
      await docker("volume", "create", volume);
      const name = `bench-idle-${suffix}-${i}`;
      names.push(name);
      sandboxes.push(
        await docker(
          "run",
          "--detach",
          "--name",
          name,
          ...confined,
          "--mount",
          `type=volume,src=${volume},dst=/home/agent`,
          image,
        ),
      );
      const sleeper = `bench-idle-sleep-${suffix}-${i}`;
      names.push(sleeper);
      sleepers.push(
        await docker(
          "run",
          "--detach",
          "--name",
          sleeper,
          ...confined,
          "--no-healthcheck",
          "--entrypoint",
          "sleep",
          image,
          "infinity",
        ),
      );
    }
    // Up: every supervised program running (the image's own healthcheck says so).
    for (const id of sandboxes)
      await waitFor(
        `sandbox ${id.slice(0, 12)}'s programs running`,
        120_000,
        async () =>
          await docker("exec", id, "/usr/local/sbin/sandbox-healthcheck").then(
            () => true,
            () => undefined,
          ),
      );
    // The first boot's work (the home's first backup, the keeper's set-up) done before the window.
    await new Promise((resolve) => setTimeout(resolve, 15_000));
    const all = [...sandboxes, ...sleepers];
    const before = await Promise.all(all.map((id) => must("CPU", id, containerCpuNs)));
    const started = performance.now();
    await new Promise((resolve) => setTimeout(resolve, WINDOW_MS));
    const minutes = (performance.now() - started) / 60_000;
    const after = await Promise.all(all.map((id) => must("CPU", id, containerCpuNs)));
    const memory = await Promise.all(all.map((id) => must("memory", id, containerAnonBytes)));
    // CPU milliseconds per minute of each container, and MiB.
    const cpu = all.map((_, i) => (after[i]! - before[i]!) / 1e6 / minutes);
    const mib = memory.map((bytes) => bytes / 2 ** 20);
    const [sandboxCpu, sleeperCpu] = [cpu.slice(0, COUNT), cpu.slice(COUNT)];
    const [sandboxMib, sleeperMib] = [mib.slice(0, COUNT), mib.slice(COUNT)];
    for (let i = 0; i < COUNT; i++)
      console.log(
        `sandbox ${i + 1}: ${sandboxCpu[i]!.toFixed(1)} ms CPU per minute, ${sandboxMib[i]!.toFixed(1)} MiB; ` +
          `sleep infinity ${sleeperCpu[i]!.toFixed(2)} ms, ${sleeperMib[i]!.toFixed(1)} MiB`,
      );
    const p50 = (values: number[]) => percentile(values, 50);
    const cores = (p50(sandboxCpu) / 60_000).toFixed(4);
    console.log(
      `one idle sandbox: ${p50(sandboxCpu).toFixed(1)} ms of CPU per minute (${cores} of a core; ` +
        `100 of them ${(Number(cores) * 100).toFixed(2)} cores), ${p50(sandboxMib).toFixed(1)} MiB`,
    );
    report("idle", [
      {
        figure: `idle sandbox container's CPU per minute (${COUNT} at once, ${(WINDOW_MS / 1000).toFixed(0)} s window, its healthcheck included)`,
        unit: "ms",
        p50: p50(sandboxCpu),
        tail: { label: "max", value: Math.max(...sandboxCpu) },
        baseline: { label: "the image's container running only sleep infinity", p50: p50(sleeperCpu) },
        samples: COUNT,
      },
      {
        figure: "idle sandbox container's memory (its processes' anonymous memory)",
        unit: "MiB",
        p50: p50(sandboxMib),
        tail: { label: "max", value: Math.max(...sandboxMib) },
        baseline: { label: "the image's container running only sleep infinity", p50: p50(sleeperMib) },
        samples: COUNT,
      },
    ]);
  } finally {
    if (names.length > 0) await docker("rm", "--force", ...names).catch(() => undefined);
    if (volumes.length > 0) await docker("volume", "rm", "--force", ...volumes).catch(() => undefined);
  }
}

await main();
