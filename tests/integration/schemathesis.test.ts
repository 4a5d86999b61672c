// Schemathesis, a fuzzer no one here wrote, against the API of a live runtime: it reads GET /openapi.json
// and sends every operation generated valid and invalid requests (its examples, coverage and fuzzing
// phases), then chains operations by the links it infers (the stateful phase: a created project is read,
// changed, stopped, deleted), all of it with a real access token over real HTTP. Every check is on: no
// server error, a status, content type, headers and body the document declares, a schema-valid request never
// refused, a schema-violating one never accepted, an undeclared method answered 405 with Allow, no operation
// open without a token, a deleted resource gone. The document, the validators and the handlers are thereby
// held to each other by a third party's reading of the document.
//
// The harness is the runtime's server as runtime/main.ts builds it, listening on loopback, on a Postgres
// database of its own; its user is an operator, so /admin/* is reached too. No reconciler runs: a create is
// recorded (tenant and operation rows), as api-conformance.test.ts keeps it, rather than a Pulumi stack per
// generated project. The project the file makes has a running sandbox, a container of the sandbox image
// under its name, so that exec, files, sync and ports reach their success paths; Schemathesis is given its
// id as one value of `id` among the generated ones.
//
// Schemathesis is pinned (scripts/toolchain/schemathesis/requirements.txt) and installed by scripts/test.sh
// into the cache. Its reports go to test-artifacts/schemathesis/ (JUnit and JSON); the run's own output is
// there too (schemathesis.txt), with the command that reproduces each failure.
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import { dockerClient } from "../../lib/docker-client.js";
import { cacheRoot, REPO_ROOT } from "../../lib/toolchain.js";
import { InviteCodes } from "../../runtime/api/invites.js";
import { databasePrerequisite } from "../../runtime/health.js";
import { driftSweepJob } from "../../runtime/jobs/drift.js";
import { JobScheduler } from "../../runtime/jobs/scheduler.js";
import { StackConfig } from "../../stacks/config.js";
import { apiHarness, emailOf, TEST_SECRET, type ApiHarness } from "../helpers/api.js";
import { docker } from "../helpers/containers.js";
import { testDatabase } from "../helpers/postgres.js";

const execFileAsync = promisify(execFile);

const REQUIREMENTS = path.join(REPO_ROOT, "scripts/toolchain/schemathesis/requirements.txt");
const HOOKS = path.join(REPO_ROOT, "tests/integration/schemathesis_hooks.py");
const REPORTS = path.join(REPO_ROOT, "test-artifacts", "schemathesis");

/** Generated cases per operation and phase, and the seed: the run is the same each time, and bounded. */
const MAX_EXAMPLES = 20;
const SEED = 47;
/** The whole run's deadline (it took 99 s here on 2 cores, 2,795 cases); past it, the run is stopped and fails. */
const RUN_TIMEOUT_MS = 12 * 60_000;

/** The `st` binary scripts/test.sh installed for the pinned version, or an error naming the fix. */
function schemathesisBin(): string {
  const version = /^schemathesis==([0-9.]+)$/m.exec(readFileSync(REQUIREMENTS, "utf8"))?.[1];
  if (!version) throw new Error(`${REQUIREMENTS} does not pin schemathesis`);
  const bin = path.join(cacheRoot(), `schemathesis-v${version}`, "bin", "st");
  if (!existsSync(bin))
    throw new Error(`Schemathesis ${version} not found at ${bin}; run the test set-up (scripts/test.sh)`);
  return bin;
}

/** The JSON report's verdict: what Schemathesis found, by check and operation. */
interface RunReport {
  readonly exit_code: number;
  readonly complete: boolean;
  readonly phases: Record<string, { status: string; skip_reason: string | null }> | null;
  readonly operations: { selected: number; tested: number; errored: number } | null;
  readonly test_cases: { generated: number; with_failures: number; errored: number };
  readonly failures: { code: string; title: string; count: number; operations: string[] }[];
  readonly errors: { title: string; count: number }[];
}

describe("Schemathesis against the live API", () => {
  let h: ApiHarness<"fuzzer">;
  let base: string;
  let projectId = "";
  let container = "";

  beforeAll(async () => {
    const database = await testDatabase("postgres");
    const config = StackConfig.parse({
      target: "local",
      host: { dataDir: database.dir, configDir: database.dir },
      tenants: { subnetPool: "10.239.4.0/22", sshPortRange: [28750, 28790] },
    });
    h = await apiHarness({
      database,
      config,
      users: ["fuzzer"],
      server: {
        prerequisites: [databasePrerequisite(database.db)],
        invites: new InviteCodes(TEST_SECRET),
        admins: [emailOf("fuzzer")],
        // The drift sweep only enqueues checks for a reconciler that does not run here.
        jobs: new JobScheduler(database.db, [driftSweepJob(database.db, 3_600_000)]),
        // Creates are recorded only (no reconciler), and each holds one of the /22's four subnets for good:
        // the quota is those four, so a create past them is refused 403 (the quota, a client's limit) and
        // never 503 (the host out of room), which Schemathesis counts as a server error whatever the document
        // says (tests/integration/api-projects.test.ts checks that 503). The throttles wide, so that their 429
        // (documented, and tested in api-limits) does not stand in for every other answer.
        limits: {
          registration: "open",
          projectQuota: 4,
          rateLimits: {
            register: { burst: 100_000, perHour: 100_000 },
            createProject: { burst: 100_000, perHour: 100_000 },
          },
        },
        projects: { docker: dockerClient() },
      },
    });
    const created = await h.as("fuzzer", "POST", "/projects", { name: "fuzzed" });
    expect(created.statusCode, created.body).toBe(202);
    projectId = created.json().project_id;
    // The sandbox no reconciler made: the sandbox image under the project's container name, as the runtime
    // finds it.
    container = tenantNames(projectId).container;
    await docker("rm", "-f", container).catch(() => undefined);
    await docker(
      ...["run", "-d", "--name", container, "--network", "none"],
      ...["--entrypoint", "sleep", config.tenants.image, "infinity"],
    );
    base = await h.app.listen({ port: 0, host: "127.0.0.1" });
  }, 180_000);

  afterAll(async () => {
    if (container) await docker("rm", "-f", container).catch(() => undefined);
    await h?.close();
  });

  it(
    "finds no server error, no schema-valid request refused, no schema-violating request accepted: every check green",
    async () => {
      mkdirSync(REPORTS, { recursive: true });
      const junit = path.join(REPORTS, "junit.xml");
      const json = path.join(REPORTS, "report.json");
      // The sandbox's project is one value of `id` among those generated, for the operations that need a
      // running sandbox; the rest reach their projects through the links of the stateful phase. Requests
      // come as from another host (X-Forwarded-For: a relayed request is never local), as an API client's
      // do: a caller on the runtime's own host may read /metrics without a token, anyone else may not.
      const configFile = path.join(REPORTS, "schemathesis.toml");
      writeFileSync(
        configFile,
        [
          `headers = { Authorization = "Bearer \${AGENT_SANDBOX_FUZZ_TOKEN}", "X-Forwarded-For" = "192.0.2.10" }`,
          "[dictionaries]",
          `sandbox = { values = ["${projectId}"] }`,
          "[[operations]]",
          `include-path-regex = "^/projects/\\\\{id\\\\}/(exec|processes|ports|sync|files)"`,
          `parameters = { "path.id" = { dictionary = "sandbox", probability = 0.8 } }`,
          // A refusal is a refusal whoever answers it: Node's 431 for a request line past 16 KiB (a query far
          // beyond its maxLength), Fastify's 413 for a body past its limit, beside the tool's own list.
          "[checks.negative_data_rejection]",
          `expected-statuses = [${[400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429, 431].map((s) => `"${s}"`).join(", ")}]`,
          "",
        ].join("\n"),
      );
      const args = [
        ...["--config-file", configFile, "run", `${base}/openapi.json`],
        ...["--checks", "all", "--phases", "examples,coverage,fuzzing,stateful"],
        ...["--max-examples", String(MAX_EXAMPLES), "--seed", String(SEED), "--generation-database", "none"],
        // One worker: Hypothesis's description of its own strategies parses Python source, which is not
        // safe across threads on Python 3.11 (an internal error of the tool, not a finding).
        ...["--workers", "1", "--request-timeout", "60", "--no-color"],
        ...["--report", "junit,json", "--report-junit-path", junit, "--report-json-path", json],
      ];
      const started = Date.now();
      const result = await execFileAsync(schemathesisBin(), args, {
        cwd: REPORTS,
        env: {
          ...process.env,
          AGENT_SANDBOX_FUZZ_TOKEN: h.users.fuzzer.token,
          SCHEMATHESIS_HOOKS: path.basename(HOOKS, ".py"),
          PYTHONPATH: path.dirname(HOOKS),
        },
        timeout: RUN_TIMEOUT_MS,
        maxBuffer: 64 << 20,
      }).then(
        ({ stdout }) => ({ code: 0, output: stdout }),
        (error: { code?: number; stdout?: string; stderr?: string }) => ({
          code: typeof error.code === "number" ? error.code : -1,
          output: `${error.stdout ?? ""}${error.stderr ?? ""}`,
        }),
      );
      writeFileSync(path.join(REPORTS, "schemathesis.txt"), result.output);
      console.log(`schemathesis: exit ${result.code} after ${Math.round((Date.now() - started) / 1000)} s`);

      expect(existsSync(json), `no JSON report; the run said:\n${result.output.slice(-4000)}`).toBe(true);
      const report = JSON.parse(readFileSync(json, "utf8")) as RunReport;
      console.log(
        `schemathesis: ${report.test_cases.generated} cases, ${report.operations?.tested} operations tested`,
      );
      // Each failure as its check and the operations it was seen on (schemathesis.txt has the requests).
      const found = [
        ...report.failures.map(
          (failure) =>
            `${failure.code} ${failure.title} (${failure.count}): ${failure.operations.join(", ")}`,
        ),
        ...report.errors.map((error) => `error: ${error.title} (${error.count})`),
      ];
      expect(found, `see test-artifacts/schemathesis/schemathesis.txt`).toEqual([]);
      expect(report.complete).toBe(true);
      expect(report.operations?.errored).toBe(0);
      expect(report.operations?.tested).toBe(report.operations?.selected);
      // The stateful phase ran, and every phase passed.
      expect(report.phases).toMatchObject({
        examples: { status: "success" },
        coverage: { status: "success" },
        fuzzing: { status: "success" },
        stateful: { status: "success" },
      });
      expect(result.code).toBe(0);
      expect(report.exit_code).toBe(0);
    },
    RUN_TIMEOUT_MS + 60_000,
  );
});
