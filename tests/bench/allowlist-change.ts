// Benchmark: an allowlist change on a running sandbox (PATCH /projects/{id}), from the request to the
// moment the sandbox's own requests to the newly allowed host go through. A probe inside the sandbox asks
// for the host every 50 ms through the proxy; its own round trip (a request Squid allows) is the baseline
// measured in the same run. Prints figures; asserts nothing (npm run bench). Moonshot (issue 15): <= 1 s p50.
import { spawn } from "node:child_process";
import { tenantNames } from "../../components/tenant/names.js";
import { waitFor } from "../../lib/process.js";
import { apiHarness } from "../helpers/api.js";
import { testPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { startWorld, WORLD_ADDRESS } from "../helpers/world.js";
import { report } from "./report.js";

const CHANGES = Number(process.env.BENCH_ALLOWLIST_CHANGES ?? 10);
const HOSTS = ["bench-a.sandbox.test", "bench-b.sandbox.test"] as const;

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
};
const figures = (values: number[]) =>
  `p50 ${percentile(values, 50).toFixed(0)} ms, min ${Math.min(...values).toFixed(0)}, max ${Math.max(...values).toFixed(0)}`;

async function main(): Promise<void> {
  const world = await startWorld();
  const platform = await testPlatform(
    { subnetPool: "10.241.12.0/23", sshPortRange: [27650, 27655], leaseSeconds: 10 },
    { hosts: Object.fromEntries(HOSTS.map((name) => [name, WORLD_ADDRESS])) },
  );
  const h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice"],
    reconciler: true,
  });
  try {
    const created = await h.as("alice", "POST", "/projects", { name: "bench", allowlist: [HOSTS[0]] });
    const id = created.json().project_id as string;
    await h.waitForStatus("alice", id, "running", 600_000);

    // The probe: one line per request, "<unix ms> <host> <status> <seconds the request took>".
    const script = `while :; do for h in ${HOSTS.join(" ")}; do
      r=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' --max-time 2 http://$h/)
      echo "$(date +%s%3N) $h $r"; done; sleep 0.05; done`;
    const probe = spawn("docker", ["exec", "-u", "agent", tenantNames(id).container, "bash", "-c", script]);
    const lines: { at: number; host: string; status: string; seconds: number }[] = [];
    let partial = "";
    probe.stdout.on("data", (chunk: Buffer) => {
      const text = partial + chunk.toString();
      const complete = text.split("\n");
      partial = complete.pop() ?? "";
      for (const line of complete) {
        const [at, host, status, seconds] = line.trim().split(" ");
        if (at && host && status) lines.push({ at: Number(at), host, status, seconds: Number(seconds) });
      }
    });

    const enforced: number[] = [];
    const answered: number[] = [];
    const applied: number[] = [];
    for (let i = 1; i <= CHANGES; i++) {
      const target = HOSTS[i % 2]!;
      const started = Date.now();
      const answer = await h.as("alice", "PATCH", `/projects/${id}`, { allowlist: [target] });
      answered.push(Date.now() - started);
      const operation = answer.json().operation.id as string;
      const seen = await waitFor(`${target} allowed`, 120_000, async () =>
        lines.find((l) => l.at >= started && l.host === target && l.status === "200"),
      );
      enforced.push(seen.at - started);
      await waitFor("the update", 120_000, async () => {
        const { rows } = await h.db.query<{ state: string; finished_at: Date | null }>(
          "select state, finished_at from operations where id = $1",
          [operation],
        );
        return rows[0]?.state === "succeeded" ? rows[0].finished_at! : undefined;
      }).then((finished) => applied.push(finished.getTime() - started));
    }
    probe.kill();
    const roundTrips = lines.filter((l) => l.status === "200").map((l) => l.seconds * 1000);
    const base = percentile(roundTrips, 50);
    const p50 = percentile(enforced, 50);
    console.log(
      `allowlist change on a running sandbox, ${CHANGES} changes (issue 15; moonshot <= 1000 ms p50)`,
    );
    console.log(`  PATCH answered:                   ${figures(answered)}`);
    console.log(`  PATCH -> new host allowed inside: ${figures(enforced)}`);
    console.log(`  PATCH -> update operation done:   ${figures(applied)}`);
    console.log(`  baseline, one allowed request through the proxy from inside: p50 ${base.toFixed(1)} ms`);
    console.log(`  ratio (enforced p50 / baseline p50): ${(p50 / base).toFixed(0)}x`);
    report("allowlist-change", [
      {
        figure: "allowlist PATCH → new host allowed inside",
        unit: "ms",
        p50,
        tail: { label: "max", value: Math.max(...enforced) },
        baseline: { label: "one request through the proxy", p50: base },
        goal: "≤ 1000 ms p50",
        samples: enforced.length,
      },
    ]);
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
