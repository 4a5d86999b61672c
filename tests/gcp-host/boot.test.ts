// The GCP host's startup script, run for real (issue 21): the script the platform stack renders
// (stacks/platform/gcp.ts startupScriptInput, components/gcp/startup-script.ts) boots a fresh Debian 13 system
// with systemd as PID 1, its data disk a loop device named as GCE names it, until the runtime behind the TLS
// front door answers /healthz ready. Run by `npm run test:gcp-host` (scripts/test-gcp-host.sh), not `npm test`:
// it takes minutes and a Docker engine of its own.
//
// What stands in for Google, on this machine: the metadata server (startup-script, the VM's tokens), GCS
// (fake-gcs-server, holding the release the script fetches and the bucket the runtime checks), Artifact
// Registry (a registry with the sandbox and Postgres images), the package mirror (every package the script
// installs, downloaded by scripts/gcp-host-fixtures.sh) and get.pulumi.com (this checkout's Pulumi CLI, the
// version the stack pins, put where the script would install it). The VM reaches nothing else: its network
// is internal, and the names it resolves to Google point at this test's servers, with a CA it trusts.
// What is not run: `pulumi plugin install resource gcp` (no GCP provider plugin exists here: the input's
// plugin list is empty; tenant stacks on GCP need it, the runtime's readiness does not).
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { request as httpsRequest } from "node:https";
import { request as httpRequest } from "node:http";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { contentDigest, listFiles } from "../../components/gcp/content-digest.js";
import { RELEASE_ENTRIES } from "../../components/gcp/runtime-release.js";
import {
  CADDY_STORAGE_DIR,
  DATA_DISK_DEVICE,
  renderStartupScript,
} from "../../components/gcp/startup-script.js";
import { GCP } from "../../lib/constants.js";
import { run, waitFor } from "../../lib/process.js";
import { REPO_ROOT, toolchain } from "../../lib/toolchain.js";
import { parseStackConfig } from "../../stacks/config.js";
import { startupScriptInput } from "../../stacks/platform/gcp.js";
import { startFakeGcs, type FakeGcs } from "../helpers/fake-gcs.js";
import { startMetadataServer, startTlsRouter, type MetadataServer, type TlsRouter } from "../helpers/gce.js";
import { freePort } from "../helpers/host.js";
import { makeTestCertificates } from "../helpers/tls.js";

interface Fixtures {
  readonly key: string;
  readonly rootImage: string;
  readonly postgresImage: string;
  readonly aptRepo: string;
  readonly packages: string;
}

const fixturesFile = process.env.AGENT_SANDBOX_GCP_HOST_FIXTURES;
const PROJECT_ID = "sandbox-host-test";
const REGION = "europe-west1";
const REGISTRY_HOST = `${REGION}-docker.pkg.dev`;
const REGISTRY_PATH = `${REGISTRY_HOST}/${PROJECT_ID}/agent-sandbox`;
const DOMAIN = "sandboxes.example.test";
const BUCKET = `${PROJECT_ID}-data`;
/** The VM's network: internal (no route out); its gateway, this machine, is where Google's names resolve. */
const SUBNET = "169.254.169.0/24";
const GOOGLE = "169.254.169.254";
const VM_ADDRESS = "169.254.169.10";
const STARTUP_TIMEOUT_MS = 25 * 60_000;

const id = randomBytes(3).toString("hex");
const names = { container: `agent-sandbox-gcp-host-${id}`, network: `agent-sandbox-gcp-host-${id}` };
const timings: [string, number][] = [];
/** The startup script's steps and the seconds each took, from its journal. */
const stepTimes: [string, number][] = [];
const timed = async <T>(what: string, action: () => Promise<T>): Promise<T> => {
  const started = Date.now();
  try {
    return await action();
  } finally {
    timings.push([what, Date.now() - started]);
  }
};

const docker = (args: string[], timeoutMs = 120_000) => run("docker", args, timeoutMs);
const inVm = (command: string, timeoutMs = 60_000) =>
  docker(["exec", names.container, "bash", "-c", command], timeoutMs);

let work: string;
let loopDevice: string | undefined;
let gcs: FakeGcs | undefined;
let metadata: MetadataServer | undefined;
let router: TlsRouter | undefined;
let registry: { stop(): void } | undefined;
let startupScript: string;
let apiPort: number;
let caddyRoot: string;
let startupFailure: string | undefined;

/** The Debian registry (docker-registry) on loopback: Artifact Registry's stand-in, behind the TLS router. */
async function startRegistry(storage: string): Promise<{ host: string; stop(): void }> {
  const port = await freePort();
  const config = path.join(work, "registry.yml");
  writeFileSync(
    config,
    [
      "version: 0.1",
      "log: {level: warn}",
      `storage: {filesystem: {rootdirectory: ${storage}}, delete: {enabled: true}}`,
      `http: {addr: 127.0.0.1:${port}}`,
      "",
    ].join("\n"),
  );
  const child = spawn("docker-registry", ["serve", config], { stdio: "ignore" });
  const host = `127.0.0.1:${port}`;
  await waitFor(`registry on ${host}`, 15_000, async () => {
    if (child.exitCode !== null) throw new Error(`docker-registry exited ${child.exitCode}`);
    return (await fetch(`http://${host}/v2/`)).ok ? true : undefined;
  });
  return { host, stop: () => child.kill("SIGTERM") };
}

/** Pushes a local image to the test registry as `<REGISTRY_PATH>/<name>`; returns the name the VM pulls. */
async function publish(registryHost: string, image: string, name: string): Promise<string> {
  const local = `${registryHost}/${PROJECT_ID}/agent-sandbox/${name}`;
  await docker(["tag", image, local]);
  try {
    await docker(["push", local], 15 * 60_000);
  } finally {
    await docker(["rmi", local]).catch(() => undefined);
  }
  return `${REGISTRY_PATH}/${name}`;
}

/** A GET through the VM's front door, as a client on the internet would send it (SNI and Host: the domain). */
function viaFrontDoor(
  scheme: "http" | "https",
  urlPath: string,
): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  return new Promise((resolve, reject) => {
    const options = {
      host: VM_ADDRESS,
      port: scheme === "https" ? GCP.httpsPort : GCP.httpPort,
      path: urlPath,
      headers: { host: DOMAIN },
      timeout: 10_000,
      ...(scheme === "https" ? { servername: DOMAIN, ca: caddyRoot } : {}),
    };
    const request = (scheme === "https" ? httpsRequest : httpRequest)(options, (response) => {
      let body = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => (body += chunk));
      response.on("end", () =>
        resolve({ status: response.statusCode ?? 0, headers: response.headers, body }),
      );
    });
    request.on("timeout", () => request.destroy(new Error(`${scheme}://${DOMAIN}${urlPath} timed out`)));
    request.on("error", reject);
    request.end();
  });
}

describe.skipIf(!fixturesFile)("the GCP host's startup script, booted in a fresh Debian root", () => {
  beforeAll(
    async () => {
      const fixtures = JSON.parse(readFileSync(fixturesFile!, "utf8")) as Fixtures;
      work = mkdtempSync(path.join(os.tmpdir(), "gcp-host-"));

      // The platform's config, as an operator writes it; the front door's certificate from Caddy's own CA
      // (ACME is run for real in tests/integration/front-door-tls.test.ts).
      const config = parseStackConfig(
        {
          "agent-sandbox:target": "gcp",
          "agent-sandbox:gcp": {
            project: PROJECT_ID,
            region: REGION,
            bucket: BUCKET,
            domain: DOMAIN,
            tls: { issuer: "internal" },
            postgresImage: `${REGISTRY_PATH}/postgres:15`,
          },
        },
        "Pulumi.gcp-host-test.yaml",
      );
      apiPort = config.runtime.apiPort;

      // GCS: the bucket in the platform's region, with the release the stack would upload.
      gcs = await startFakeGcs(REGION.toUpperCase());
      await gcs.createBucket(BUCKET);
      const digest = contentDigest(REPO_ROOT, RELEASE_ENTRIES);
      const releaseObject = `${GCP.releasesPrefix}agent-sandbox-${digest}.zip`;
      const zip = path.join(work, "release.zip");
      execFileSync("zip", ["-q", "-X", zip, "-@"], {
        cwd: REPO_ROOT,
        input: listFiles(REPO_ROOT, RELEASE_ENTRIES).join("\n"),
      });
      await gcs.write(BUCKET, releaseObject, readFileSync(zip), "application/zip");

      // Artifact Registry: the sandbox image (as the stack's SandboxImage pushes it) and Postgres.
      const storage = path.join(path.dirname(fixtures.aptRepo), "..", "registry");
      mkdirSync(storage, { recursive: true });
      const reg = await startRegistry(storage);
      registry = reg;
      const sandboxTag = (
        await docker(["image", "inspect", "-f", "{{.Id}}", "agent-sandbox/sandbox:latest"])
      ).stdout
        .trim()
        .replace("sha256:", "")
        .slice(0, 12);
      const [sandboxImage] = await timed("push the images to the registry", () =>
        Promise.all([
          publish(reg.host, "agent-sandbox/sandbox:latest", `sandbox:${sandboxTag}`),
          publish(reg.host, fixtures.postgresImage, "postgres:15"),
        ]),
      );

      startupScript = renderStartupScript(
        startupScriptInput(config, {
          projectServiceEmail: `agent-sandbox-projects@${PROJECT_ID}.iam.gserviceaccount.com`,
          sandboxImage: sandboxImage!,
          registryPath: REGISTRY_PATH,
          release: { bucket: BUCKET, object: releaseObject, digest },
          plugins: [],
        }),
      );
      writeFileSync(path.join(work, "startup-script.sh"), startupScript);

      // The VM's network, and Google on its gateway.
      await docker([
        ...["network", "create", "--internal", "--subnet", SUBNET, "--gateway", GOOGLE],
        ...["--label", "agent-sandbox.test=gcp-host", names.network],
      ]);
      metadata = await startMetadataServer({
        address: GOOGLE,
        port: 80,
        projectId: PROJECT_ID,
        serviceAccountEmail: `agent-sandbox-host@${PROJECT_ID}.iam.gserviceaccount.com`,
        attributes: { "startup-script": startupScript },
      });
      const ca = await makeTestCertificates(mkdtempSync(path.join(work, "ca-")), "agent-sandbox test CA", [
        "DNS:storage.googleapis.com",
        `DNS:${REGISTRY_HOST}`,
      ]);
      router = await startTlsRouter(GOOGLE, 443, ca, {
        "storage.googleapis.com": { target: gcs.host, rewriteHost: true },
        [REGISTRY_HOST]: { target: reg.host },
      });

      // The data disk, attached as GCE attaches a disk named agent-sandbox-data.
      const image = path.join(work, "data.img");
      execFileSync("truncate", ["-s", "40G", image]);
      loopDevice = execFileSync("losetup", ["--find", "--show", image], { encoding: "utf8" }).trim();

      // A fresh Debian 13 system, systemd as PID 1 (cgroup v1 hosts: systemd 257 boots on them when forced).
      await timed("boot Debian 13 to systemd's multi-user target", async () => {
        await docker([
          ...["run", "-d", "--name", names.container, "--hostname", "agent-sandbox-host"],
          ...["--label", "agent-sandbox.test=gcp-host"],
          // Every capability this machine has (it lacks CAP_SYS_RESOURCE, which --privileged would ask for).
          ...["--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE"],
          ...["--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined"],
          ...["--security-opt", "systempaths=unconfined", "--device-cgroup-rule", "a *:* rwm"],
          // /run as systemd mounts it on a VM (executable: Docker's tmpfs default is noexec).
          ...[
            "-v",
            "/sys/fs/cgroup:/sys/fs/cgroup:rw",
            "--tmpfs",
            "/run:exec,mode=755",
            "--tmpfs",
            "/run/lock",
          ],
          ...["-v", `${fixtures.aptRepo}:/srv/agent-sandbox-apt:ro`, "--device", loopDevice!],
          ...["--network", names.network, "--ip", VM_ADDRESS],
          ...["--add-host", `metadata.google.internal:${GOOGLE}`],
          ...["--add-host", `storage.googleapis.com:${GOOGLE}`, "--add-host", `${REGISTRY_HOST}:${GOOGLE}`],
          ...["-e", "container=docker", fixtures.rootImage],
          ...["/sbin/init", "SYSTEMD_CGROUP_ENABLE_LEGACY_FORCE=1"],
        ]);
        await waitFor("systemd in the VM", 60_000, async () => {
          const state = await inVm("systemctl is-system-running || true");
          return /^(running|degraded)$/m.test(state.stdout) ? true : undefined;
        });
      });

      // What the VM finds in place before its first boot's script runs: the disk's device name, Google's CA
      // among the trusted, the npm registry's packages (the VM's npm has no network here: offline, from the
      // cache) and the Pulumi CLI get.pulumi.com would install.
      await inVm(
        `install -d /dev/disk/by-id && ln -s ${loopDevice} /dev/disk/by-id/google-${DATA_DISK_DEVICE}`,
      );
      writeFileSync(path.join(work, "google-test-ca.crt"), ca.caCert);
      await docker([
        "cp",
        path.join(work, "google-test-ca.crt"),
        `${names.container}:/usr/local/share/ca-certificates/`,
      ]);
      await inVm("update-ca-certificates >/dev/null");
      const npmCache = execFileSync("npm", ["config", "get", "cache"], { encoding: "utf8" }).trim();
      await timed("copy the npm cache and the Pulumi CLI in", async () => {
        await inVm(
          "install -d /root/.npm && printf 'offline=true\\nfund=false\\naudit=false\\n' >/root/.npmrc",
        );
        await docker(["cp", `${npmCache}/_cacache`, `${names.container}:/root/.npm/`], 300_000);
        const pulumiDir = path.dirname(toolchain().pulumiBin);
        const target = `/var/cache/agent-sandbox/${path.basename(path.dirname(pulumiDir))}/bin`;
        await inVm(`install -d ${target}`);
        for (const file of ["pulumi", "pulumi-language-nodejs", ".pulumi-language-nodejs.stamp"])
          await docker(["cp", "-L", path.join(pulumiDir, file), `${names.container}:${target}/${file}`]);
      });

      // GCE's agent runs the startup script once the VM is up.
      await timed("the startup script (packages, release, npm run setup, images, services)", async () => {
        await inVm("systemctl start --no-block google-startup-scripts.service");
        const result = await waitFor("the startup script", STARTUP_TIMEOUT_MS, async () => {
          await new Promise((resolve) => setTimeout(resolve, 2_000)); // not an exec every 100 ms for minutes
          // `systemctl show` prints the properties in its own order: read them by name.
          const { stdout } = await inVm(
            "systemctl show google-startup-scripts.service -p ActiveState -p Result",
          );
          const state = Object.fromEntries(
            stdout
              .trim()
              .split("\n")
              .map((line) => line.split("=", 2)),
          );
          return state.ActiveState === "activating" ? undefined : (state.Result as string);
        });
        const journal = (await inVm("journalctl -u google-startup-scripts.service --no-pager -o cat", 60_000))
          .stdout;
        writeFileSync(path.join(work, "startup-script.log"), journal);
        mkdirSync(path.join(REPO_ROOT, "test-artifacts"), { recursive: true });
        writeFileSync(path.join(REPO_ROOT, "test-artifacts", "gcp-host-startup-script.log"), journal);
        // Each step's time, from the script's own marks (`<step> (at <seconds> s)`, `done in <seconds> s`).
        const marks = [...journal.matchAll(/^agent-sandbox startup: (.+) \(at (\d+) s\)$/gm)].map(
          (match) => [match[1]!, Number(match[2])] as const,
        );
        const done = /^agent-sandbox startup: done in (\d+) s$/m.exec(journal);
        marks.forEach(([step, at], index) => {
          const next = index + 1 < marks.length ? marks[index + 1]![1] : done ? Number(done[1]) : undefined;
          if (next !== undefined) stepTimes.push([step, next - at]);
        });
        if (result !== "success")
          startupFailure = `the startup script ended with ${result}:\n${journal.split("\n").slice(-40).join("\n")}`;
      });
      caddyRoot = (
        await inVm(`cat ${CADDY_STORAGE_DIR}/pki/authorities/local/root.crt`).catch(() => ({ stdout: "" }))
      ).stdout;
    },
    STARTUP_TIMEOUT_MS + 30 * 60_000,
  );

  afterAll(async () => {
    const total = timings.reduce((sum, [, ms]) => sum + ms, 0);
    console.log(
      [
        "GCP host boot (tests/gcp-host/boot.test.ts):",
        ...timings.map(([what, ms]) => `  ${(ms / 1000).toFixed(1).padStart(7)} s  ${what}`),
        "  the startup script's steps:",
        ...stepTimes.map(([step, seconds]) => `  ${String(seconds).padStart(7)} s    ${step}`),
        `  ${(total / 1000).toFixed(1).padStart(7)} s  in all`,
      ].join("\n"),
    );
    // The servers go in any case (they die with this process, but the registry would not).
    await router?.close();
    await metadata?.close();
    registry?.stop();
    await gcs?.stop();
    if (process.env.AGENT_SANDBOX_GCP_HOST_KEEP) {
      console.log(`kept: container ${names.container}, network ${names.network}, ${loopDevice}, ${work}`);
      return;
    }
    const containerId = (
      await docker(["inspect", "-f", "{{.Id}}", names.container]).catch(() => ({ stdout: "" }))
    ).stdout.trim();
    await docker(["rm", "-f", "-v", names.container], 180_000).catch(() => undefined);
    await docker(["network", "rm", names.network]).catch(() => undefined);
    // The VM's systemd made cgroups under its container's (the host's hierarchies were its own): rmdir them.
    if (containerId)
      execFileSync("sh", [
        "-c",
        `for d in /sys/fs/cgroup/*/docker/${containerId}; do [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null; done; true`,
      ]);
    if (loopDevice) execFileSync("losetup", ["-d", loopDevice]);
    if (work) rmSync(work, { recursive: true, force: true });
  }, 300_000);

  it("runs to its end under systemd, every step of it", () => {
    expect(startupFailure).toBeUndefined();
  });

  it("fetched what it needs as the VM: its script and tokens with the metadata header, the release with a token", () => {
    expect(metadata!.requests.every((request) => request.flavor === "Google")).toBe(true);
    expect(metadata!.requests.map((request) => request.path)).toContain(
      "/computeMetadata/v1/instance/attributes/startup-script",
    );
    const release = router!.requests.find(
      (request) => request.host === "storage.googleapis.com" && request.path.includes("/o/releases%2F"),
    );
    expect(release?.authorization).toMatch(/^Bearer ya29\.test-/);
    expect(metadata!.tokens).toContain(release!.authorization!.slice("Bearer ".length));
  });

  it("brings the runtime up ready behind the TLS front door, and plain HTTP only redirects", async () => {
    expect(caddyRoot).toContain("BEGIN CERTIFICATE");
    const ready = await timed("the runtime's /healthz ready through the front door", () =>
      waitFor("https://<domain>/healthz ready", 180_000, async () => {
        const answer = await viaFrontDoor("https", "/healthz");
        return answer.status === 200 ? answer : undefined;
      }),
    );
    expect(JSON.parse(ready.body)).toMatchObject({ status: "ready" });
    const plain = await viaFrontDoor("http", "/healthz");
    expect(plain.status).toBe(308);
    expect(plain.headers.location).toBe(`https://${DOMAIN}/healthz`);
  });

  it("has every prerequisite the runtime checks met on the host itself, and each host service active", async () => {
    const local = await inVm(`curl -fsS http://127.0.0.1:${apiPort}/healthz`);
    const report = JSON.parse(local.stdout) as { status: string; checks: { name: string; ready: boolean }[] };
    console.log(`/healthz on the VM: ${JSON.stringify(report)}`);
    expect(report.status).toBe("ready");
    expect(report.checks.filter((check) => !check.ready)).toEqual([]);
    expect(report.checks.map((check) => check.name)).toEqual(
      expect.arrayContaining(["pulumi", "container-engine", "squid", "database", "bucket"]),
    );
    const units = [
      "docker",
      "agent-sandbox-firewall",
      "agent-sandbox-squid",
      "agent-sandbox-postgres",
      "agent-sandbox-caddy",
      "agent-sandbox-runtime",
    ];
    const states = await inVm(
      `systemctl is-active ${units.map((unit) => `${unit}.service`).join(" ")} || true`,
    );
    expect(states.stdout.trim().split("\n")).toEqual(units.map(() => "active"));
    // The data disk holds what must outlive a new boot disk.
    const mounts = await inVm(`findmnt -n -o SOURCE ${GCP.dataMount}`);
    expect(mounts.stdout.trim()).toBe(loopDevice);
  });
});
