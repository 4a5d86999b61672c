// Benchmark: E2B's own SDK (`e2b` 2.51.0, unchanged) against the platform, beside the platform's own exec API
// in the same run and on the same runtime: create → the first command's output (Sandbox.create, then
// commands.run, against POST /projects, then POST /projects/{id}/exec), and a command's round trip
// (commands.run("true") through envd against POST /projects/{id}/exec on the same sandbox). The SDK runs every
// command as `/bin/bash -l -c <command>`, so our API is asked to run that same argv: the difference is the
// protocol's and envd's, not a login shell's. Interleaved, so that both see the same load. Prints figures; asserts nothing (npm run bench). Goal: the SDK's round trip
// within 10 ms p50 of our own API's.
import { Sandbox, type SandboxOpts } from "e2b";
import { RuntimeConfig } from "../../stacks/config.js";
import { apiHarness } from "../helpers/api.js";
import { testPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { ms, percentile, report, timed, type Figure } from "./report.js";

const ROUNDS = Number(process.env.BENCH_E2B_ROUNDS ?? 100);
const CREATES = Number(process.env.BENCH_E2B_CREATES ?? 20);

async function main(): Promise<void> {
  const platform = await testPlatform({ subnetPool: "10.243.8.0/23", sshPortRange: [27980, 27985] });
  const h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice"],
    reconciler: true,
    server: {
      limits: {
        ...RuntimeConfig.parse({}),
        e2b: { defaultTimeoutSeconds: 3600, maxTimeoutSeconds: 3600, createWaitSeconds: 120 },
        // Creates one after another on both sides: past the default burst (10) with BENCH_E2B_CREATES > 5.
        rateLimits: {
          ...RuntimeConfig.parse({}).rateLimits,
          createProject: { burst: 1_000, perHour: 1_000 },
        },
      },
      // POST /projects waits for its sandbox as E2B's create does, so that both measure the same thing.
      projects: { createWaitSeconds: 120 },
    },
  });
  try {
    await h.app.listen({ port: 0, host: "127.0.0.1" });
    const base = `http://127.0.0.1:${(h.app.server.address() as { port: number }).port}`;
    const made = await h.as("alice", "POST", "/auth/api-keys", { name: "bench" });
    const key = (made.json() as { key: string }).key;
    const opts: SandboxOpts = {
      apiKey: key,
      apiUrl: `${base}/e2b`,
      sandboxUrl: `${base}/e2b`,
      requestTimeoutMs: 180_000,
    };
    const headers = { "x-api-key": key, "content-type": "application/json" };
    /** What the SDK's commands.run(line) asks envd to run. */
    const asTheSdkRuns = (line: string) => ["/bin/bash", "-l", "-c", line];
    const exec = async (id: string, command: string[]) => {
      const response = await fetch(`${base}/projects/${id}/exec`, {
        method: "POST",
        headers,
        body: JSON.stringify({ command }),
      });
      const body = (await response.json()) as { exit_code: number; stdout: string };
      if (body.exit_code !== 0) throw new Error(`exec: ${JSON.stringify(body)}`);
      return body.stdout;
    };
    const remove = async (id: string) => {
      await h.as("alice", "DELETE", `/projects/${id}`);
      await h.waitForStatus("alice", id, "gone", 300_000);
    };

    // Create → first output, one sandbox at a time (the pool is small), each deleted before the next.
    const sdkCreates: number[] = [];
    const apiCreates: number[] = [];
    // Each side's create alone (the answer that says running), the rest being its first command.
    const sdkCreateCalls: number[] = [];
    const apiCreateCalls: number[] = [];
    // Each side's projects, and when its create call was sent: the operation's own times say where it went.
    const calls: Record<"sdk" | "api", { id: string; sent: number; answered: number }[]> = {
      sdk: [],
      api: [],
    };
    /** One create through the SDK, then its first command; the sandbox removed afterwards. */
    const sdkCreate = async () => {
      let sandbox: Sandbox | undefined;
      const sent = Date.now();
      sdkCreates.push(
        await timed(async () => {
          sdkCreateCalls.push(await timed(async () => (sandbox = await Sandbox.create(opts))));
          calls.sdk.push({ id: sandbox!.sandboxId, sent, answered: Date.now() });
          const result = await sandbox!.commands.run("echo ready");
          if (result.stdout.trim() !== "ready") throw new Error(`sdk: ${JSON.stringify(result)}`);
        }),
      );
      await remove(sandbox!.sandboxId);
    };
    /** The same through our API: POST /projects (answered running), then exec. */
    const apiCreate = async (i: number) => {
      let id = "";
      const sent = Date.now();
      apiCreates.push(
        await timed(async () => {
          let created!: Response;
          apiCreateCalls.push(
            await timed(async () => {
              created = await fetch(`${base}/projects`, {
                method: "POST",
                headers,
                body: JSON.stringify({ name: `bench-${i}` }),
              });
            }),
          );
          const body = (await created.json()) as { project_id: string; status: string };
          if (created.status !== 201) throw new Error(`create: ${created.status} ${JSON.stringify(body)}`);
          id = body.project_id;
          calls.api.push({ id, sent, answered: sent + apiCreateCalls.at(-1)! });
          if ((await exec(id, asTheSdkRuns("echo ready"))).trim() !== "ready")
            throw new Error("api: no output");
        }),
      );
      await remove(id);
    };
    // Each goes first in every other pair: the very first create (caches cold) and whatever a removal leaves
    // running behind it fall on both sides alike.
    for (let i = 0; i < CREATES; i++) {
      if (i % 2 === 0) {
        await sdkCreate();
        await apiCreate(i);
      } else {
        await apiCreate(i);
        await sdkCreate();
      }
    }

    // Round trips on one sandbox: the SDK through envd, and our exec API, interleaved.
    const sandbox = await Sandbox.create(opts);
    const id = sandbox.sandboxId;
    const sdk = async () => {
      const result = await sandbox.commands.run("true");
      if (result.exitCode !== 0) throw new Error(`sdk: ${JSON.stringify(result)}`);
    };
    const api = () => exec(id, asTheSdkRuns("true"));
    for (let i = 0; i < 5; i++) await Promise.all([sdk(), api()]); // warm up
    const sdkTimes: number[] = [];
    const apiTimes: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      sdkTimes.push(await timed(sdk));
      apiTimes.push(await timed(api));
    }
    await remove(id);

    const figures: Figure[] = [
      {
        figure: "E2B SDK: Sandbox.create → first command output",
        unit: "ms",
        p50: percentile(sdkCreates, 50),
        tail: { label: "max", value: Math.max(...sdkCreates) },
        baseline: { label: "POST /projects + exec (bash -l -c)", p50: percentile(apiCreates, 50) },
        goal: "≤ 10 ms p50 over our API",
        samples: CREATES,
      },
      {
        figure: "E2B SDK: commands.run(`true`) round trip",
        unit: "ms",
        p50: percentile(sdkTimes, 50),
        tail: { label: "p99", value: percentile(sdkTimes, 99) },
        baseline: { label: "POST /projects/{id}/exec (bash -l -c)", p50: percentile(apiTimes, 50) },
        goal: "≤ 10 ms p50 over our API",
        samples: ROUNDS,
      },
    ];
    console.log(`create → first output, ${CREATES} each (alternating, each side first in every other pair):`);
    console.log(
      `  E2B SDK p50 ${ms(percentile(sdkCreates, 50))}, our API p50 ${ms(percentile(apiCreates, 50))}: ${ms(percentile(sdkCreates, 50) - percentile(apiCreates, 50))} over`,
    );
    // Each pair ran back to back under the same load: the median of their differences is the gap with the
    // run's drift taken out (the p50s above are each side's own).
    const paired = sdkCreates.map((sdkMs, i) => sdkMs - apiCreates[i]!);
    console.log(
      `  paired (each SDK create against the API create beside it): median ${ms(percentile(paired, 50))} over, from ${ms(Math.min(...paired))} to ${ms(Math.max(...paired))}`,
    );
    // Where each create call's time went, from its operation's own record: before the reconciler took it
    // (the request's own work, the queue), the stack's run, and from its end to the answer.
    for (const side of ["sdk", "api"] as const) {
      const parts = { before: [] as number[], run: [] as number[], after: [] as number[] };
      for (const { id, sent, answered } of calls[side]) {
        const { rows } = await h.db.query<{ created_at: Date; started_at: Date; finished_at: Date }>(
          "select created_at, started_at, finished_at from operations where project_id = $1 and kind = 'create'",
          [id],
        );
        const op = rows[0];
        if (!op) continue;
        parts.before.push(op.started_at.getTime() - sent);
        parts.run.push(op.finished_at.getTime() - op.started_at.getTime());
        parts.after.push(answered - op.finished_at.getTime());
      }
      console.log(
        `  ${side === "sdk" ? "E2B SDK" : "our API"} create call, p50 of its parts: until the reconciler took it ${ms(percentile(parts.before, 50))}, the stack's run ${ms(percentile(parts.run, 50))}, from its end to the answer ${ms(percentile(parts.after, 50))}`,
      );
    }
    const firsts = (totals: number[], calls: number[]) => totals.map((total, i) => total - calls[i]!);
    for (const [part, sdkPart, apiPart] of [
      ["the create call", sdkCreateCalls, apiCreateCalls],
      ["then the first command", firsts(sdkCreates, sdkCreateCalls), firsts(apiCreates, apiCreateCalls)],
    ] as const)
      console.log(
        `  ${part}: E2B SDK p50 ${ms(percentile(sdkPart, 50))}, our API p50 ${ms(percentile(apiPart, 50))}: ${ms(percentile(sdkPart, 50) - percentile(apiPart, 50))} over`,
      );
    console.log(`command round trip of \`true\`, ${ROUNDS} each, interleaved:`);
    for (const p of [50, 99]) {
      const [a, b] = [percentile(sdkTimes, p), percentile(apiTimes, p)];
      console.log(
        `  p${p}: E2B SDK ${ms(a)}, our API ${ms(b)}: ${ms(a - b)} over, ratio ${(a / b).toFixed(2)}x`,
      );
    }
    report("e2b", figures);
  } finally {
    await h.close();
    await platform.stop();
  }
}

main().catch((error: Error) => {
  console.error(error);
  process.exit(1);
});
