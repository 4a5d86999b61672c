// OpenTelemetry traces (issue 43, lib/telemetry.ts): a runtime process with `runtime.telemetry` exports its
// spans over OTLP/HTTP to a receiver on loopback. A claim from the warm pool, a command in the claimed
// sandbox, and a cold create are each one trace: the request with its queries and the pool's claim under
// it; the operation from its queueing, with its wait, the stack's readiness and the engine's run (its start,
// each resource step, its finish) under it; the pool's readiness check of a member.
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../../lib/process.js";
import { startRuntime, type RuntimeProcess } from "../helpers/api.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { descendants, otlpReceiver, type OtlpReceiver, type ReceivedSpan } from "../helpers/otlp-receiver.js";
import { signedInClient } from "../bench/runtime-client.js";

let platform: TestPlatform;
let receiver: OtlpReceiver;
let runtime: RuntimeProcess;
let api: Awaited<ReturnType<typeof signedInClient>>["api"];

const metric = async (name: string) => {
  const text = await (await fetch(`${runtime.base}/metrics`)).text();
  return Number(new RegExp(`^${name} (\\d+)`, "m").exec(text)?.[1] ?? Number.NaN);
};
/** The spans received so far named `name` (with these attributes), waiting up to a minute for one. */
const spansNamed = (name: string, attributes: Record<string, string | number | boolean> = {}) =>
  waitFor(`a span ${name} ${JSON.stringify(attributes)}`, 60_000, async () => {
    const found = receiver.spans.filter(
      (span) => span.name === name && Object.entries(attributes).every(([k, v]) => span.attributes[k] === v),
    );
    return found.length > 0 ? found : undefined;
  });
const names = (spans: readonly ReceivedSpan[]) => spans.map((span) => span.name);

describe("telemetry", () => {
  beforeAll(async () => {
    platform = await testPlatform({ subnetPool: "10.221.0.0/22", sshPortRange: [29260, 29270] });
    receiver = await otlpReceiver();
    const { host, tenants } = platform.config;
    runtime = await startRuntime(
      "telemetry",
      {
        host: { ...host, dataDir: path.join(host.dataDir, "telemetry") },
        tenants: { ...tenants, warmPool: { size: 1, idleSize: 0, idleMinutes: 60 } },
      },
      {
        runtime: {
          createWaitSeconds: 120,
          telemetry: { otlpEndpoint: receiver.url, serviceName: "sbx-test", exportDelayMillis: 200 },
        },
      },
    );
    ({ api } = await signedInClient(runtime.base, "otel"));
    await waitFor("the pool's member ready", 600_000, async () =>
      (await metric("agent_sandbox_pool_ready")) === 1 ? true : undefined,
    );
  }, 900_000);

  afterAll(async () => {
    // The pool refills the member the first test claimed: stopped mid-refill, the runtime left that member's
    // disks mounted and out of its stack's state (a full run, session 41). Its refill ends first.
    if (runtime)
      await waitFor("the pool refilled", 600_000, async () =>
        (await metric("agent_sandbox_pool_ready")) === 1 ? true : undefined,
      ).catch(() => undefined);
    await runtime?.stop();
    await receiver?.close();
    await platform?.stop();
  }, 600_000);

  it("a claim is one trace: the request, its transaction and queries, the pool's claim; then the command's", async () => {
    const claim = await api("POST", "/projects", { name: "claimed" });
    expect(claim.status, JSON.stringify(claim.body)).toBe(201);
    const id = claim.body.project_id as string;
    const exec = await api("POST", `/projects/${id}/exec`, { command: ["node", "-v"] });
    expect(exec.body).toMatchObject({ exit_code: 0 });

    const [request] = await spansNamed("POST /projects", { "http.response.status_code": 201 });
    expect(request!.service).toBe("sbx-test");
    expect(request!.attributes).toMatchObject({ "http.request.method": "POST", "http.route": "/projects" });
    const under = descendants(receiver.spans, request!);
    expect(names(under)).toEqual(expect.arrayContaining(["db transaction", "pool claim", "db select"]));
    const poolClaim = under.find((span) => span.name === "pool claim")!;
    expect(poolClaim.attributes["sandbox.pool.claimed"]).toBe(true);
    expect(poolClaim.traceId).toBe(request!.traceId);
    // Each query names its statement, never its values.
    const query = under.find((span) => span.name === "db select")!;
    expect(query.attributes["db.statement"]).toMatch(/^\s*select /i);
    for (const span of under) expect(span.startMs).toBeGreaterThanOrEqual(request!.startMs - 1);

    const [run] = await spansNamed("POST /projects/{id}/exec", { "http.response.status_code": 200 });
    expect(names(descendants(receiver.spans, run!))).toContain("sandbox exec start");
    // The member was checked before it was handed out: its first command's span ended before the claim.
    const [check] = await spansNamed("pool check", { "sandbox.project_id": id });
    expect(check!.endMs).toBeLessThanOrEqual(poolClaim.startMs);
    expect(check!.statusCode).not.toBe(2);
    expect(check!.parentSpanId).toBeUndefined();
  }, 300_000);

  it("a cold create's operation is one trace from its queueing: the wait, the stack's readiness, the engine's start, each step, its finish", async () => {
    // The pool's one member was claimed above and its refill may be ready: a backend the pool never holds
    // is not needed, a second create at once finds the member taken or still being made.
    const answers = await Promise.all(["cold-a", "cold-b"].map((name) => api("POST", "/projects", { name })));
    for (const answer of answers) expect(answer.status, JSON.stringify(answer.body)).toBe(201);
    const ids = answers.map((answer) => answer.body.project_id as string);
    const creates = await waitFor("a create operation's span", 60_000, async () => {
      const found = receiver.spans.filter(
        (span) =>
          span.name === "operation create" && ids.includes(String(span.attributes["sandbox.project_id"])),
      );
      return found.length > 0 ? found : undefined;
    });
    const operation = creates[0]!;
    // A trace of its own, not a child of the request that queued it (nor of whatever the reconciler ran).
    expect(operation.parentSpanId).toBeUndefined();
    expect(operation.attributes).toMatchObject({
      "sandbox.operation.kind": "create",
      "sandbox.operation.attempt": 1,
    });
    // Its children land once the run has ended; wait for the last one.
    await spansNamed("engine finish");
    const under = descendants(receiver.spans, operation);
    expect(names(under)).toEqual(
      expect.arrayContaining(["queue wait", "stack ready", "stack create", "engine start", "engine finish"]),
    );
    const steps = under.filter((span) => span.name.startsWith("step create "));
    expect(steps.length).toBeGreaterThanOrEqual(3);
    for (const step of steps) expect(String(step.attributes["pulumi.urn"])).toMatch(/^urn:pulumi:/);
    const wait = under.find((span) => span.name === "queue wait")!;
    const engineStart = under.find((span) => span.name === "engine start")!;
    const stack = under.find((span) => span.name === "stack create")!;
    // In order: queued, waited, then the engine started inside the stack's run, its steps after that.
    expect(wait.startMs).toBeCloseTo(operation.startMs, -1);
    expect(engineStart.startMs).toBeGreaterThanOrEqual(stack.startMs - 1);
    for (const step of steps) expect(step.startMs).toBeGreaterThanOrEqual(engineStart.endMs - 1);
    for (const span of under) expect(span.traceId).toBe(operation.traceId);
    // Gone before the runtime stops: a delete still queued then is left to the harness's clean-up of the
    // stacks (a full run, session 44, ended this file with a tenant's disks still mounted; whose, the pool's
    // refill or one of these, was not read).
    for (const id of ids) await api("DELETE", `/projects/${id}`);
    for (const id of ids)
      await waitFor(`project ${id} deleted`, 300_000, async () =>
        (await api("GET", `/projects/${id}`)).status === 404 ? true : undefined,
      );
  }, 900_000);
});
