// Benchmark: a container sandbox's bandwidth caps (issue 45). One sandbox downloads a file from the test's
// "internet" through its proxy and uploads one there, uncapped and under each cap (PATCH bandwidth, tc on its
// bridge), several times each; prints the rates curl measured inside and how close each capped rate is to its
// cap. Asserts nothing (npm run bench).
import { tenantNames } from "../../components/tenant/names.js";
import { waitFor } from "../../lib/process.js";
import { apiHarness } from "../helpers/api.js";
import { execIn } from "../helpers/containers.js";
import { testPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { startWorld, WORLD_ADDRESS } from "../helpers/world.js";
import { percentile, report } from "./report.js";

const HOST = "bench-bandwidth.sandbox.test";
const ROUNDS = Number(process.env.BENCH_BANDWIDTH_ROUNDS ?? 3);
const CAPS_KBPS = [2000, 8000, 50_000];
/** About six seconds at each cap: the bucket's 40 ms is lost in it. */
const bytesFor = (kbps: number | undefined) => (kbps === undefined ? 64_000_000 : Math.round(kbps * 125 * 6));

async function main(): Promise<void> {
  const world = await startWorld();
  const platform = await testPlatform(
    { subnetPool: "10.241.16.0/23", sshPortRange: [27670, 27675], leaseSeconds: 10 },
    { hosts: { [HOST]: WORLD_ADDRESS } },
  );
  const h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice"],
    reconciler: true,
  });
  try {
    const created = await h.as("alice", "POST", "/projects", { name: "bench", allowlist: [HOST] });
    const id = created.json().project_id as string;
    await h.waitForStatus("alice", id, "running", 600_000);
    const container = tenantNames(id).container;
    /** Sets the caps and waits for the update that applies them. */
    const cap = async (kbps: number | undefined) => {
      const bandwidth = kbps === undefined ? null : { download_kbps: kbps, upload_kbps: kbps };
      const answer = await h.as("alice", "PATCH", `/projects/${id}`, { bandwidth });
      if (answer.statusCode === 200) return; // the caps it had: nothing to apply
      if (answer.statusCode !== 202) throw new Error(`PATCH bandwidth: ${answer.statusCode} ${answer.body}`);
      const operation = answer.json().operation.id as string;
      await waitFor("the update", 300_000, async () => {
        const { rows } = await h.db.query<{ state: string; error: string | null }>(
          "select state, error from operations where id = $1",
          [operation],
        );
        if (rows[0]?.state === "failed") throw new Error(`the update failed: ${rows[0].error}`);
        return rows[0]?.state === "succeeded" ? true : undefined;
      });
    };
    /** Rates in kbit/s, as curl measured them inside the sandbox. */
    const measure = async (kbps: number | undefined) => {
      const bytes = bytesFor(kbps);
      const got = await execIn(
        container,
        `curl -sf -o /dev/null -w '%{speed_download}' --max-time 100 http://${HOST}/bytes/${bytes} && echo &&
         head -c ${Math.round(bytes / 2)} /dev/zero | curl -sf -o /dev/null -T - -w '%{speed_upload}' --max-time 100 http://${HOST}/sink`,
      );
      if (got.code !== 0) throw new Error(`curl: ${got.stderr}`);
      const [down, up] = got.stdout.split("\n").map((line) => (Number(line) * 8) / 1000);
      return { down: down!, up: up! };
    };
    const rows: { cap: number | undefined; down: number; up: number }[] = [];
    for (const kbps of [undefined, ...CAPS_KBPS]) {
      await cap(kbps);
      const samples = [];
      for (let round = 0; round < ROUNDS; round++) samples.push(await measure(kbps));
      rows.push({
        cap: kbps,
        down: percentile(
          samples.map((s) => s.down),
          50,
        ),
        up: percentile(
          samples.map((s) => s.up),
          50,
        ),
      });
    }
    await cap(undefined);
    const mbit = (kbps: number) => `${(kbps / 1000).toFixed(1)} Mbit/s`;
    console.log(
      `bandwidth caps (issue 45): p50 of ${ROUNDS} transfers through the proxy, inside the sandbox`,
    );
    for (const row of rows)
      console.log(
        `  ${row.cap === undefined ? "uncapped       " : `cap ${mbit(row.cap).padStart(11)}`}: download ${mbit(row.down).padStart(12)}, upload ${mbit(row.up).padStart(12)}` +
          (row.cap === undefined
            ? ""
            : ` (${((row.down / row.cap) * 100).toFixed(0)}% and ${((row.up / row.cap) * 100).toFixed(0)}% of the cap)`),
      );
    const uncapped = rows[0]!;
    report(
      "bandwidth",
      rows.slice(1).flatMap((row) => [
        {
          figure: `download under a ${mbit(row.cap!)} cap`,
          unit: "MB/s" as const,
          p50: row.down / 8000,
          baseline: { label: "uncapped", p50: uncapped.down / 8000 },
          goal: `≤ ${(row.cap! / 8000).toFixed(2)} MB/s (the cap)`,
          samples: ROUNDS,
        },
        {
          figure: `upload under a ${mbit(row.cap!)} cap`,
          unit: "MB/s" as const,
          p50: row.up / 8000,
          baseline: { label: "uncapped", p50: uncapped.up / 8000 },
          goal: `≤ ${(row.cap! / 8000).toFixed(2)} MB/s (the cap)`,
          samples: ROUNDS,
        },
      ]),
    );
  } finally {
    await h.close();
    await platform.stop();
    await world.stop();
  }
}

main().catch((error: Error) => {
  console.error(error);
  process.exit(1);
});
