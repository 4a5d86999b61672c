// The runtime's backups of a kubernetes project (runtime/kubernetes/backup.ts) against a tenant who changes its
// home under them. The runtime reads and writes the home through a mount of the Pod's own sftp-server, whose
// answers the tenant controls: a directory listed a moment ago can be a link to the host's /etc when it is read,
// and a link planted before a restore can point a bucket's object anywhere. Nothing on the host may follow such a
// link: no host file may reach the backup, and a restore may write nothing outside the home.
//
// The cluster is a real one (tests/helpers/kube-apiserver.ts): kube-apiserver, its controllers and scheduler, and
// kwok, which runs every exec into the Pod (the Pod's sftp-server among them) as a local process of the agent's
// uid, in a home directory of this test's. So the host's files are on the far side of the tenant's links, as the
// runtime's keys are on GKE, and "the host" is what a test file of root's, unreadable by the agent, stands for.
// The bucket is fake-gcs-server, behind a proxy here that keeps every upload's body.
import { randomBytes, randomUUID } from "node:crypto";
import {
  chmodSync,
  chownSync,
  lchownSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { kubernetesTenantNames } from "../../components/tenant/kubernetes/names.js";
import type { TenantSpec } from "../../components/tenant/spec.js";
import { waitFor } from "../../lib/process.js";
import { rcloneToken } from "../../runtime/gcp/credentials.js";
import { KubernetesBackups, type BackupOutcome } from "../../runtime/kubernetes/backup.js";
import { kubernetesProjects } from "../../runtime/kubernetes/sandbox.js";
import { SFTP_SERVER } from "../../runtime/kubernetes/ssh-gateway.js";
import { startFakeGcs, startRecordingProxy, type FakeGcs, type RecordingProxy } from "../helpers/fake-gcs.js";
import { startKubeCluster, type KubeCluster } from "../helpers/kube-apiserver.js";
import { testDatabase } from "../helpers/postgres.js";
import { kubernetesSpec } from "../helpers/tenant-mocks.js";

/** The unprivileged user kwok runs each exec as (the image's agent is uid 1000 too). */
const AGENT_UID = 1000;
/** Longer than sshfs's caches (20 s) and the kernel's: what a stopped sftp-server gives an attacker for free. */
const PAUSE_MS = 25_000;
/** When the host's key was written (whole seconds: SFTP's times have no finer ones). */
const KEY_TIME = 1_700_000_000;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The Pod's read-only sftp-servers serving `home` now (kwok's local processes): their pids. */
function readOnlySftpServers(home: string): number[] {
  return readdirSync("/proc")
    .filter((name) => /^\d+$/.test(name))
    .map(Number)
    .filter((pid) => {
      try {
        const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
        return readlinkSync(`/proc/${pid}/exe`) === SFTP_SERVER && argv.includes("-R") && argv.includes(home);
      } catch {
        return false; // gone meanwhile
      }
    });
}

/** What the process has open (the targets of /proc/<pid>/fd). */
function openFiles(pid: number): string[] {
  const files: string[] = [];
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      files.push(readlinkSync(`/proc/${pid}/fd/${fd}`));
    } catch {
      // closed meanwhile
    }
  }
  return files;
}

const stateOf = (pid: number) => /\) (\S)/.exec(readFileSync(`/proc/${pid}/stat`, "utf8"))?.[1];

/**
 * Waits for the backup's sftp-server (not one of `earlier`, an earlier backup's on its way out) and single-steps it (SIGSTOP, look, SIGCONT) until what it has open says the
 * backup is where `reached` wants it (listing a directory, copying a file): then leaves it stopped and returns its
 * pid. Every look is taken with the server stopped, so the moment is never missed (a listing of a few hundred
 * entries, or a file's copy, takes several round trips through the API server).
 */
async function stopWhen(
  home: string,
  reached: (open: readonly string[]) => boolean,
  earlier: ReadonlySet<number>,
  timeoutMs = 60_000,
): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  let pid: number | undefined;
  while (pid === undefined) {
    if (Date.now() > deadline) throw new Error(`no sftp-server of ${home} started`);
    pid = readOnlySftpServers(home).find((server) => !earlier.has(server));
    if (pid === undefined) await sleep(2);
  }
  for (;;) {
    process.kill(pid, "SIGSTOP");
    while (stateOf(pid) !== "T") await new Promise((resolve) => setImmediate(resolve));
    if (reached(openFiles(pid))) return pid;
    process.kill(pid, "SIGCONT");
    if (Date.now() > deadline) throw new Error(`the sftp-server never reached the moment to stop at`);
    await sleep(1);
  }
}

let cluster: KubeCluster;
let home: string;
let dir: string;
let gcs: FakeGcs;
/** Uploads as they reached the bucket: each request's URL and its whole body. */
let recorder: RecordingProxy;
let database: Awaited<ReturnType<typeof testDatabase>>;
let projects: ReturnType<typeof kubernetesProjects>;
let backups: KubernetesBackups;
/** A directory of the host's, as /etc/agent-sandbox is: root's, searchable, its key readable by root alone. */
let hostKeys: string;
/** A directory of the host's that only root may write (a restore must put nothing in it). */
let hostDir: string;
const secret = `the runtime's signing key ${randomBytes(16).toString("hex")}`;
const projectId = randomUUID();
const names = kubernetesTenantNames(projectId);
const bucket = "agent-sandbox-data";
const prefix = `projects/${projectId}/workspace/`;
const spec = kubernetesSpec(projectId) as unknown as TenantSpec;

/** Files in the home as the agent wrote them. */
function writeHome(files: Record<string, string>): void {
  for (const [name, content] of Object.entries(files)) {
    const file = path.join(home, name);
    mkdirSync(path.dirname(file), { recursive: true });
    writeFileSync(file, content);
  }
}

/** A link in the home, as the agent would make it. */
function plantLink(name: string, target: string): void {
  const link = path.join(home, name);
  mkdirSync(path.dirname(link), { recursive: true });
  rmSync(link, { recursive: true, force: true });
  symlinkSync(target, link);
}

/** Everything under the home is the agent's, links included (kwok's execs run as the agent); nothing is followed. */
function chownHome(at = home): void {
  for (const entry of readdirSync(at, { withFileTypes: true })) {
    const full = path.join(at, entry.name);
    lchownSync(full, AGENT_UID, AGENT_UID);
    if (entry.isDirectory()) chownHome(full);
  }
}

const recordedClaim = (claim: string) =>
  database.db.query(
    "update tenants set last_backup = jsonb_build_object('home_claim_uid', $2::text) where project_id = $1",
    [projectId, claim],
  );

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), "k8s-backup-links-"));
  home = mkdtempSync(path.join(os.tmpdir(), "kwok-home-"));
  chownSync(home, AGENT_UID, AGENT_UID);
  hostKeys = path.join(dir, "agent-sandbox");
  mkdirSync(hostKeys, { mode: 0o711 });
  writeFileSync(path.join(hostKeys, "secret"), secret, { mode: 0o600 });
  hostDir = path.join(dir, "host-only");
  mkdirSync(hostDir, { mode: 0o755 });
  // The test's directory is root's (mkdtemp: 0700); the agent must be able to reach the host's directories by
  // their paths, as a Pod's sftp-server reaches its own /etc.
  chmodSync(dir, 0o711);
  cluster = await startKubeCluster({
    workDir: home,
    runAsUser: AGENT_UID,
    runAsGroup: AGENT_UID,
    env: { HOME: home, PATH: "/usr/local/bin:/usr/bin:/bin" },
  });
  const created = async (apiPath: string, body: unknown) => {
    // The namespace's default service account comes from a controller, a moment after the namespace.
    await waitFor(`${apiPath} created`, 30_000, async () => {
      const response = await cluster.request("POST", apiPath, body);
      if (response.status === 201) return true;
      if (response.status === 403 || response.status === 404) return undefined;
      throw new Error(`${apiPath}: ${response.status} ${JSON.stringify(response.body)}`);
    });
  };
  await created("/api/v1/namespaces", { metadata: { name: names.namespace } });
  await created(`/api/v1/namespaces/${names.namespace}/persistentvolumeclaims`, {
    metadata: { name: names.homeClaim },
    spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "1Gi" } } },
  });
  await created(`/api/v1/namespaces/${names.namespace}/pods`, {
    metadata: { name: names.pod },
    spec: {
      nodeName: cluster.node,
      automountServiceAccountToken: false,
      containers: [{ name: names.container, image: "agent-sandbox/sandbox:test" }],
    },
  });
  await waitFor("the Pod running", 60_000, async () => {
    const pod = await cluster.request("GET", `/api/v1/namespaces/${names.namespace}/pods/${names.pod}`);
    return pod.body?.status?.phase === "Running" ? true : undefined;
  });
  const kubeconfigFile = path.join(dir, "kubeconfig");
  writeFileSync(kubeconfigFile, cluster.kubeconfig, { mode: 0o600 });
  projects = kubernetesProjects(kubeconfigFile);
  gcs = await startFakeGcs();
  await gcs.createBucket(bucket);
  recorder = await startRecordingProxy(gcs.host, { keepBodies: true });
  database = await testDatabase("pglite");
  await database.db.query(
    "insert into tenants (project_id, owner_id, spec, state) values ($1, 'owner', $2, 'running')",
    [projectId, JSON.stringify(spec)],
  );
  backups = new KubernetesBackups({
    exec: projects.exec,
    runnerOf: projects.runnerOf,
    homeClaimUid: projects.homeClaimUid,
    token: async () =>
      rcloneToken({ accessToken: "the-tenant-token", expiresAt: new Date(Date.now() + 3_600_000) }),
    storageEndpoint: `http://${recorder.host}`,
  });
}, 180_000);

afterAll(async () => {
  projects?.close();
  await recorder?.stop();
  await gcs?.stop();
  await database?.close();
  await cluster?.stop();
  rmSync(home, { recursive: true, force: true });
  rmSync(dir, { recursive: true, force: true });
});

describe("a kubernetes project's backups, when the tenant's links point out of its home", () => {
  it("a restore writes nothing through a link planted in the home: the bucket's objects are refused or land inside", async () => {
    // The bucket holds a backup whose paths run through names the tenant has made links of, each to a directory
    // of the host's that only root may write: at the top, deeper down, and the host's root itself.
    const throughRoot = path.join("slash", hostDir.slice(1), "through-root.txt");
    const objects: Record<string, string> = {
      "inside.txt": "an ordinary file\n",
      "planted/at-the-top.txt": "from the bucket\n",
      "nested/deeper/further-down.txt": "from the bucket\n",
      [throughRoot]: "from the bucket\n",
    };
    for (const [name, content] of Object.entries(objects))
      await gcs.write(bucket, `${prefix}${name}`, Buffer.from(content));
    plantLink("planted", hostDir);
    plantLink("nested/deeper", hostDir);
    plantLink("slash", "/");
    chownHome();

    const outcome = await backups.backUp(database.db, spec, "once");

    // Nothing reached the host's directory, by any of the links.
    expect(readdirSync(hostDir)).toEqual([]);
    // What the links would have carried out was refused, named; the rest landed inside the home.
    expect(outcome.ok, JSON.stringify(outcome)).toBe(false);
    expect((outcome as { why: string }).why).toMatch(/restoring the new home .* failed: /);
    expect(readFileSync(path.join(home, "inside.txt"), "utf8")).toBe("an ordinary file\n");
    // The links are as the tenant left them.
    expect(readlinkSync(path.join(home, "planted"))).toBe(hostDir);
    expect(readlinkSync(path.join(home, "slash"))).toBe("/");
  }, 180_000);

  /**
   * Each swap the tenant can make between the backup's listing and its copy, and the moment it is made at: the
   * Pod's sftp-server is stopped then, the swap made, and the server let go once every cache of the listing has
   * run out (what a stopped server gives the tenant for free). The home has a directory `work` with directories
   * and files that are listed and copied in order (rclone sorts), `zz` and `zz-secret-<case>` last of all.
   */
  const swaps: {
    readonly what: string;
    readonly stopWhen: (open: readonly string[]) => boolean;
    readonly swap: (secretFile: string) => string;
  }[] = [
    {
      what: "a directory listed in its parent, swapped for a link to the host's key directory before it is read",
      // While the directories listed before it are read, `zz` having been listed as a directory.
      stopWhen: (open) => open.some((file) => file.startsWith(path.join(home, "work", "a"))),
      swap() {
        const listed = path.join(home, "work", "zz");
        renameSync(listed, `${listed}.listed`);
        symlinkSync(hostKeys, listed);
        return listed;
      },
    },
    {
      what: "a file listed as a file, swapped for a link to the host's key before it is copied",
      // While the files listed before it are copied.
      stopWhen: (open) => open.some((file) => file.startsWith(path.join(home, "work", "f"))),
      swap(secretFile) {
        const listed = path.join(home, secretFile);
        rmSync(listed);
        symlinkSync(path.join(hostKeys, "secret"), listed);
        return listed;
      },
    },
  ];

  for (const [index, { what, stopWhen: moment, swap }] of swaps.entries())
    it(`no host file reaches the backup through ${what}`, async () => {
      // The home as the last backup left it (no restore now).
      for (const name of readdirSync(home)) rmSync(path.join(home, name), { recursive: true, force: true });
      await recordedClaim((await projects.homeClaimUid(projectId))!);
      // A file of this case's own name: one the bucket holds already is checked (read) before it is copied.
      const secretFile = `work/zz-secret-${index}`;
      const contents: Record<string, string> = {
        "work/zz/secret": "the tenant's own\n",
        // rclone refuses a file whose size or time changed while it was read: the tenant's file has the key's
        // (a key's size is no secret, and a time can be guessed), so only the link decides.
        [secretFile]: "x".repeat(secret.length),
      };
      for (let i = 0; i < 40; i++) contents[`work/a${String(i).padStart(3, "0")}/file`] = `file ${i}\n`;
      for (let i = 0; i < 200; i++) contents[`work/f${String(i).padStart(3, "0")}`] = `file ${i}\n`;
      writeHome(contents);
      const keyTime = KEY_TIME + index; // this case's own
      utimesSync(path.join(hostKeys, "secret"), keyTime, keyTime);
      utimesSync(path.join(home, secretFile), keyTime, keyTime);
      chownHome();
      const uploadsBefore = recorder.requests.length;

      const earlier = new Set(readOnlySftpServers(home));
      const backup: Promise<BackupOutcome> = backups.backUp(database.db, spec, "once");
      const server = await stopWhen(home, moment, earlier);
      const swapped = swap(secretFile);
      await sleep(PAUSE_MS);
      process.kill(server, "SIGCONT");
      const outcome = await backup;

      // No byte of the host's key went to the bucket, under any name, at any attempt of the sync.
      const uploads = recorder.requests.slice(uploadsBefore);
      expect(uploads.length).toBeGreaterThan(0);
      expect(uploads.filter(({ body }) => body?.includes(secret)).map(({ url }) => url)).toEqual([]);
      for (const name of await gcs.list(bucket, prefix))
        expect(await gcs.read(bucket, name), name).not.toContain(secret);
      // The rest of the home was backed up; what went through the link was refused (named), or kept as a link.
      expect(await gcs.read(bucket, `${prefix}work/f000`)).toBe("file 0\n");
      if (!outcome.ok) expect(outcome.why).toMatch(/symbolic links|not found|permission denied/i);
      expect(lstatSync(swapped).isSymbolicLink()).toBe(true);
    }, 240_000);
});
