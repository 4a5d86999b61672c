// Live settings (issue 15): PATCH /projects/{id} on a running sandbox. The allowlist changes without a
// restart (the container and its processes stay), limits change in place (read back from the engine),
// an image waits for the next start or replaces the container at once, project settings need no
// operation, and bad input is a 400 naming the field with nothing queued. Real reconciler, engine,
// provider, iptables and Squid; "the internet" is the test's own network namespace.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import { LAUNCHER_ARGV } from "../../runtime/sandbox/launcher.js";
import { waitFor } from "../../lib/process.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { docker, execIn } from "../helpers/containers.js";
import { testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { requestOperation } from "../../runtime/tenants/service.js";
import { ifbDevice } from "../../provider/resources/traffic-shaper.js";
import { startWorld, WORLD_ADDRESS, type World } from "../helpers/world.js";

const exec = promisify(execFile);
let world: World;
let platform: TestPlatform;
let h: ApiHarness<"alice" | "bob">;
let id: string;
let container: string;

interface Inspected {
  Id: string;
  Config: { Image: string };
  State: { Pid: number; Running: boolean };
  HostConfig: { Memory: number; MemorySwap: number; NanoCpus: number; PidsLimit: number };
}
const inspect = async (): Promise<Inspected> => JSON.parse(await docker("inspect", container))[0];
/** The sandbox's processes (host pids) but the runtime's waiting exec launchers, each taken by the next exec. */
const listProcesses = async () =>
  (await exec("docker", ["top", container, "-o", "pid,args"])).stdout
    .split("\n")
    .slice(1)
    .filter((line) => line.trim() !== "" && !line.trimEnd().endsWith(` ${LAUNCHER_ARGV.at(-1)}`))
    .map((line) => line.trim().split(/\s+/)[0]!)
    .sort();
/**
 * The sandbox's long-lived processes (host pids), seen in two looks a second apart (a health check's exec
 * comes and goes): all still there afterwards means nothing was restarted.
 */
const processes = async () => {
  const first = await listProcesses();
  await new Promise((resolve) => setTimeout(resolve, 1500));
  const second = new Set(await listProcesses());
  return first.filter((pid) => second.has(pid));
};
/** The proxy's answer for `name` from inside the sandbox: 200 (allowed) or 403 (refused). */
const reach = async (name: string) =>
  (await execIn(container, `curl -s -o /dev/null -w '%{http_code}' --max-time 5 http://${name}/`)).stdout;
/** A host the sandbox may reach now (its allowlist's first). */
const allowedHost = async () =>
  (
    await h.db.query<{ host: string }>(
      "select spec->'allowlist'->>0 as host from tenants where project_id = $1",
      [id],
    )
  ).rows[0]!.host;
/** The sandbox's rate downloading `bytes` from "the internet" through its proxy, in kbit/s (as curl measured it). */
async function downloadKbps(bytes = 6_000_000): Promise<number> {
  const host = await allowedHost();
  const got = await execIn(
    container,
    `curl -sf -o /dev/null -w '%{size_download} %{speed_download}' --max-time 100 http://${host}/bytes/${bytes}`,
  );
  const [size, speed] = got.stdout.split(" ").map(Number);
  expect({ code: got.code, size }, got.stderr).toEqual({ code: 0, size: bytes });
  return (speed! * 8) / 1000;
}
/** The sandbox's rate uploading `bytes` to "the internet" through its proxy, in kbit/s (as curl measured it). */
async function uploadKbps(bytes = 3_000_000): Promise<number> {
  const host = await allowedHost();
  const got = await execIn(
    container,
    `head -c ${bytes} /dev/zero > /tmp/upload && curl -sf -T /tmp/upload -w ' %{speed_upload}' --max-time 100 http://${host}/sink`,
  );
  const [received, speed] = got.stdout.split(" ").map(Number);
  expect({ code: got.code, received }, got.stderr).toEqual({ code: 0, received: bytes });
  return (speed! * 8) / 1000;
}
/** What tc holds on the tenant's bridge and its IFB device, as tc prints it. */
const tcShow = async () => {
  const bridge = tenantNames(id).bridge;
  const show = async (dev: string) =>
    (await exec("tc", ["qdisc", "show", "dev", dev]).catch(() => ({ stdout: "" }))).stdout;
  return { bridge: await show(bridge), ifb: await show(ifbDevice(bridge)) };
};
const operationCount = async () =>
  (await h.db.query<{ n: number }>("select count(*)::int as n from operations where project_id = $1", [id]))
    .rows[0]!.n;

/** Waits for the settings' update `operationId` to succeed; its failure fails the test, naming why. */
async function updated(operationId: string): Promise<void> {
  // The failure ends the wait at once (waitFor retries a probe that throws, until its deadline).
  const ended = await waitFor("the settings' update", 300_000, async () => {
    const { rows } = await h.db.query<{ state: string; error: string | null }>(
      "select state, error from operations where id = $1",
      [operationId],
    );
    return rows[0]?.state === "succeeded" || rows[0]?.state === "failed" ? rows[0] : undefined;
  });
  if (ended.state === "failed") throw new Error(`the update failed: ${ended.error}`);
}

/** PATCH as alice; waits for the update it queued (if any) and returns the answer. */
async function patch(body: object, who: "alice" | "bob" = "alice") {
  const before = await operationCount();
  const answer = await h.as(who, "PATCH", `/projects/${id}`, body);
  if (answer.statusCode === 202) await updated(answer.json().operation.id);
  return { answer, queued: (await operationCount()) - before };
}

beforeAll(async () => {
  world = await startWorld();
  platform = await testPlatform(
    { subnetPool: "10.241.8.0/23", sshPortRange: [27640, 27645], leaseSeconds: 10 },
    {
      hosts: Object.fromEntries(
        ["allowed-a", "allowed-b"].map((name) => [`${name}.sandbox.test`, WORLD_ADDRESS]),
      ),
    },
  );
  h = await apiHarness({
    database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
    config: platform.config,
    users: ["alice", "bob"],
    reconciler: true,
  });
  const created = await h.as("alice", "POST", "/projects", {
    name: "settings",
    allowlist: ["allowed-a.sandbox.test"],
  });
  expect(created.statusCode, created.body).toBeLessThan(300);
  id = created.json().project_id;
  container = tenantNames(id).container;
  await h.waitForStatus("alice", id, "running", 600_000);
}, 1_200_000);

afterAll(async () => {
  await h?.close();
  await platform?.stop();
  await world?.stop();
}, 900_000);

describe("PATCH /projects/{id}", () => {
  it("an allowlist change reaches the running sandbox without a restart", async () => {
    expect([await reach("allowed-a.sandbox.test"), await reach("allowed-b.sandbox.test")]).toEqual([
      "200",
      "403",
    ]);
    const [before, pids] = [await inspect(), await processes()];
    const { answer, queued } = await patch({ allowlist: ["allowed-b.sandbox.test"] });
    expect(answer.statusCode, answer.body).toBe(202);
    expect(queued).toBe(1);
    expect(answer.json().operation).toMatchObject({ kind: "update" });
    expect([await reach("allowed-a.sandbox.test"), await reach("allowed-b.sandbox.test")]).toEqual([
      "403",
      "200",
    ]);
    const after = await inspect();
    expect([after.Id, after.State.Pid]).toEqual([before.Id, before.State.Pid]);
    expect(await listProcesses()).toEqual(expect.arrayContaining(pids));
  });

  it("a new allowlist holds when the PATCH answers, before its update has run", async () => {
    // The host the sandbox may not reach now becomes the one it may.
    const { rows: now } = await h.db.query<{ allowlist: string[] }>(
      "select spec->'allowlist' as allowlist from tenants where project_id = $1",
      [id],
    );
    const [next, previous] = now[0]!.allowlist.includes("allowed-a.sandbox.test")
      ? ["allowed-b.sandbox.test", "allowed-a.sandbox.test"]
      : ["allowed-a.sandbox.test", "allowed-b.sandbox.test"];
    expect([await reach(next), await reach(previous)]).toEqual(["403", "200"]);
    // The reconciler stopped: the update the PATCH queues stays pending, so what holds is the PATCH's own.
    await h.reconciler!.stop();
    let operation = "";
    try {
      const answer = await h.as("alice", "PATCH", `/projects/${id}`, { allowlist: [next] });
      expect(answer.statusCode, answer.body).toBe(202);
      operation = answer.json().operation.id as string;
      expect([await reach(next), await reach(previous)]).toEqual(["200", "403"]);
      const { rows } = await h.db.query<{ state: string }>("select state from operations where id = $1", [
        operation,
      ]);
      expect(rows[0]?.state).toBe("pending");
    } finally {
      h.reconciler!.start();
    }
    // The update then records it and changes nothing more: the sandbox's answers stay the same.
    await updated(operation);
    expect([await reach(next), await reach(previous)]).toEqual(["200", "403"]);
  });

  it("limits change in place: the engine reports them, the processes stay", async () => {
    const [before, pids] = [await inspect(), await processes()];
    const { answer } = await patch({ limits: { memory_mib: 768, cpus: 0.5, pids: 300 } });
    expect(answer.statusCode, answer.body).toBe(202);
    const after = await inspect();
    expect(after.HostConfig).toMatchObject({
      Memory: 768 << 20,
      MemorySwap: 768 << 20,
      NanoCpus: 500_000_000,
      PidsLimit: 300,
    });
    expect([after.Id, after.State.Pid]).toEqual([before.Id, before.State.Pid]);
    expect(await listProcesses()).toEqual(expect.arrayContaining(pids));
  });

  it("project settings alone queue nothing", async () => {
    const { answer, queued } = await patch({ idle_shutdown: false, drift_remediation: "repair" });
    expect(answer.statusCode, answer.body).toBe(200);
    expect(queued).toBe(0);
    expect(answer.json()).toMatchObject({ idle: "none", idle_shutdown: false });
    const { rows } = await h.db.query("select idle_action, drift_remediation from projects where id = $1", [
      id,
    ]);
    expect(rows[0]).toEqual({ idle_action: "none", drift_remediation: "repair" });
    const stop = await patch({ idle: "stop" });
    expect([stop.answer.statusCode, stop.queued]).toEqual([200, 0]);
    expect(stop.answer.json()).toMatchObject({ idle: "stop", idle_shutdown: true });
  });

  it("an image waits for the next start, or replaces the container at once with restart; the home stays", async () => {
    const base = (await inspect()).Config.Image;
    const next = `agent-sandbox/settings-test:${id.slice(0, 8)}`;
    await docker("tag", base, next);
    try {
      expect((await execIn(container, "echo kept > ~/settings-marker")).code).toBe(0);
      const waiting = await patch({ image: next });
      expect(waiting.answer.statusCode, waiting.answer.body).toBe(200);
      expect(waiting.queued).toBe(0);
      expect((await inspect()).Config.Image).toBe(base); // still running what it ran
      const { answer } = await patch({ image: next, restart: true });
      expect(answer.statusCode, answer.body).toBe(202);
      const after = await inspect();
      expect([after.Config.Image, after.State.Running]).toEqual([next, true]);
      expect((await execIn(container, "cat ~/settings-marker")).stdout.trim()).toBe("kept");
    } finally {
      await patch({ image: base, restart: true }).catch(() => undefined);
      await docker("rmi", next).catch(() => undefined);
    }
  });

  it("bad input is a 400 naming the field, another user's project a 404; nothing is queued", async () => {
    const before = await operationCount();
    const refused: [object, string][] = [
      [{ allowlist: ["10.0.0.1"] }, "allowlist.0"],
      [{ allowlist: ["*"] }, "allowlist.0"],
      [{ allowlist: ["not a host"] }, "allowlist.0"],
      [{ allowlist: [] }, "allowlist"],
      [{ limits: { memory_mib: 100 } }, "limits.memory_mib"],
      [{ limits: { memory_mib: 100_000_000 } }, "limits.memory_mib"],
      [{ limits: { cpus: 1000 } }, "limits.cpus"],
      [{ limits: { pids: 10 } }, "limits.pids"],
      [{ limits: {} }, "limits"],
      [{ image: "Not An Image" }, "image"],
      // Off the engine's reference grammar (the engine itself refused it, a 500): the document's pattern.
      [{ image: "app:b:c" }, "image"],
      [{ image: "app:b/c" }, "image"],
      [{ ports: [{ port: 2222 }] }, "ports.0.port"],
      [{ restart: true }, "restart"],
      [{ protected_paths: ["../etc"] }, "protected_paths.0"],
      [{ colour: "blue" }, "colour"],
      [{ idle: "hibernate" }, "idle"],
      [{ idle: "stop", idle_shutdown: false }, "idle_shutdown"],
      [{}, "body"],
    ];
    for (const [body, field] of refused) {
      const answer = await h.as("alice", "PATCH", `/projects/${id}`, body);
      expect({ body, status: answer.statusCode }).toEqual({ body, status: 400 });
      expect(answer.json().details.map((d: { field: string }) => d.field)).toContain(field);
    }
    const theirs = await h.as("bob", "PATCH", `/projects/${id}`, { idle_shutdown: true });
    expect(theirs.statusCode).toBe(404);
    expect(await operationCount()).toBe(before);
    expect((await inspect()).State.Running).toBe(true);
  });

  // Schema-valid bodies a fuzzer saw refused as invalid (400): a well-formed reference to an image the
  // engine does not have is a fact about the engine (409 naming it), and nothing is queued.
  it("a well-formed image that is not on the engine is a 409 naming it, not a 400; nothing is queued", async () => {
    const before = await operationCount();
    for (const image of ["agent-sandbox/no-such-image:1", "registry.local:5000/team/no-such-image:v1"]) {
      const answer = await h.as("alice", "PATCH", `/projects/${id}`, { image });
      expect(answer.statusCode, answer.body).toBe(409);
      expect(answer.json()).toMatchObject({ error: "image_not_found", details: { field: "image", image } });
    }
    expect(await operationCount()).toBe(before);
  });

  it("bandwidth caps a running sandbox's downloads and uploads in place, a removed qdisc is drift, null uncaps", async () => {
    const cap = 8000; // kbit/s: 1 MB/s
    const before = await inspect();
    const capped = await patch({ bandwidth: { download_kbps: cap, upload_kbps: 4000 } });
    expect(capped.answer.statusCode, capped.answer.body).toBe(202);
    expect(capped.answer.json().bandwidth).toEqual({ download_kbps: cap, upload_kbps: 4000 });
    expect(await tcShow()).toEqual({
      bridge: expect.stringMatching(/qdisc tbf 1: root .*rate 8Mbit/),
      ifb: expect.stringMatching(/qdisc tbf 1: root .*rate 4Mbit/),
    });
    // A cap is an upper bound: a slow machine is only slower. The band allows the bucket and curl's timing.
    const cappedRate = await downloadKbps();
    expect(cappedRate).toBeLessThanOrEqual(cap * 1.5);
    const cappedUpload = await uploadKbps();
    expect(cappedUpload).toBeLessThanOrEqual(4000 * 1.5);

    const removed = await patch({ bandwidth: null });
    expect(removed.answer.statusCode, removed.answer.body).toBe(202);
    expect(removed.answer.json().bandwidth).toBeNull();
    expect((await tcShow()).bridge).not.toContain("tbf");
    expect((await tcShow()).ifb).toBe(""); // the IFB device is gone
    const uncappedRate = await downloadKbps();
    expect(uncappedRate).toBeGreaterThan(cap * 2);
    expect(uncappedRate).toBeGreaterThan(cappedRate);
    const uncappedUpload = await uploadKbps();
    expect(uncappedUpload).toBeGreaterThan(4000 * 2);
    console.log(
      `upload: capped at 4000 kbit/s ${Math.round(cappedUpload)}, uncapped ${Math.round(uncappedUpload)} kbit/s`,
    );
    console.log(
      `download: capped at ${cap} kbit/s ${Math.round(cappedRate)}, uncapped ${Math.round(uncappedRate)} kbit/s`,
    );
    // Live: the same container, its init the same process.
    const after = await inspect();
    expect([after.Id, after.State.Pid]).toEqual([before.Id, before.State.Pid]);

    // A qdisc removed by hand: the drift check names the shaper, and repair puts the cap back.
    expect(
      (await patch({ bandwidth: { download_kbps: cap }, drift_remediation: "repair" })).answer.statusCode,
    ).toBe(202);
    expect((await tcShow()).ifb).toBe(""); // no upload cap declared: no IFB device
    await exec("tc", ["qdisc", "del", "dev", tenantNames(id).bridge, "root"]);
    const { operation } = await requestOperation(h.db, id, "check-drift");
    await updated(operation.id);
    const drift = (await h.as("alice", "GET", `/projects/${id}/drift`)).json();
    expect(drift.status).toBe("drifted");
    expect(drift.resources).toEqual([
      expect.objectContaining({
        type: "sandbox:host:TrafficShaper",
        change: "changed",
        properties: expect.arrayContaining(["missing", "observed"]),
      }),
    ]);
    await waitFor("the repair to put the cap back", 300_000, async () =>
      (await tcShow()).bridge.includes("rate 8Mbit") ? true : undefined,
    );
    expect((await patch({ bandwidth: null, drift_remediation: null })).answer.statusCode).toBe(202);
  }, 900_000);

  it("bad bandwidth is a 400 naming the field; nothing is queued", async () => {
    const before = await operationCount();
    const refused: [object, string][] = [
      [{ bandwidth: {} }, "bandwidth"],
      [{ bandwidth: { download_kbps: 63 } }, "bandwidth.download_kbps"],
      [{ bandwidth: { upload_kbps: 10_000_001 } }, "bandwidth.upload_kbps"],
      [{ bandwidth: { download_kbps: 1.5 } }, "bandwidth.download_kbps"],
      [{ bandwidth: { rate_mbps: 8 } }, "bandwidth.rate_mbps"],
    ];
    for (const [body, field] of refused) {
      const answer = await h.as("alice", "PATCH", `/projects/${id}`, body);
      expect({ body, status: answer.statusCode }).toEqual({ body, status: 400 });
      expect(answer.json().details.map((d: { field: string }) => d.field)).toContain(field);
    }
    expect(await operationCount()).toBe(before);
  });
});
