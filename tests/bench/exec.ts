// Benchmark (issue 23): the exec API's round trip for `true` (POST /projects/{id}/exec over HTTP, p50/p99)
// beside a bare `docker exec` of the same container in the same run, and a file write of 1 MB and 100 MB
// (PUT /projects/{id}/files/content) beside `docker cp` of the same bytes. Prints figures; asserts nothing
// (npm run bench). Moonshot: exec <= 20 ms over `docker exec`.
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { tenantNames } from "../../components/tenant/names.js";
import { RuntimeConfig } from "../../stacks/config.js";
import { apiHarness } from "../helpers/api.js";
import { testPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { ms, percentile, report, timed, type Figure } from "./report.js";

const run = promisify(execFile);
const ROUNDS = Number(process.env.BENCH_EXEC_ROUNDS ?? 100);
const WRITES = Number(process.env.BENCH_FILE_WRITES ?? 5);

async function main(): Promise<void> {
  const platform = await testPlatform({ subnetPool: "10.243.4.0/23", sshPortRange: [27970, 27975] });
  const h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice"],
    reconciler: true,
    server: {
      limits: {
        ...RuntimeConfig.parse({}),
        files: { ...RuntimeConfig.parse({}).files, maxBytes: 128 * 1024 * 1024 },
      },
    },
  });
  const scratch = mkdtempSync(path.join(tmpdir(), "bench-exec-"));
  try {
    const created = await h.as("alice", "POST", "/projects", { name: "bench-exec" });
    const id = created.json().project_id as string;
    await h.waitForStatus("alice", id, "running", 600_000);
    const container = tenantNames(id).container;
    await h.app.listen({ port: 0, host: "127.0.0.1" });
    const base = `http://127.0.0.1:${(h.app.server.address() as { port: number }).port}/projects/${id}`;
    const headers = { authorization: `Bearer ${h.users.alice.token}` };

    const api = async () => {
      const response = await fetch(`${base}/exec`, {
        method: "POST",
        headers: { ...headers, "content-type": "application/json" },
        body: JSON.stringify({ command: ["true"] }),
      });
      const body = (await response.json()) as { exit_code: number };
      if (body.exit_code !== 0) throw new Error(`exec: ${JSON.stringify(body)}`);
    };
    const bare = () => run("docker", ["exec", "-u", "agent", container, "true"]);
    for (let i = 0; i < 5; i++) await Promise.all([api(), bare()]); // warm up
    const apiTimes: number[] = [];
    const bareTimes: number[] = [];
    // Interleaved, so that both see the same load on the host.
    for (let i = 0; i < ROUNDS; i++) {
      apiTimes.push(await timed(api));
      bareTimes.push(await timed(bare));
    }
    console.log(
      `exec round trip of \`true\`, ${ROUNDS} each, interleaved (issue 23; moonshot <= 20 ms over docker exec)`,
    );
    const figures: Figure[] = [
      {
        figure: "exec `true` round trip through the API",
        unit: "ms",
        p50: percentile(apiTimes, 50),
        tail: { label: "p99", value: percentile(apiTimes, 99) },
        baseline: { label: "docker exec CLI", p50: percentile(bareTimes, 50) },
        goal: "≤ 20 ms over docker exec",
        samples: ROUNDS,
      },
    ];
    for (const p of [50, 99]) {
      const [a, b] = [percentile(apiTimes, p), percentile(bareTimes, p)];
      console.log(
        `  p${p}: API ${ms(a)}, docker exec ${ms(b)}: ${ms(a - b)} over, ratio ${(a / b).toFixed(2)}x`,
      );
    }

    for (const size of [1024 * 1024, 100 * 1024 * 1024]) {
      const bytes = randomBytes(size);
      const local = path.join(scratch, "blob.bin");
      writeFileSync(local, bytes);
      const apiWrites: number[] = [];
      const cpWrites: number[] = [];
      for (let i = 0; i < WRITES; i++) {
        apiWrites.push(
          await timed(async () => {
            const response = await fetch(`${base}/files/content?path=bench.bin`, {
              method: "PUT",
              headers: { ...headers, "content-type": "application/octet-stream" },
              body: bytes,
            });
            if (response.status !== 200)
              throw new Error(`write: ${response.status} ${await response.text()}`);
          }),
        );
        cpWrites.push(await timed(() => run("docker", ["cp", local, `${container}:/home/agent/cp.bin`])));
      }
      const [a, b] = [percentile(apiWrites, 50), percentile(cpWrites, 50)];
      figures.push({
        figure: `file write of ${size / (1024 * 1024)} MB through the API`,
        unit: "ms",
        p50: a,
        tail: { label: "max", value: Math.max(...apiWrites) },
        baseline: { label: "docker cp", p50: b },
        samples: WRITES,
      });
      console.log(
        `file write of ${size / (1024 * 1024)} MB, ${WRITES} each: API p50 ${ms(a)} (${(((size / a) * 1000) / 1e6).toFixed(0)} MB/s), docker cp p50 ${ms(b)}; ratio ${(a / b).toFixed(2)}x`,
      );
    }
    report("exec", figures);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
    await h.close();
    await platform.stop();
  }
}

main().catch((error: Error) => {
  console.error(error);
  process.exit(1);
});
