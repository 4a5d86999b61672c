// Containers under gVisor (issue 48): `isolation: gvisor` runs a project's container under gVisor's runsc, a
// kernel in user space between the agent and the host's. The engine's runtime is probed as the microVM backend
// probes KVM; a project made with it through the API runs the sandbox image on gVisor's kernel (uname, runsc's process),
// with the terminal, SSH, exec, files and its backups as a runc container has them, and the tenant's egress
// wall around it. The attack table's privilege and egress classes from inside one: tests/security/.
import { execFile } from "node:child_process";
import * as os from "node:os";
import * as path from "node:path";
import { promises as fs } from "node:fs";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dockerClient } from "../../lib/docker-client.js";
import { waitFor } from "../../lib/process.js";
import { tenantAddresses } from "../../lib/subnets.js";
import { platformBackends } from "../../runtime/backends/registry.js";
import { detectGvisorSupport, gvisorCheck, type GvisorSupport } from "../../runtime/gvisor-support.js";
import { getTenant } from "../../runtime/store/tenants.js";
import { tenantDefaults, tenantDisksRoot } from "../../runtime/tenants/config.js";
import { apiHarness, type ApiHarness } from "../helpers/api.js";
import { sshOptions } from "../helpers/containers.js";
import { tenantLeftovers, testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { connectTerminal } from "../helpers/terminal-client.js";
import {
  egressProbe,
  METADATA_ADDRESS,
  startWorld,
  tcpProbe,
  WORLD_ADDRESS,
  type World,
} from "../helpers/world.js";

const exec = promisify(execFile);
let platform: TestPlatform;
let h: ApiHarness<"alice">;
let gvisor: GvisorSupport;
/** What the API is told about gVisor (the real probe's answer unless a test says). */
let told: () => GvisorSupport | undefined = () => gvisor;
let projectId: string;
let ssh: { port: number; privateKey: string };

beforeAll(async () => {
  platform = await testPlatform(
    { subnetPool: "10.211.0.0/23", sshPortRange: [29020, 29025], leaseSeconds: 30 },
    { hosts: { "allowed.gvisor.test": WORLD_ADDRESS, "denied.gvisor.test": WORLD_ADDRESS } },
  );
  gvisor = await detectGvisorSupport(dockerClient(), platform.config.tenants.image);
  const database = await testDatabase("pglite", { under: platform.config.host.dataDir });
  h = await apiHarness({
    database,
    config: platform.config,
    users: ["alice"],
    reconciler: true,
    terminal: true,
    server: { projects: { defaults: { ...tenantDefaults(platform.config), gvisor: () => told() } } },
  });
}, 600_000);

afterAll(async () => {
  await h?.close();
  await platform?.stop();
}, 300_000);

/** A script in the project's container as the agent, through the platform's runner (as exec reaches it). */
async function asAgent(script: string, id = projectId): Promise<{ code: number; out: string }> {
  const runner = await platformBackends({ docker: () => dockerClient() }).runners(h.db)(id);
  const { exitCode, stdout, stderr } = await runner.run(["bash", "-c", script], { timeoutMs: 120_000 });
  return { code: exitCode, out: stdout + stderr };
}

/**
 * What a runsc that passed the probe would be: this host's is refused by it (its exec's defect, below), so the
 * container path under the real runsc is driven past that decision (`told`), and the defect shown in a tenant.
 */
const PASSED = (kernel: string): GvisorSupport => ({ available: true, runtime: "runsc", kernel, ms: 0 });

describe("containers under gVisor", () => {
  it("the engine's probe: runsc runs the sandbox image on gVisor's kernel; Debian 12's is refused for what its exec lets a user do", () => {
    console.log(`gVisor probe: ${JSON.stringify(gvisor)}`);
    if (gvisor.available) expect(gvisor.kernel).toMatch(/gVisor/);
    else
      expect(gvisor.reason).toMatch(
        /^runsc runs the sandbox image on gVisor's kernel \(.*gVisor.*\), but a process it execs in a running sandbox as an unprivileged user \(uid 65534\) (appended to root's \/etc\/passwd|signalled root's PID 1)/,
      );
    expect(gvisorCheck(gvisor, true)).toMatchObject({ name: "gvisor", ready: gvisor.available });
    expect(gvisorCheck(gvisor, false)).toMatchObject({ name: "gvisor", ready: true });
    expect(gvisorCheck(undefined, true)).toMatchObject({ ready: false, detail: "still probing the engine" });
  });

  it("refuses gVisor where the probe did, or for a backend that is no container, naming why; nothing is made", async () => {
    const refusedBy = gvisor.available
      ? ({ available: false, reason: "the container engine offers no runsc runtime (a test's)" } as const)
      : gvisor;
    told = () => refusedBy;
    const refused = await h.as("alice", "POST", "/projects", { name: "nope", isolation: "gvisor" });
    expect(refused.statusCode, refused.body).toBe(409);
    expect(refused.json().message).toBe(
      `isolation gvisor is not available on this host: ${refusedBy.reason}`,
    );
    const microvm = await h.as("alice", "POST", "/projects", {
      name: "nope",
      backend: "microvm",
      isolation: "gvisor",
    });
    expect(microvm.statusCode, microvm.body).toBe(400);
    expect(microvm.json().message).toBe(
      "invalid body: isolation: is a container's choice of runtime: a project of another backend takes none",
    );
    const unknown = await h.as("alice", "POST", "/projects", { name: "nope", isolation: "kata" });
    expect(unknown.statusCode).toBe(400);
    expect(JSON.stringify(unknown.json().details)).toContain("isolation");
    expect((await h.as("alice", "GET", "/projects")).json().projects).toEqual([]);
    // From here on, the container path under the real runsc, as on a host whose runsc passes the probe.
    told = () => (gvisor.available ? gvisor : PASSED("4.4.0 (this host's runsc, driven past its refusal)"));
  });

  it("create with isolation gvisor → running, under runsc, the view saying so", async () => {
    const started = Date.now();
    const created = await h.as("alice", "POST", "/projects", {
      name: "under-gvisor",
      isolation: "gvisor",
      allowlist: ["allowed.gvisor.test"],
    });
    expect(created.statusCode, created.body).toBe(202);
    projectId = created.json().project_id;
    ssh = { port: created.json().ssh.port, privateKey: created.json().ssh.private_key };
    await h.waitForStatus("alice", projectId, "running", 300_000);
    console.log(`gVisor project create → running: ${Date.now() - started} ms`);
    expect((await h.as("alice", "GET", `/projects/${projectId}`)).json()).toMatchObject({
      backend: "container",
      isolation: "gvisor",
      accelerator: null,
    });
    const info = await dockerClient().getContainer(`sbx-${projectId}`).inspect();
    expect(info.HostConfig.Runtime).toBe("runsc");
    // Hardened as a runc container is: every capability dropped but the entrypoint's, no new privileges.
    expect(info.HostConfig.CapDrop).toEqual(["ALL"]);
    expect(info.HostConfig.SecurityOpt).toContain("no-new-privileges");
  }, 360_000);

  it("inside: gVisor's kernel, not the host's, and the agent's processes are gVisor's alone", async () => {
    const { out: release } = await asAgent("uname -r");
    expect(release.trim()).not.toBe(os.release());
    // The host sees the sandbox as runsc's process, not as the image's entrypoint.
    const { State } = await dockerClient().getContainer(`sbx-${projectId}`).inspect();
    const cmdline = (await fs.readFile(`/proc/${State.Pid}/cmdline`, "utf8")).split("\0");
    expect(cmdline[0]).toBe("runsc-sandbox");
    // The sandbox's processes (its entrypoint's, then supervisord's programs) as the agent sees them; none of
    // the host's.
    const processes = await waitFor("supervisord in the sandbox", 120_000, async () => {
      const { out } = await asAgent("ps -eo comm= | sort -u");
      return /supervisord/.test(out) ? out : undefined;
    });
    expect(processes).not.toMatch(/dockerd|containerd|vitest|qemu/);
  });

  it("exec and files, SSH with the create's key, and the terminal's echo round trip", async () => {
    const ran = await h.as("alice", "POST", `/projects/${projectId}/exec`, {
      command: ["bash", "-c", "echo out; echo err >&2; exit 3"],
    });
    expect(ran.statusCode, ran.body).toBe(200);
    expect(ran.json()).toMatchObject({ exit_code: 3, stdout: "out\n", stderr: "err\n" });
    const wrote = await h.as("alice", "POST", `/projects/${projectId}/exec`, {
      command: ["bash", "-c", "cat > ~/kept.txt"],
      stdin: "kept-under-gvisor\n",
    });
    expect(wrote.json()).toMatchObject({ exit_code: 0 });
    const read = await h.as(
      "alice",
      "GET",
      `/projects/${projectId}/files/content?${new URLSearchParams({ path: "/home/agent/kept.txt" })}`,
    );
    expect(read.statusCode, read.body).toBe(200);
    expect(read.body).toBe("kept-under-gvisor\n");

    const keyFile = path.join(platform.config.host.dataDir, "gvisor-project-key");
    await fs.writeFile(keyFile, ssh.privateKey, { mode: 0o600 });
    // Its sshd listens once the entrypoint has made its host keys (slower under gVisor than under runc).
    const sshArgs = ["-i", keyFile, "-p", String(ssh.port), ...sshOptions(20), "agent@127.0.0.1"];
    const stdout = await waitFor("the sandbox's sshd", 120_000, async () =>
      exec("ssh", [...sshArgs, "cat ~/kept.txt; uname -r"], { timeout: 60_000 }).then(
        (done) => done.stdout,
        () => undefined,
      ),
    );
    expect(stdout.split("\n")[0]).toBe("kept-under-gvisor");
    expect(stdout.split("\n")[1]).not.toBe(os.release());

    const project = (await h.as("alice", "GET", `/projects/${projectId}`)).json();
    const client = connectTerminal(project.terminal_url);
    try {
      client.type("echo round-$((40+2))\r");
      await client.waitFor("round-42", 60_000);
    } finally {
      client.close();
    }
  }, 180_000);

  it("what the probe refuses, in a tenant: the platform's exec as the agent holds, or (Debian 12's runsc) writes root's files", async () => {
    // The agent's own SSH session is a process of the sandbox (sshd's child): refused as under runc.
    const keyFile = path.join(platform.config.host.dataDir, "gvisor-project-key");
    const sshArgs = ["-i", keyFile, "-p", String(ssh.port), ...sshOptions(20), "agent@127.0.0.1"];
    const overSsh = await exec("ssh", [
      ...sshArgs,
      "echo x >> /etc/passwd 2>/dev/null && echo wrote || echo refused",
    ]);
    expect(overSsh.stdout.trim()).toBe("refused");
    // The platform's exec (runsc's exec): what the probe found, in the tenant's sandbox.
    const exec_ = await asAgent(
      "cp /etc/passwd /tmp/passwd.kept; echo x >> /etc/passwd 2>/dev/null && echo wrote || echo refused",
    );
    console.log(`the platform's exec as the agent, appending to root's /etc/passwd: ${exec_.out.trim()}`);
    expect(exec_.out.trim()).toBe(gvisor.available ? "refused" : "wrote");
  });

  it("a fork keeps its source's isolation: where gVisor is refused, so is the fork, and nothing of it is left", async () => {
    const passed = told;
    told = () => ({ available: false, reason: "the probe's refusal (a test's)" });
    try {
      const forked = await h.as("alice", "POST", `/projects/${projectId}/fork`, { count: 2 });
      expect(forked.statusCode, forked.body).toBe(409);
      expect(forked.json().message).toBe(
        "isolation gvisor is not available on this host: the probe's refusal (a test's)",
      );
    } finally {
      told = passed;
    }
    // No fork's directory or staged copy: only the source's home is on the disks.
    expect(await fs.readdir(tenantDisksRoot(platform.config))).toEqual([projectId]);
    expect((await h.as("alice", "GET", "/projects")).json().projects).toHaveLength(1);
  });

  it("stop takes its final backup and keeps the home; start runs it under gVisor again", async () => {
    expect((await asAgent("echo before-stop > ~/stop.txt")).code).toBe(0);
    expect((await h.as("alice", "POST", `/projects/${projectId}/stop`)).statusCode).toBe(202);
    await h.waitForStatus("alice", projectId, "stopped", 180_000);
    const status = (await h.as("alice", "GET", `/projects/${projectId}/backup-status`)).json();
    expect(status, JSON.stringify(status)).toMatchObject({ last_result: "ok" });
    expect((await h.as("alice", "POST", `/projects/${projectId}/start`)).statusCode).toBe(202);
    await h.waitForStatus("alice", projectId, "running", 180_000);
    expect((await asAgent("cat ~/stop.txt ~/kept.txt")).out).toBe("before-stop\nkept-under-gvisor\n");
    const info = await dockerClient().getContainer(`sbx-${projectId}`).inspect();
    expect(info.HostConfig.Runtime).toBe("runsc");
  }, 420_000);

  describe("with the internet in its namespace", () => {
    let world: World | undefined;
    beforeAll(async () => {
      world = await startWorld();
    }, 1_800_000);
    afterAll(() => world?.stop());

    it("egress: only the allowlist through the proxy; nothing direct, no metadata, no host ports, no other range", async () => {
      const tenant = (await getTenant(h.db, projectId))!;
      const { gateway } = tenantAddresses(tenant.spec.subnet);
      const [probe, tcp] = [egressProbe, tcpProbe];
      const { out } = await asAgent(
        [
          `curl -fsS --max-time 10 http://allowed.gvisor.test/ | grep -q world: && echo "allowed ok" || echo "allowed FAILED"`,
          probe("denied-name", "curl -fsS --max-time 10 http://denied.gvisor.test/"),
          probe("ip-literal", `curl -fsS --max-time 10 http://${WORLD_ADDRESS}/`),
          probe("direct-80", tcp(WORLD_ADDRESS, 80)),
          probe("direct-443", tcp(WORLD_ADDRESS, 443)),
          probe("metadata-direct", tcp(METADATA_ADDRESS, 80)),
          probe("metadata-proxy", `curl -fsS --max-time 10 http://${METADATA_ADDRESS}/`),
          probe("gateway-ssh", tcp(gateway, 22)),
          probe("private-range", tcp("10.255.255.2", 80)),
          probe(
            "udp-dns",
            `timeout 5 python3 -c "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3); s.sendto(b'x', ('${WORLD_ADDRESS}', 53)); s.recv(1)"`,
          ),
          "wait",
        ].join("\n"),
      );
      console.log(out);
      expect(out).toContain("allowed ok");
      expect(out).not.toContain("THROUGH");
      expect(out.match(/ blocked$/gm)?.length).toBe(9);
    }, 180_000);
  });

  it("delete leaves no container, network, rule or file", async () => {
    expect((await h.as("alice", "DELETE", `/projects/${projectId}`)).statusCode).toBe(202);
    await h.waitForStatus("alice", projectId, "gone", 300_000);
    expect(await tenantLeftovers(platform.config.host, projectId)).toEqual([]);
  }, 360_000);
});
