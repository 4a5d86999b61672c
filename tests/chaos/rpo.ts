// Backups' real recovery point (issue 18): a writer inside a sandbox appends the time to a file in the home
// every second; at a random moment the sandbox is killed (`docker kill`) and its home is lost with it (what
// a restore from backup is for: a kill alone loses nothing, the home stays): the container is removed and
// every file of the home deleted. The platform's own path then brings it back: the next operation's
// `up --refresh` makes the container again, and the entrypoint fills the empty home from the last backup
// (sandbox-backup restore). The seconds lost are the last line written before the kill minus the last line
// present after the restore.
import { tenantNames } from "../../components/tenant/names.js";
import { waitFor } from "../../lib/process.js";
import { docker, execIn } from "../helpers/containers.js";
import type { ChaosPlatform } from "./platform.js";

export interface RpoSummary {
  readonly intervalSeconds: number;
  /** The tenants' `backupAfterChangeSeconds` (0: the interval alone). */
  readonly afterChangeSeconds: number;
  readonly repetitions: number;
  /** Seconds of writes lost, per repetition. */
  readonly lostSeconds: number[];
  readonly p50: number;
  readonly max: number;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The nearest-rank percentile. */
export function percentileOf(values: readonly number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)] ?? Number.NaN;
}

async function waitSettled(chaos: ChaosPlatform, projectId: string): Promise<void> {
  const { rows } = await chaos.db.query<{ id: string }>(
    "select id from operations where project_id = $1 order by seq desc limit 1",
    [projectId],
  );
  const done = await chaos.settled(rows[0]!.id);
  if (done.state !== "succeeded")
    throw new Error(`${done.kind} of ${projectId}: ${done.state}: ${done.error}`);
}

/**
 * `repetitions` kills of one sandbox's writer, each at cycle × (1 + U[0,1)) seconds after the writer started,
 * where the cycle is the delay after a change when there is one (the writer changes the home every second, so
 * a backup follows every `afterChangeSeconds`), else the interval: a kill lands at a uniformly random phase
 * of one whole backup cycle. The tenants' schedule is the platform's (`tenants.backupIntervalSeconds`,
 * `tenants.backupAfterChangeSeconds`), given here to report it.
 */
export async function measureRpo(
  chaos: ChaosPlatform,
  options: {
    repetitions: number;
    intervalSeconds: number;
    afterChangeSeconds: number;
    random: () => number;
    log?: (line: string) => void;
  },
): Promise<RpoSummary> {
  const log = options.log ?? (() => undefined);
  const created = await chaos.api("POST", "/projects", { name: "chaos-rpo", idle_shutdown: false });
  if (created.status >= 300)
    throw new Error(`POST /projects: ${created.status} ${JSON.stringify(created.body)}`);
  const projectId: string = created.body.project_id;
  const names = tenantNames(projectId);
  const lostSeconds: number[] = [];
  try {
    await waitSettled(chaos, projectId);
    for (let i = 0; i < options.repetitions; i++) {
      const file = `rpo-${i}.log`;
      await waitFor("the home restored and initialised", 120_000, async () =>
        (await execIn(names.container, "test -f .sandbox_initialized")).code === 0 ? true : undefined,
      );
      const writer = await execIn(
        names.container,
        `nohup bash -c 'while :; do date +%s >> ~/${file}; sleep 1; done' >/dev/null 2>&1 &`,
      );
      if (writer.code !== 0) throw new Error(`starting the writer: ${writer.stderr}`);
      const startedAt = Math.floor(Date.now() / 1000);
      const cycle =
        options.afterChangeSeconds > 0
          ? Math.min(options.afterChangeSeconds, options.intervalSeconds)
          : options.intervalSeconds;
      const killAfter = cycle * 1000 * (1 + options.random());
      await sleep(killAfter);
      await docker("kill", names.container);
      const before = await docker(
        "run",
        "--rm",
        "--network",
        "none",
        "-v",
        `${names.volume}:/h:ro`,
        "--entrypoint",
        "tail",
        chaos.platform.config.tenants.image,
        "-n",
        "1",
        `/h/${file}`,
      );
      // The home is lost with the sandbox: only the backup is left. Its files are deleted, not its volume:
      // a tenant's home volume is a bind of its own filesystem (tenants.homeBytes), whose files a
      // `docker volume rm` would keep; emptied, it is what a lost disk comes back as, on either kind.
      await docker("rm", "--force", names.container);
      await docker(
        "run",
        "--rm",
        "--network",
        "none",
        "-v",
        `${names.volume}:/h`,
        "--user",
        "0",
        "--entrypoint",
        "find",
        chaos.platform.config.tenants.image,
        "/h",
        "-mindepth",
        "1",
        "-delete",
      );
      const start = await chaos.api("POST", `/projects/${projectId}/start`, {});
      if (start.status >= 300) throw new Error(`start: ${start.status} ${JSON.stringify(start.body)}`);
      await waitSettled(chaos, projectId);
      await waitFor("the home restored and initialised", 120_000, async () =>
        (await execIn(names.container, "test -f .sandbox_initialized")).code === 0 ? true : undefined,
      );
      // The home came back from the backup, not from what the kill left (a measurement of nothing).
      if (!/restoring \S+ into \/home\/agent/.test(await docker("logs", names.container)))
        throw new Error(`rpo ${i}: the new sandbox did not restore its home from the backup`);
      const after = await execIn(names.container, `tail -n 1 ${file} 2>/dev/null`);
      const lastBefore = Number(before.trim());
      const lastAfter = after.stdout.trim() ? Number(after.stdout.trim()) : startedAt - 1;
      const lost = lastBefore - lastAfter;
      lostSeconds.push(lost);
      log(
        `rpo ${i}: killed ${(killAfter / 1000).toFixed(1)} s after the writer started; last line written ${lastBefore},` +
          ` last restored ${after.stdout.trim() || "(none)"}: ${lost} s lost`,
      );
    }
  } finally {
    const removal = await chaos.api("DELETE", `/projects/${projectId}`);
    if (removal.status < 300) await waitSettled(chaos, projectId).catch(() => undefined);
  }
  return {
    intervalSeconds: options.intervalSeconds,
    afterChangeSeconds: options.afterChangeSeconds,
    repetitions: options.repetitions,
    lostSeconds,
    p50: percentileOf(lostSeconds, 50),
    max: Math.max(...lostSeconds),
  };
}
