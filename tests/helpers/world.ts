import { spawn, execFile, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { promisify } from "node:util";
import { hostLock, type HostLock } from "./host-lock.js";

const run = promisify(execFile);

/** "The internet" for egress tests: an address outside every private range, in our own namespace. */
export const WORLD_ADDRESS = "198.18.0.2";
const HOST_SIDE = "198.18.0.1";
export const METADATA_ADDRESS = "169.254.169.254";

export interface World {
  readonly namespace: string;
  stop(): Promise<void>;
}

/**
 * The command line that runs `argv` in the world's network namespace and nowhere else. Not `ip netns exec`:
 * that makes a mount namespace too, a copy of every mount of the moment, and on a host whose `/` is private
 * (this one's) the copy keeps each of them (a tenant's loop-mounted filesystem among them) until the process
 * ends, so an unmount on the host frees nothing and another file's `losetup -j` still lists the device.
 */
export function inNamespace(namespace: string, argv: readonly string[]): [string, string[]] {
  return ["nsenter", [`--net=/run/netns/${namespace}`, "--", ...argv]];
}

/**
 * The packet counters of the world's INPUT rules whose comment holds `tag`, one per rule (a test adds the
 * rules that count what reaches "the internet": none counted means nothing leaked).
 */
export async function worldPackets(world: World, tag: string): Promise<number[]> {
  const { stdout } = await run(...inNamespace(world.namespace, ["iptables", "-w", "-nvx", "-L", "INPUT"]));
  return stdout
    .split("\n")
    .filter((line) => line.includes(tag))
    .map((line) => Number(line.trim().split(/\s+/)[0]));
}

/**
 * A tiny HTTP server answering on :80 and :443 (plain HTTP, for CONNECT tunnels) with who it is, and
 * `/bytes/<n>` with n zero bytes (up to 64 MiB: a download to measure), and `/sink` with the number of
 * bytes of the request's body (an upload to measure).
 */
const SERVER = `
const http = require("http");
for (const port of [80, 443]) {
  http.createServer((req, res) => {
    const bytes = /^\\/bytes\\/(\\d{1,8})$/.exec(req.url);
    if (bytes && Number(bytes[1]) <= 64 * 1024 * 1024) {
      res.writeHead(200, { "content-type": "application/octet-stream", "content-length": bytes[1] });
      return res.end(Buffer.alloc(Number(bytes[1])));
    }
    if (req.url === "/sink") {
      let received = 0;
      req.on("data", (chunk) => (received += chunk.length));
      return req.on("end", () => res.end(String(received)));
    }
    const local = req.socket.localAddress.replace(/^::ffff:/, "");
    res.end(local === "${METADATA_ADDRESS}" ? "metadata-server" : "world:" + req.headers.host);
  }).listen(port, "0.0.0.0");
}`;

/**
 * Removes the worlds of test runs killed before their `stop` (their processes, veth and namespace). Every
 * world has the same addresses: a stale one listed first in the host's routes would take this one's
 * traffic, and its counters would stay at zero. Called with the world's host lock held, so no other world
 * is live.
 */
async function clearKilledWorlds(): Promise<void> {
  const { stdout } = await run("ip", ["netns", "list"]);
  for (const namespace of stdout
    .split("\n")
    .flatMap((line) => /^(sbxt-world-[0-9a-f]{4})\b/.exec(line)?.[1] ?? [])) {
    const pids = (await run("ip", ["netns", "pids", namespace]).catch(() => ({ stdout: "" }))).stdout;
    for (const pid of pids.split(/\s+/).filter(Boolean)) {
      try {
        process.kill(Number(pid), "SIGKILL");
      } catch {
        // already gone
      }
    }
    await run("ip", ["link", "del", `sbxtw-${namespace.slice("sbxt-world-".length)}`]).catch(() => undefined);
    await run("ip", ["netns", "del", namespace]).catch(() => undefined);
  }
}

/**
 * A network namespace holding the test's "internet" (198.18.0.2) and a fake metadata server
 * (169.254.169.254 on its loopback), routed from the host through a veth pair. Probes from
 * sandboxes never leave this machine.
 */
export async function startWorld(): Promise<World> {
  // One world at a time on this machine: they all hold the same addresses (the metadata server's is fixed),
  // so files that run side by side take turns for it.
  const lock = await hostLock("world");
  try {
    await clearKilledWorlds();
    return await worldUnder(lock);
  } catch (error) {
    await clearKilledWorlds().catch(() => undefined);
    await lock.release();
    throw error;
  }
}

async function worldUnder(lock: HostLock): Promise<World> {
  const id = randomBytes(2).toString("hex");
  const namespace = `sbxt-world-${id}`;
  const hostLink = `sbxtw-${id}`;
  const nsLink = `sbxtn-${id}`;
  const ip = (...args: string[]) => run("ip", args);
  const inNs = (...args: string[]) => run(...inNamespace(namespace, args));
  await ip("netns", "add", namespace);
  await ip("link", "add", hostLink, "type", "veth", "peer", "name", nsLink);
  await ip("link", "set", nsLink, "netns", namespace);
  await ip("addr", "add", `${HOST_SIDE}/30`, "dev", hostLink);
  await ip("link", "set", hostLink, "up");
  await inNs("ip", "addr", "add", `${WORLD_ADDRESS}/30`, "dev", nsLink);
  await inNs("ip", "link", "set", nsLink, "up");
  await inNs("ip", "link", "set", "lo", "up");
  // On the namespace's loopback (this kernel has no dummy interfaces): local to the namespace all the same.
  await inNs("ip", "addr", "add", `${METADATA_ADDRESS}/32`, "dev", "lo");
  await inNs("ip", "route", "add", "default", "via", HOST_SIDE);
  // Only this test's metadata address is routed into the namespace, never out of the machine.
  await ip("route", "replace", `${METADATA_ADDRESS}/32`, "via", WORLD_ADDRESS);
  const server: ChildProcess = spawn(...inNamespace(namespace, [process.execPath, "-e", SERVER]), {
    stdio: "ignore",
  });
  // Wait until the server answers from the host.
  for (let i = 0; i < 50; i++) {
    const ok = await fetch(`http://${WORLD_ADDRESS}/`, { signal: AbortSignal.timeout(1_000) }).then(
      () => true,
      () => false,
    );
    if (ok) break;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return {
    namespace,
    async stop() {
      server.kill("SIGTERM");
      await run("ip", ["route", "del", `${METADATA_ADDRESS}/32`, "via", WORLD_ADDRESS]).catch(
        () => undefined,
      );
      await run("ip", ["link", "del", hostLink]).catch(() => undefined);
      await run("ip", ["netns", "del", namespace]).catch(() => undefined);
      await lock.release();
    },
  };
}

/**
 * A line of a sandbox's egress script, run in the background beside the others (each blocked one waits out
 * its timeout): `<what> THROUGH` when `script` succeeds, `<what> blocked` when it fails.
 */
export const egressProbe = (what: string, script: string): string =>
  `(if ${script} >/dev/null 2>&1; then echo "${what} THROUGH"; else echo "${what} blocked"; fi) &`;

/** A TCP connection attempt from a sandbox's bash, bounded to 5 s. */
export const tcpProbe = (host: string, port: number): string =>
  `timeout 5 bash -c 'exec 3<>/dev/tcp/${host}/${port}'`;
