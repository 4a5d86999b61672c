// The orphan sweep (issue 14): two real tenants run; a container, a network, a volume, an iptables rule, a
// Squid fragment and a snapshot image of this platform instance that belong to no tenant stack are
// planted, and the same kinds labelled as another instance (and before instances). The sweep reports
// exactly this instance's planted ones; with removal they are gone, the other instance's are untouched
// and both tenants still run; a second sweep finds nothing. Resources of an operation in flight are left
// alone: a create racing with removing sweeps, and a project with an open operation in the database.
// Real reconciler, engine, provider, iptables, Squid and registry.
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import { LABELS, MANAGED_BY } from "../../lib/constants.js";
import { dockerClient } from "../../lib/docker-client.js";
import { squidPaths } from "../../lib/host/squid.js";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { squidTenantFiles } from "../../provider/resources/squid-tenant.js";
import { tenantTag } from "../../provider/resources/tenant-firewall.js";
import { platformInstanceId, snapshotOptions } from "../../runtime/tenants/config.js";
import {
  orphanSweepOptions,
  sweepOrphans,
  type OrphanReport,
  type OrphanSweepOptions,
} from "../../runtime/tenants/orphans.js";
import { requestOperation } from "../../runtime/tenants/service.js";
import {
  apiHarness,
  deleteAllTenants,
  settledOperation,
  testReconciler,
  writeStackFile,
  type ApiHarness,
} from "../helpers/api.js";
import { docker } from "../helpers/containers.js";
import { tenantLeftovers, testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";

const exec = promisify(execFile);
let platform: TestPlatform;
let h: ApiHarness<"alice">;
let instance: string;
/** Another platform instance on the same engine and chains (as the operator's is to a test's). */
const otherInstance = randomBytes(6).toString("hex");
const ghost = `ghost-${randomBytes(3).toString("hex")}`;
const tenants: string[] = [];
let registry: string;
let otherFragmentsDir: string;

const options = (extra: Partial<OrphanSweepOptions> = {}): OrphanSweepOptions =>
  orphanSweepOptions(platform.config, dockerClient(), { db: h.db, graceSeconds: 0, ...extra });
/** The labels a tenant's objects get from `owner`'s platform (none for `instance` before instances). */
const labels = (owner: string | undefined, tenant: string) => [
  `${LABELS.managedBy}=${MANAGED_BY}`,
  `${LABELS.tenant}=${tenant}`,
  `${LABELS.stack}=${tenantNames(tenant).stack}`,
  ...(owner ? [`${LABELS.instance}=${owner}`] : []),
];
const labelArgs = (owner: string | undefined, tenant: string) =>
  labels(owner, tenant).flatMap((label) => ["--label", label]);
const exists = (...args: string[]) =>
  docker(...args).then(
    () => true,
    () => false,
  );
const ruleExists = (rule: readonly string[]) =>
  exec("iptables", ["-w", "-C", ...rule]).then(
    () => true,
    () => false,
  );
const fileExists = (file: string) =>
  fs.stat(file).then(
    () => true,
    () => false,
  );
const manifestExists = async (repo: string, tag: string) =>
  (
    await fetch(
      `http://${registry.split("/")[0]}/v2/${repo.slice(registry.indexOf("/") + 1)}/manifests/${tag}`,
      {
        method: "HEAD",
        headers: { Accept: "application/vnd.docker.distribution.manifest.v2+json" },
      },
    )
  ).status === 200;
/** `<kind> <name>` of each orphan, sorted, a registry digest shown as `@<digest>`. */
const summary = (report: OrphanReport) =>
  report.orphans.map((o) => `${o.kind} ${o.name.replace(/@sha256:[0-9a-f]{64}$/, "@<digest>")}`).sort();

/** A rule in SANDBOX-FORWARD on an interface that does not exist, tagged as `tag`. */
const plantedRule = (tag: string, iface: string) => [
  "SANDBOX-FORWARD",
  "-i",
  iface,
  "-m",
  "comment",
  "--comment",
  tag,
  "-j",
  "DROP",
];

/** What was planted: this instance's (the orphans) and the others' (never touched). */
const ours = {
  container: `sbx-${ghost}`,
  network: `sbx-net-${ghost}`,
  volume: `sbx-home-${ghost}`,
  rule: [] as string[],
  fragment: "",
  domains: "",
  /** A fragment's write killed before its rename left this (writeFileAtomic's temporary file). */
  fragmentTemp: "",
  snapshotRepo: "",
  snapshotTag: "20260101-000000-000",
};
const others = {
  container: `sbx-${ghost}-other`,
  network: `sbx-net-${ghost}-other`,
  volume: `sbx-home-${ghost}-other`,
  legacyVolume: `sbx-home-${ghost}-legacy`,
  rule: [] as string[],
  legacyRule: [] as string[],
  fragment: "",
  snapshotTag: "20260101-000000-001",
};

/** A snapshot as takeSnapshot pushes it: `<repository>/<project>:<timestamp>`, with the sandbox's labels. */
async function plantSnapshot(owner: string, tag: string): Promise<void> {
  // An empty image (the sweep judges the image's labels, not its layers; a commit of the sandbox would
  // push 1.4 GB into the test's registry).
  const ref = `${ours.snapshotRepo}:${tag}`;
  const changes = labels(owner, ghost).flatMap((label) => ["--change", `LABEL ${label}`]);
  await exec("sh", [
    "-c",
    `tar -cf - -T /dev/null | docker import ${changes.map((c) => `'${c}'`).join(" ")} - '${ref}'`,
  ]);
  await docker("push", ref);
}

beforeAll(async () => {
  platform = await testPlatform(
    { subnetPool: "10.242.0.0/22", sshPortRange: [27700, 27710], leaseSeconds: 10, maxConcurrent: 2 },
    { registry: true },
  );
  const { config } = platform;
  instance = platformInstanceId(config);
  registry = snapshotOptions(config).repository;
  h = await apiHarness({
    database: await testDatabase("pglite", { under: config.host.dataDir }),
    config,
    users: ["alice"],
    reconciler: true,
  });
  for (const name of ["orphans-a", "orphans-b"]) {
    const created = await h.as("alice", "POST", "/projects", { name });
    expect(created.statusCode, created.body).toBe(202);
    tenants.push(created.json().project_id);
  }
  for (const id of tenants) await h.waitForStatus("alice", id, "running", 600_000);

  // This instance's, belonging to no stack.
  const image = config.tenants.image;
  const run = (name: string, owner: string) =>
    docker(
      "run",
      "-d",
      "--name",
      name,
      "--network",
      "none",
      ...labelArgs(owner, ghost),
      "--entrypoint",
      "sleep",
      image,
      "3600",
    );
  await run(ours.container, instance);
  await docker("network", "create", "--internal", ...labelArgs(instance, ghost), ours.network);
  await docker("volume", "create", ...labelArgs(instance, ghost), ours.volume);
  ours.rule = plantedRule(tenantTag(ghost, instance), "sbxorphan0");
  await exec("iptables", ["-w", "-A", ...ours.rule]);
  const squid = squidPaths(config.host);
  const files = squidTenantFiles({
    tenantId: ghost,
    subnet: "10.242.3.0/24",
    domains: ["ghost.example"],
    configFile: squid.config,
    fragmentsDir: squid.fragmentsDir,
  });
  ours.fragment = files.fragment;
  ours.domains = files.domainsFile;
  await fs.writeFile(files.domainsFile, files.domainsText);
  await fs.writeFile(files.fragment, files.fragmentText);
  ours.fragmentTemp = path.join(squid.fragmentsDir, `.tenant-${ghost}.conf.0123456789ab.tmp`);
  await fs.writeFile(ours.fragmentTemp, files.fragmentText.slice(0, 10));
  await exec("squid", ["-k", "reconfigure", "-f", squid.config]); // loaded, as a real fragment would be
  ours.snapshotRepo = `${registry}/${ghost}`;
  await plantSnapshot(instance, ours.snapshotTag);

  // The same kinds, another instance's (and, for a volume and a rule, made before instances existed).
  await run(others.container, otherInstance);
  await docker("network", "create", "--internal", ...labelArgs(otherInstance, ghost), others.network);
  await docker("volume", "create", ...labelArgs(otherInstance, ghost), others.volume);
  await docker("volume", "create", ...labelArgs(undefined, ghost), others.legacyVolume);
  others.rule = plantedRule(tenantTag(ghost, otherInstance), "sbxorphan1");
  others.legacyRule = plantedRule(tenantTag(ghost), "sbxorphan2");
  await exec("iptables", ["-w", "-A", ...others.rule]);
  await exec("iptables", ["-w", "-A", ...others.legacyRule]);
  otherFragmentsDir = path.join(path.dirname(config.host.configDir), "other-instance", "squid", "tenants");
  await fs.mkdir(otherFragmentsDir, { recursive: true });
  others.fragment = path.join(otherFragmentsDir, path.basename(files.fragment));
  await fs.writeFile(others.fragment, files.fragmentText);
  await plantSnapshot(otherInstance, others.snapshotTag); // in the same repository: only the label differs
}, 1_200_000);

afterAll(async () => {
  if (h) {
    await deleteAllTenants(h.db);
    for (const id of tenants) expect(await tenantLeftovers(platform.config.host, id)).toEqual([]);
  }
  await docker("rm", "--force", ours.container, others.container).catch(() => undefined);
  await docker("network", "rm", ours.network, others.network).catch(() => undefined);
  await docker("volume", "rm", ours.volume, others.volume, others.legacyVolume).catch(() => undefined);
  for (const rule of [ours.rule, others.rule, others.legacyRule])
    if (rule.length > 0) await exec("iptables", ["-w", "-D", ...rule]).catch(() => undefined);
  for (const tag of [ours.snapshotTag, others.snapshotTag])
    await docker("rmi", `${ours.snapshotRepo}:${tag}`).catch(() => undefined);
  await h?.close();
  await platform?.stop();
}, 900_000);

/** Which of the planted objects still exist. */
async function planted() {
  const snapshot = (tag: string) => ({
    snapshotInRegistry: manifestExists(ours.snapshotRepo, tag),
    snapshotInEngine: exists("image", "inspect", `${ours.snapshotRepo}:${tag}`),
  });
  const settle = async <T extends Record<string, Promise<boolean>>>(checks: T) =>
    Object.fromEntries(
      await Promise.all(Object.entries(checks).map(async ([key, check]) => [key, await check])),
    ) as Record<keyof T, boolean>;
  return {
    ours: await settle({
      container: exists("container", "inspect", ours.container),
      network: exists("network", "inspect", ours.network),
      volume: exists("volume", "inspect", ours.volume),
      rule: ruleExists(ours.rule),
      fragment: fileExists(ours.fragment),
      domains: fileExists(ours.domains),
      fragmentTemp: fileExists(ours.fragmentTemp),
      ...snapshot(ours.snapshotTag),
    }),
    others: await settle({
      container: exists("container", "inspect", others.container),
      network: exists("network", "inspect", others.network),
      volume: exists("volume", "inspect", others.volume),
      legacyVolume: exists("volume", "inspect", others.legacyVolume),
      rule: ruleExists(others.rule),
      legacyRule: ruleExists(others.legacyRule),
      fragment: fileExists(others.fragment),
      ...snapshot(others.snapshotTag),
    }),
  };
}

/** Both tenants as the sweep must leave them: running, their seven rules and their fragment in place. */
async function expectTenantsIntact() {
  for (const id of tenants) {
    const names = tenantNames(id);
    expect(await docker("inspect", "-f", "{{.State.Running}}", names.container)).toBe("true");
    expect((await exec("docker", ["exec", names.container, "true"])).stderr).toBe("");
    expect(await exists("network", "inspect", names.network)).toBe(true);
    expect(await exists("volume", "inspect", names.volume)).toBe(true);
    const rules = (await exec("iptables", ["-w", "-S"])).stdout
      .split("\n")
      .filter((line) => line.includes(tenantTag(id, instance)));
    expect(rules).toHaveLength(8); // the seven of docs/security.md and the credential gateway's
    expect(
      await fileExists(path.join(squidPaths(platform.config.host).fragmentsDir, `tenant-${id}.conf`)),
    ).toBe(true);
  }
}

describe("the orphan sweep", () => {
  it("gives the tenants' objects this instance's label and rule comment", async () => {
    const names = tenantNames(tenants[0]!);
    for (const args of [
      ["inspect", "-f", "{{json .Config.Labels}}", names.container],
      ["network", "inspect", "-f", "{{json .Labels}}", names.network],
      ["volume", "inspect", "-f", "{{json .Labels}}", names.volume],
    ])
      expect(JSON.parse(await docker(...args))).toMatchObject({
        [LABELS.instance]: instance,
        [LABELS.tenant]: tenants[0],
      });
    expect((await exec("iptables", ["-w", "-S"])).stdout).toContain(
      `agent-sandbox:tenant=${tenants[0]}:instance=${instance}`,
    );
  });

  it("reports exactly this instance's planted resources (npm run orphans), and within the grace period only the rule", async () => {
    const stackFile = await writeStackFile(platform.config.host, "orphans", {
      target: "local",
      host: platform.config.host,
      tenants: platform.config.tenants,
    });
    const script = (...args: string[]) =>
      exec("node", ["--import", "tsx", "scripts/orphans.ts", ...args], {
        cwd: REPO_ROOT,
        env: { ...process.env, AGENT_SANDBOX_CONFIG: stackFile, DATABASE_URL: "" },
      }).then(
        ({ stdout }) => ({ code: 0, stdout, stderr: "" }),
        (error: { code: number; stdout: string; stderr: string }) => error,
      );
    const ran = await script("--json", "--grace", "0");
    expect(ran.code, ran.stderr).toBe(3); // found, not removed
    const report = JSON.parse(ran.stdout) as OrphanReport;
    expect(report).toMatchObject({ instance, remove: false, stacks: 2, skipped: [] });
    expect(summary(report)).toEqual(
      [
        `container ${ours.container}`,
        `network ${ours.network}`,
        `volume ${ours.volume}`,
        `rule -A ${ours.rule.join(" ")}`,
        `squid-fragment ${ours.fragment}`,
        `squid-fragment ${ours.domains}`,
        `squid-fragment ${ours.fragmentTemp}`,
        `snapshot ${ours.snapshotRepo}:${ours.snapshotTag}`,
        `snapshot ${ours.snapshotRepo}@<digest>`,
      ].sort(),
    );
    for (const orphan of report.orphans) {
      expect(orphan.tenant).toBe(ghost);
      expect(orphan.why).toBe(`project ${ghost} has no tenant stack`);
    }
    expect(report.orphans.find((o) => o.detail?.startsWith("in the registry"))?.detail).toBe(
      `in the registry, tags ${ours.snapshotTag}`,
    );

    // Human text by default; with the default grace period only what has no age (the rule) is an orphan.
    const text = await script();
    expect(text.code, text.stderr).toBe(3);
    expect(text.stdout).toContain(`orphan sweep of platform instance ${instance}`);
    expect(text.stdout).toContain(`rule           -A ${ours.rule.join(" ")}`);
    expect(text.stdout).toContain("within the grace period of 600 s");
    expect(text.stdout).toContain("1 orphan(s); run again with --remove to remove them");

    const usage = await script("--delete");
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain("Unknown option '--delete'");
    const grace = await script("--grace", "soon");
    expect(grace.code).toBe(2);
    expect(grace.stderr).toContain('--grace must be a whole number of seconds (0 or more), got "soon"');
  });

  it("removes them with the flag; the other instance's stay, both tenants keep running; a second sweep finds nothing", async () => {
    const before = await planted();
    for (const side of [before.ours, before.others]) expect(Object.values(side)).not.toContain(false);
    const report = await sweepOrphans(options({ remove: true }));
    expect(report.orphans).toHaveLength(9);
    for (const orphan of report.orphans) expect(orphan, orphan.name).toMatchObject({ removed: true });
    expect(report.orphans.some((o) => o.error)).toBe(false); // Squid reloaded

    expect(await planted()).toEqual({
      ours: {
        container: false,
        network: false,
        volume: false,
        rule: false,
        fragment: false,
        domains: false,
        fragmentTemp: false,
        snapshotInRegistry: false,
        snapshotInEngine: false,
      },
      others: {
        container: true,
        network: true,
        volume: true,
        legacyVolume: true,
        rule: true,
        legacyRule: true,
        fragment: true,
        snapshotInRegistry: true,
        snapshotInEngine: true,
      },
    });
    expect(await docker("inspect", "-f", "{{.State.Running}}", others.container)).toBe("true");

    await expectTenantsIntact();
    const again = await sweepOrphans(options({ remove: true }));
    expect(again.orphans).toEqual([]);
    expect(again.skipped).toEqual([]);
    expect(again.stacks).toBe(2);
  });

  it("leaves a project with an open operation alone, and then sweeps what its stack does not list", async () => {
    const [project] = tenants as [string];
    await h.reconciler!.stop(); // so the operation stays open while the sweep runs
    const leftover = `sbx-${project}-leftover`;
    await docker(
      "run",
      "-d",
      "--name",
      leftover,
      "--network",
      "none",
      ...labelArgs(instance, project),
      "--entrypoint",
      "sleep",
      platform.config.tenants.image,
      "3600",
    );
    const { operation } = await requestOperation(h.db, project, "update");

    const withDatabase = await sweepOrphans(options({ remove: true }));
    expect(withDatabase.orphans).toEqual([]);
    expect(withDatabase.skipped).toEqual([
      { kind: "container", name: leftover, tenant: project, why: "its project has an open operation" },
    ]);
    expect(await exists("container", "inspect", leftover)).toBe(true);

    // Without the database only the stack is asked: it is not locked and does not list the leftover.
    const withoutDatabase = await sweepOrphans(options({ db: undefined, remove: true }));
    expect(withoutDatabase.orphans).toEqual([
      expect.objectContaining({
        kind: "container",
        name: leftover,
        tenant: project,
        why: `stack tenant-${project} does not list it`,
        removed: true,
      }),
    ]);
    expect(withoutDatabase.notes).toContain(
      "no database: projects with an open operation were not looked up (stack locks still were)",
    );
    expect(await exists("container", "inspect", leftover)).toBe(false);

    h.reconciler = testReconciler(h.db, platform.config);
    expect(await settledOperation(h.db, operation)).toMatchObject({ state: "succeeded" });
    await expectTenantsIntact();
  });

  it("never removes what a create in flight has made before its state lists it", async () => {
    const created = await h.as("alice", "POST", "/projects", { name: "orphans-c" });
    expect(created.statusCode, created.body).toBe(202);
    const racing: string = created.json().project_id;
    tenants.push(racing);
    // Removing sweeps without the database, back to back, for as long as the create runs: the stack's
    // lock is all that stands between them and the create's half-made tenant.
    const sweeps: Array<{ report: OrphanReport; started: number; ended: number }> = [];
    let settled = false;
    const done = h.waitForStatus("alice", racing, "running", 600_000).finally(() => (settled = true));
    while (!settled) {
      const started = Date.now();
      const report = await sweepOrphans(options({ db: undefined, remove: true }));
      sweeps.push({ report, started, ended: Date.now() });
    }
    await done;
    expect(sweeps.flatMap((s) => s.report.orphans)).toEqual([]);
    // Some sweeps ran while the create had made its first object (the network) and not yet its last (the
    // container): the window in which a sweep without these guards removes half a tenant.
    const names = tenantNames(racing);
    const madeAt = async (...args: string[]) =>
      new Date(await docker(...args, "-f", "{{.Created}}")).getTime();
    const [first, last] = [
      await madeAt("network", "inspect", names.network),
      await madeAt("inspect", names.container),
    ];
    expect(sweeps.filter((s) => s.started < last && s.ended > first).length).toBeGreaterThan(0);
    await expectTenantsIntact();
  });

  it("runs one sweep at a time per instance", async () => {
    const [first, second] = await Promise.allSettled([sweepOrphans(options()), sweepOrphans(options())]);
    // Both start in one process: the second finds the first's lock (its holder, this process, is alive).
    expect(first.status).toBe("fulfilled");
    expect(second).toMatchObject({
      status: "rejected",
      reason: expect.objectContaining({
        message: `an orphan sweep of this instance is already running (process ${process.pid})`,
      }),
    });
  });
});
