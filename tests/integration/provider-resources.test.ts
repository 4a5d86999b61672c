// The provider's resource handlers on their own (no engine): CRUD against the real Docker engine and
// iptables, read after tampering, and the adoption rules a retried create relies on.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { dockerContainerHandler, DockerContainerInputs } from "../../provider/resources/docker-container.js";
import { dockerNetworkHandler, DockerNetworkInputs } from "../../provider/resources/docker-network.js";
import { dockerVolumeHandler, DockerVolumeInputs } from "../../provider/resources/docker-volume.js";
import { tenantFirewallHandler, TenantFirewallInputs } from "../../provider/resources/tenant-firewall.js";
import { buildSandboxImage } from "../../sandbox-image/build.js";
import { docker, uniqueName } from "../helpers/containers.js";

const run = promisify(execFile);
const cleanup: (() => Promise<unknown>)[] = [];
let image: string;

beforeAll(async () => {
  image = (await buildSandboxImage({ base: "local", log: () => undefined })).tag;
}, 900_000);

afterAll(async () => {
  for (const step of cleanup.reverse()) await step().catch(() => undefined);
});

describe("sandbox:docker:Volume", () => {
  it("creates, reads, refuses a foreign volume of the same name, adopts its own, deletes", async () => {
    const inputs = DockerVolumeInputs.parse({ name: uniqueName("prv-vol"), labels: { owner: "test" } });
    cleanup.push(() => docker("volume", "rm", "-f", inputs.name));
    const { id, outs } = await dockerVolumeHandler.create(inputs);
    expect(outs.mountpoint).toMatch(/^\/var\/lib\/docker\/volumes\/.*\/_data$/);
    expect(await dockerVolumeHandler.read(id, outs)).toEqual(outs);
    // A create retried after a crash finds its own volume and adopts it.
    expect((await dockerVolumeHandler.create(inputs)).id).toBe(id);
    // Someone else's volume of that name is never taken over.
    const foreign = DockerVolumeInputs.parse({ name: uniqueName("prv-foreign") });
    await docker("volume", "create", foreign.name);
    cleanup.push(() => docker("volume", "rm", "-f", foreign.name));
    await expect(dockerVolumeHandler.create(foreign)).rejects.toThrow(
      /already exists and is not this resource's/,
    );
    await dockerVolumeHandler.delete(id, outs);
    expect(await dockerVolumeHandler.read(id, outs)).toBeUndefined();
  });
});

describe("sandbox:docker:Network and sandbox:docker:Container", () => {
  let network: ReturnType<typeof DockerNetworkInputs.parse>;
  let networkId: string;

  beforeAll(async () => {
    network = DockerNetworkInputs.parse({
      name: uniqueName("prv-net"),
      subnet: "10.235.7.0/24",
      gateway: "10.235.7.1",
      bridgeName: uniqueName("sbxt").slice(0, 13),
      labels: { owner: "test" },
    });
    const created = await dockerNetworkHandler.create(network);
    networkId = created.id;
    cleanup.push(() => docker("network", "rm", network.name));
  });

  it("a network create retried after a crash adopts the network it made", async () => {
    expect((await dockerNetworkHandler.create(network)).id).toBe(networkId);
    await expect(
      dockerNetworkHandler.create({ ...network, subnet: "10.235.8.0/24", gateway: "10.235.8.1" }),
    ).rejects.toThrow(/already exists and is not this resource's/);
  });

  it("a container: hardened as declared, read back, stopped and started in place, drift seen, deleted", async () => {
    const inputs = DockerContainerInputs.parse({
      name: uniqueName("prv-ctr"),
      image,
      env: { SSH_PUBLIC_KEY: "" },
      labels: { owner: "test" },
      memoryBytes: 256 * 1024 * 1024,
      nanoCpus: 500_000_000,
      pidsLimit: 128,
      capAdd: ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "SYS_CHROOT", "KILL"],
      network: network.name,
      ipv4Address: "10.235.7.2",
      // A plain tmpfs and two sized ones (the engine keeps them apart: read must give back this order).
      mounts: [
        { type: "tmpfs", target: "/run" },
        { type: "tmpfs", target: "/tmp", tmpfs: { sizeBytes: 32 << 20, mode: 0o1777 } },
        { type: "tmpfs", target: "/var/tmp", tmpfs: { sizeBytes: 16 << 20, mode: 0o1777 } },
      ],
    });
    cleanup.push(() => docker("rm", "-f", inputs.name));
    const { id, outs } = await dockerContainerHandler.create(inputs);
    const info = JSON.parse(await docker("inspect", id))[0];
    expect(info.HostConfig).toMatchObject({
      CapDrop: ["ALL"],
      SecurityOpt: ["no-new-privileges"],
      Privileged: false,
      Dns: ["127.0.0.1"],
    });
    expect(info.NetworkSettings.Networks[network.name].IPAddress).toBe("10.235.7.2");
    // The sized tmpfs: its size and mode, and exec (a build or `go run` runs what it writes to /tmp).
    const tmp = await docker("exec", id, "sh", "-c", "grep ' /tmp ' /proc/mounts; stat -c %a /tmp");
    expect(tmp).toMatch(/^tmpfs \/tmp tmpfs rw,nosuid,nodev,relatime,size=32768k/);
    expect(tmp).not.toMatch(/noexec/);
    expect(tmp.trim().split("\n").at(-1)).toBe("1777");

    const observed = await dockerContainerHandler.read(id, outs);
    expect(observed).toEqual(outs);
    expect(await dockerContainerHandler.diff(id, observed!, inputs)).toMatchObject({ changes: false });

    const stopped = await dockerContainerHandler.update(id, outs, { ...inputs, running: false });
    expect(stopped.running).toBe(false);
    expect(await dockerContainerHandler.diff(id, stopped, inputs)).toMatchObject({
      changes: true,
      replaces: [],
    });
    expect((await dockerContainerHandler.update(id, stopped, inputs)).running).toBe(true);

    await docker("update", "--memory", "512m", "--memory-swap", "512m", id);
    const tampered = await dockerContainerHandler.read(id, outs);
    expect(await dockerContainerHandler.diff(id, tampered!, inputs)).toMatchObject({
      changes: true,
      replaces: [],
    });
    // Limits change in place: the same container, its processes untouched, the new limits in the engine.
    const pid = JSON.parse(await docker("inspect", id))[0].State.Pid;
    const relimited = { ...inputs, memoryBytes: 384 << 20, nanoCpus: 250_000_000, pidsLimit: 96 };
    expect(await dockerContainerHandler.diff(id, tampered!, relimited)).toMatchObject({ replaces: [] });
    const updated = await dockerContainerHandler.update(id, tampered!, relimited);
    expect(updated).toMatchObject({ memoryBytes: 384 << 20, nanoCpus: 250_000_000, pidsLimit: 96 });
    const after = JSON.parse(await docker("inspect", id))[0];
    expect([after.Id, after.State.Pid]).toEqual([id, pid]);
    expect(after.HostConfig).toMatchObject({
      Memory: 384 << 20,
      MemorySwap: 384 << 20,
      NanoCpus: 250_000_000,
      PidsLimit: 96,
    });
    // A memory limit the engine refuses (below its floor) fails the update and changes nothing.
    await expect(
      dockerContainerHandler.update(id, updated, { ...inputs, memoryBytes: 1 << 20 }),
    ).rejects.toThrow();
    expect(JSON.parse(await docker("inspect", id))[0].HostConfig.Memory).toBe(384 << 20);

    await dockerContainerHandler.delete(id, outs);
    expect(await dockerContainerHandler.read(id, outs)).toBeUndefined();
    await dockerContainerHandler.delete(id, outs); // already gone
  });

  it("refuses the engine socket, SYS_ADMIN, a size on a bind mount, and an image the engine does not have", async () => {
    const base = {
      name: "x1",
      image,
      memoryBytes: 256 << 20,
      nanoCpus: 1e9,
      pidsLimit: 64,
      network: "n",
      ipv4Address: "10.0.0.2",
    };
    const socket = DockerContainerInputs.safeParse({
      ...base,
      mounts: [{ type: "bind", source: "/var/run/docker.sock", target: "/d" }],
    });
    expect(socket.error?.issues[0]).toMatchObject({
      path: ["mounts", 0, "source"],
      message: expect.stringContaining("never mounted"),
    });
    expect(
      DockerContainerInputs.safeParse({ ...base, capAdd: ["SYS_ADMIN"] }).error?.issues[0]?.path,
    ).toEqual(["capAdd"]);
    expect(
      DockerContainerInputs.safeParse({
        ...base,
        mounts: [
          { type: "bind", source: "/srv", target: "/srv", tmpfs: { sizeBytes: 1 << 20, mode: 0o755 } },
        ],
      }).error?.issues[0],
    ).toMatchObject({
      path: ["mounts", 0, "tmpfs"],
      message: "only a tmpfs mount has a size and mode, not a bind mount",
    });
    const missing = DockerContainerInputs.parse({
      ...base,
      name: uniqueName("prv-missing"),
      image: "agent-sandbox/absent:0",
      network: network.name,
      ipv4Address: "10.235.7.9",
    });
    await expect(dockerContainerHandler.create(missing)).rejects.toThrow(
      "image agent-sandbox/absent:0 is not on the engine; build or pull it first",
    );
  });
});

/** A test tenant's firewall inputs on bridge `sbxt-fw<n>` and subnet 10.235.<9+n>.0/24, and its rules as `iptables -S` lists them. */
function firewallTenant(prefix: string, n: number) {
  const tenantId = uniqueName(prefix).slice(0, 12);
  const inputs = TenantFirewallInputs.parse({
    tenantId,
    bridge: `sbxt-fw${n}`,
    subnet: `10.235.${9 + n}.0/24`,
    gateway: `10.235.${9 + n}.1`,
    proxyPort: 3128,
  });
  const tagged = async () =>
    (await run("iptables", ["-w", "-S"])).stdout
      .split("\n")
      .filter((l) => l.includes(`agent-sandbox:tenant=${tenantId}"`));
  return { tenantId, inputs, tagged };
}

describe("sandbox:host:TenantFirewall", () => {
  it("adds the tenant's tagged rules, reads a deleted one as missing, restores it, deletes only its own", async () => {
    const { tenantId, inputs, tagged } = firewallTenant("fw", 0);
    const { id, outs } = await tenantFirewallHandler.create(inputs);
    cleanup.push(() => tenantFirewallHandler.delete(id, outs));
    expect(await tagged()).toHaveLength(7);
    expect(await tenantFirewallHandler.read(id, outs)).toMatchObject({ missing: [] });

    const [first] = await tagged();
    await run("sh", ["-c", `iptables -w ${first!.replace(/^-A /, "-D ")}`]);
    const drifted = await tenantFirewallHandler.read(id, outs);
    expect(drifted?.missing).toHaveLength(1);
    expect(await tenantFirewallHandler.diff(id, drifted!, inputs)).toMatchObject({ changes: true });
    await tenantFirewallHandler.update(id, drifted!, inputs);
    expect(await tagged()).toHaveLength(7);

    const neighbour = TenantFirewallInputs.parse({ ...inputs, tenantId: `${tenantId}x`, bridge: "sbxt-fw1" });
    const other = await tenantFirewallHandler.create(neighbour);
    cleanup.push(() => tenantFirewallHandler.delete(other.id, other.outs));
    await tenantFirewallHandler.delete(id, outs);
    expect(await tagged()).toEqual([]);
    expect((await tenantFirewallHandler.read(other.id, other.outs))?.missing).toEqual([]);
  });

  it("an update never leaves the bridge without the rule that drops its traffic, and ends with one set of rules", async () => {
    const { inputs, tagged } = firewallTenant("fwu", 2);
    const { id, outs } = await tenantFirewallHandler.create(inputs);
    cleanup.push(() => tenantFirewallHandler.delete(id, outs));
    const drop = (await tagged()).find((l) => / -i sbxt-fw2 .*-j DROP$/.test(l));
    expect(drop, (await tagged()).join("\n")).toBeDefined();
    // Looked for again and again while two updates (a new SSH port, then back) replace every rule.
    let updating = true;
    let checks = 0;
    let missed = 0;
    const watcher = (async () => {
      while (updating) {
        checks++;
        const present = await run("sh", ["-c", `iptables -w ${drop!.replace(/^-A /, "-C ")}`]).then(
          () => true,
          () => false,
        );
        if (!present) missed++;
      }
    })();
    const moved = TenantFirewallInputs.parse({ ...inputs, sshPort: 2299 });
    const after = await tenantFirewallHandler.update(id, outs, moved);
    await tenantFirewallHandler.update(id, after, inputs);
    updating = false;
    await watcher;
    expect(checks).toBeGreaterThan(3);
    expect(missed).toBe(0);
    expect(await tagged()).toHaveLength(7);
    expect(await tenantFirewallHandler.read(id, outs)).toMatchObject({ missing: [] });
  });
});
