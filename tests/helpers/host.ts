import { chmodSync, existsSync, mkdtempSync, promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { tenantNames } from "../../components/tenant/names.js";
import { LABELS, MANAGED_BY } from "../../lib/constants.js";
import { dockerClient, unlessNotFound } from "../../lib/docker-client.js";
import { parseCidr } from "../../lib/ipv4.js";
import { tapName } from "../../lib/microvm/launcher.js";
import { cidrsOverlap } from "../../lib/subnets.js";
import { deleteTenantRules } from "../../provider/resources/tenant-firewall.js";
import { imageRegistry } from "../../lib/host/registry.js";
import { livePid, run, waitFor } from "../../lib/process.js";
import { squidPaths, squidProxy } from "../../lib/host/squid.js";
import { caddyFrontDoor, stopCaddy } from "../../lib/host/caddy.js";
import { buildSandboxImage } from "../../sandbox-image/build.js";
import { platformInstanceId } from "../../runtime/tenants/config.js";
import { HostConfig, StackConfig, type TenantsConfig } from "../../stacks/config.js";
import { docker } from "./containers.js";
import { fileHeld, holdFile, type HostLock } from "./host-lock.js";
import { freePort } from "./ports.js";
import { sharedRegistryPort } from "./shared-registry.js";

export { freePort } from "./ports.js";

/**
 * A host config whose Squid and registry are the test's own instances (own ports, own directories),
 * sharing only the machine's Docker engine, so stopping them cannot disturb anything else.
 */
export async function isolatedHostConfig(): Promise<HostConfig> {
  await clearKilledHosts();
  const root = mkdtempSync(path.join(os.tmpdir(), HOST_DIR_PREFIX));
  chmodSync(root, 0o755); // Squid drops to the "proxy" user and must reach its log directory
  // Held until the host is stopped or this process ends: a killed run's directory is one whose lock nobody
  // holds.
  // The holder never keeps this process alive: a benchmark that ends without stopping its host exits.
  const alive = await holdFile(path.join(root, ALIVE));
  alive.unref();
  holders.set(root, alive);
  return HostConfig.parse({
    squidPort: await freePort(),
    registryPort: await freePort(),
    frontDoorPort: await freePort(),
    frontDoorAdminPort: await freePort(),
    configDir: path.join(root, "etc"),
    dataDir: path.join(root, "lib"),
    logDir: path.join(root, "log"),
    runDir: path.join(root, "run"),
  });
}

const HOST_DIR_PREFIX = "host-test-";
const ALIVE = ".alive";
/** The `.alive` locks of this process's hosts, by directory, given up when a host is stopped. */
const holders = new Map<string, HostLock>();

/**
 * Clears what the test hosts of killed runs (a worker or a whole run stopped before its `stop`) left on
 * this machine, and returns their directories: every process whose command line names one (their Squid,
 * registry and Caddy, a microVM's QEMU), the microVMs' tap devices, mounts under it (tenant filesystems),
 * and the directory. A host is a killed run's when nobody holds its `.alive` lock (its file holds it from
 * creation to exit, files run side by side) and it is over a minute old (never one being made right now).
 */
export async function clearKilledHosts(): Promise<string[]> {
  const cleared: string[] = [];
  for (const name of await fs.readdir(os.tmpdir())) {
    if (!name.startsWith(HOST_DIR_PREFIX)) continue;
    const root = path.join(os.tmpdir(), name);
    const alive = path.join(root, ALIVE);
    const since = await fs.stat(alive).then(
      (s) => Date.now() - s.mtimeMs,
      () => undefined,
    );
    if (since === undefined || since < 60_000 || (await fileHeld(alive))) continue;
    for (const pid of (await fs.readdir("/proc")).filter((entry) => /^\d+$/.test(entry))) {
      const command = await fs.readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "");
      if (command.includes(`${root}/`) && Number(pid) !== process.pid) {
        try {
          process.kill(Number(pid), "SIGKILL");
        } catch {
          // gone already
        }
      }
    }
    const vms = path.join(root, "lib", "microvm", "vms");
    for (const vm of await fs.readdir(vms).catch(() => [] as string[]))
      await run("ip", ["link", "del", tapName(path.join(vms, vm))]).catch(() => undefined);
    await unmountUnder(root);
    await fs.rm(root, { recursive: true, force: true });
    cleared.push(root);
  }
  return cleared;
}

/**
 * Unmounts (lazily) every mount under `root`, deepest first, and detaches the loop devices of its images
 * (a tenant's filesystems), and returns the mountpoints there were: a recursive removal of `root` would
 * otherwise empty the mounted filesystems and stop at their mountpoints (EBUSY), leaving the loop devices.
 */
export async function unmountUnder(root: string): Promise<string[]> {
  const mounts = (await fs.readFile("/proc/self/mountinfo", "utf8"))
    .split("\n")
    .map((line) => line.split(" ")[4] ?? "")
    .filter((mount) => mount.startsWith(`${root}/`))
    .sort((a, b) => b.length - a.length);
  for (const mount of mounts) await run("umount", ["-l", mount]).catch(() => undefined);
  const loops = (await run("losetup", ["-a"]).catch(() => ({ stdout: "" }))).stdout.split("\n");
  for (const line of loops.filter((l) => l.includes(`(${root}/`)))
    await run("losetup", ["-d", line.split(":")[0]!]).catch(() => undefined);
  return mounts;
}

/**
 * An isolated host config with the test's own Squid running on it. `hosts` (name → address) become the
 * proxy's hosts file, for names that only exist in the test's own network. `stop()` shuts Squid down and
 * removes every directory the host used.
 */
export async function isolatedSquidHost(hosts: Record<string, string> = {}) {
  const host = await isolatedHostConfig();
  const hostsFile = path.join(host.configDir, "hosts");
  await fs.mkdir(host.configDir, { recursive: true });
  await fs.writeFile(
    hostsFile,
    Object.entries(hosts)
      .map(([name, address]) => `${address} ${name}\n`)
      .join(""),
  );
  const squid = squidProxy({ port: host.squidPort, hostsFile, ...host });
  await squid.ensure(() => undefined);
  const paths = squidPaths(host);
  return {
    host,
    /** Starts (again) the test's Squid. */
    ensureSquid: () => squid.ensure(() => undefined),
    async stopSquid() {
      await run("squid", ["-k", "shutdown", "-f", paths.config]).catch(() => undefined);
      await waitFor("squid to exit", 15_000, async () => ((await livePid(paths.pidFile)) ? undefined : true));
    },
    async stop() {
      await this.stopSquid().catch(() => undefined);
      const root = path.dirname(host.configDir);
      // A tenant whose delete did not finish leaves its filesystems mounted here: cleared, then said.
      const mounted = await unmountUnder(root);
      await fs.rm(root, { recursive: true, force: true });
      await holders.get(root)?.release();
      holders.delete(root);
      if (mounted.length > 0)
        throw new Error(
          `the host ${root} still had mounts when stopped (a tenant not deleted?): ${mounted.join(", ")}`,
        );
    },
  };
}

export interface TestPlatform {
  /** The local target on the test's own host, with the sandbox image built from this tree. */
  readonly config: StackConfig;
  /**
   * Writes Squid's config again from the host as it is now (as a bring-up or `pulumi up` of the platform
   * does), reloading Squid when it changed: its `to_host_self` is the host's addresses when it is written.
   */
  ensureSquid(): Promise<void>;
  /** Stops the registry (if it was started), the front door's Caddy (if started) and Squid, and removes every directory the host used. */
  stop(): Promise<void>;
}

/**
 * Removes the sandboxes a killed earlier run of a test left in `subnetPool` (its container, network, home
 * volume and firewall rules), and returns their project ids. Each test file has its own subnet pool and
 * files run one at a time under the suite's lock, so whatever holds a network there when a file starts
 * belongs to no live run: a session or machine stopped mid-file. Left alone, those networks shrink the
 * file's pool (the allocator rightly skips a subnet in use on the host) until its creates find none free.
 */
export async function clearKilledRuns(subnetPool: string): Promise<string[]> {
  const pool = parseCidr(subnetPool);
  if (!pool) throw new Error(`subnet pool ${subnetPool} is not an IPv4 CIDR`);
  const client = dockerClient();
  const networks = await client.listNetworks({
    filters: { label: [`${LABELS.managedBy}=${MANAGED_BY}`] },
  });
  const cleared: string[] = [];
  for (const network of networks) {
    const tenant = network.Labels?.[LABELS.tenant];
    const instance = network.Labels?.[LABELS.instance];
    const inPool = (network.IPAM?.Config ?? []).some((c) => {
      const subnet = parseCidr(c.Subnet ?? "");
      return subnet !== undefined && cidrsOverlap(subnet, pool);
    });
    if (!tenant || !instance || !inPool) continue;
    const label = [`${LABELS.tenant}=${tenant}`, `${LABELS.instance}=${instance}`];
    for (const c of await client.listContainers({ all: true, filters: { label } }))
      await unlessNotFound(client.getContainer(c.Id).remove({ force: true }));
    await unlessNotFound(client.getNetwork(network.Id).remove());
    for (const v of (await client.listVolumes({ filters: { label } })).Volumes ?? [])
      await unlessNotFound(client.getVolume(v.Name).remove());
    await deleteTenantRules(tenant, instance);
    cleared.push(tenant);
  }
  return cleared;
}

/**
 * What the reconciler needs to run real tenants: an isolated Squid host, the sandbox image, and a stack
 * config for them with `tenants` (subnet pool and SSH ports of the test's own); with `registry`, the
 * host's image registry too (snapshots); `hosts` (name → address) are the names its Squid resolves.
 */
export async function testPlatform(
  tenants: Partial<TenantsConfig>,
  options: {
    /** A registry for snapshots: the suite's shared one (helpers/shared-registry.ts), or `"own"`. */
    registry?: boolean | "own";
    hosts?: Record<string, string>;
    frontDoor?: boolean;
  } = {},
): Promise<TestPlatform> {
  // A killed earlier run's sandboxes would hold part of the pool.
  if (tenants.subnetPool) await clearKilledRuns(tenants.subnetPool);
  const squid = await isolatedSquidHost(options.hosts);
  const shared = options.registry === true;
  let host: HostConfig = squid.host;
  let instance: string | undefined;
  const stop = async () => {
    await stopCaddy(host).catch(() => undefined);
    const pid = await livePid(path.join(host.runDir, "registry.pid")).catch(() => undefined);
    if (pid) process.kill(pid, "SIGTERM");
    // Snapshots pushed to this platform's registry stay in the engine after it (a test whose tenant is not
    // deleted leaves them), and every run's would pile up there: in the shared registry, this platform's.
    // (Nothing of the shared one's before this platform had its instance: never every platform's images.)
    if (options.registry === "own" || (shared && instance !== undefined))
      await removeImagesOf(`127.0.0.1:${host.registryPort}/`, shared ? instance : undefined).catch(
        () => undefined,
      );
    await squid.stop();
  };
  try {
    if (shared) host = { ...host, registryPort: await sharedRegistryPort() };
    const image = (await buildSandboxImage({ base: "local", log: () => undefined })).tag;
    const config = StackConfig.parse({
      target: "local",
      host,
      tenants: { image, ...tenants },
      // With the front door (its own Caddy), the API's own port: Caddy's forward-auth asks it there.
      ...(options.frontDoor ? { runtime: { apiPort: await freePort() } } : {}),
    });
    if (options.frontDoor)
      await caddyFrontDoor({
        port: config.host.frontDoorPort,
        adminPort: config.host.frontDoorAdminPort,
        devServers: { authUpstream: `127.0.0.1:${config.runtime.apiPort}` },
        ...config.host,
      }).ensure(() => undefined);
    instance = platformInstanceId(config);
    if (options.registry === "own")
      await imageRegistry({ port: config.host.registryPort, ...config.host }).ensure(() => undefined);
    return {
      config,
      ensureSquid: async () => {
        await squid.ensureSquid();
      },
      stop,
    };
  } catch (error) {
    await stop();
    throw error;
  }
}

/**
 * Removes every tag in the engine under `prefix` (a registry's `host:port/`), and so the images; with
 * `instance`, only the images labelled with it (a registry other platforms push to).
 */
async function removeImagesOf(prefix: string, instance?: string): Promise<void> {
  const client = dockerClient();
  for (const image of await client.listImages())
    for (const tag of (image.RepoTags ?? []).filter(
      (t) => t.startsWith(prefix) && (instance === undefined || image.Labels?.[LABELS.instance] === instance),
    ))
      await client
        .getImage(tag)
        .remove()
        .catch(() => undefined);
}

/** Every engine and host object of a tenant that still exists on `host`, one line each. */
export async function tenantLeftovers(host: HostConfig, projectId: string): Promise<string[]> {
  const names = tenantNames(projectId);
  const found: string[] = [];
  const exists = (...args: string[]) =>
    docker(...args).then(
      () => true,
      () => false,
    );
  if (await exists("container", "inspect", names.container)) found.push(`container ${names.container}`);
  if (await exists("network", "inspect", names.network)) found.push(`network ${names.network}`);
  if (await exists("volume", "inspect", names.volume)) found.push(`volume ${names.volume}`);
  const rules = (await run("iptables", ["-w", "-S"])).stdout
    .split("\n")
    .filter((rule) => rule.includes(`agent-sandbox:tenant=${projectId}`));
  found.push(...rules.map((rule) => `rule ${rule}`));
  const fragments = await fs.readdir(squidPaths(host).fragmentsDir).catch(() => [] as string[]);
  found.push(...fragments.filter((file) => file.includes(projectId)).map((file) => `squid ${file}`));
  if (existsSync(path.join(host.dataDir, "backups", projectId))) found.push("backup directory");
  // The tenant's own filesystems (sandbox:host:Filesystem): images, mountpoints, mounts.
  const disks = path.join(path.resolve(host.dataDir), "disks", projectId);
  if (existsSync(disks)) found.push(`disks directory ${(await fs.readdir(disks)).join(", ")}`);
  const mounts = (await fs.readFile("/proc/self/mountinfo", "utf8")).split("\n");
  found.push(
    ...mounts.filter((line) => line.split(" ")[4]?.startsWith(`${disks}/`)).map((l) => `mount ${l}`),
  );
  const state = await fs
    .readdir(path.join(host.dataDir, "state"), { recursive: true })
    .catch(() => [] as string[]);
  found.push(...state.filter((f) => String(f).includes(`tenant-${projectId}`)).map((f) => `state ${f}`));
  return found;
}
