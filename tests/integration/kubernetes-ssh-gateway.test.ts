// The kubernetes backend's SSH gateway (runtime/kubernetes/ssh-gateway.ts) against hostile and greedy clients:
// its port is open to the internet, so what the container backend's sshd bounds (LoginGraceTime, MaxStartups,
// MaxSessions, MaxAuthTries, flow control) must be bounded here too. Sessions run in a real Pod: a kube-apiserver
// with kwok as the node (tests/helpers/kube-apiserver.ts), whose execs are local processes on this host. Every
// client is on loopback; a flood comes from a child process, so that this process's descriptors are the
// gateway's alone.
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { once } from "node:events";
import {
  chownSync,
  createReadStream,
  createWriteStream,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { connect, type Socket } from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import ssh2, { type ClientChannel, type ConnectConfig, type ParsedKey } from "ssh2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateSshKeyPair } from "../../lib/ssh-keygen.js";
import { processAlive, waitFor } from "../../lib/process.js";
import { kubernetesProjects, sandboxPod } from "../../runtime/kubernetes/sandbox.js";
import { KubernetesSshGateway } from "../../runtime/kubernetes/ssh-gateway.js";
import { SecretBox } from "../../runtime/secrets.js";
import { SshGatewayConfig } from "../../stacks/config.js";
import { freePort } from "../helpers/host.js";
import { startKubeCluster, type KubeCluster } from "../helpers/kube-apiserver.js";
import { testDatabase } from "../helpers/postgres.js";

const { BaseAgent, Client, utils } = ssh2;
const execFileAsync = promisify(execFile);
/** The unprivileged user kwok runs each exec as (the image's agent is uid 1000 too). */
const AGENT_UID = 1000;
const MiB = 1024 * 1024;
/** What a flood comes from; the owner logs in from 127.0.0.1. Loopback answers on all of 127/8. */
const FLOOD_ADDRESS = "127.0.0.2";

setFlagsFromString("--expose-gc");
const collectGarbage = runInNewContext("gc") as () => void;
/** This process's open descriptors. */
const openFds = () => readdirSync("/proc/self/fd").length;
/** This process's memory after a full collection. */
const memory = () => {
  collectGarbage();
  return process.memoryUsage();
};

let cluster: KubeCluster;
let database: Awaited<ReturnType<typeof testDatabase>>;
let projects: ReturnType<typeof kubernetesProjects>;
let home: string;
let dir: string;
let port: number;
let knownHosts: string;
const projectId = randomUUID();
const box = new SecretBox(randomBytes(32));
const keyFiles: Record<string, string> = {};
const target = sandboxPod(projectId);

/** A gateway for the project, with these limits; what it logs is kept. */
async function startGateway(
  limits: Partial<SshGatewayConfig> = {},
  exec: ConstructorParameters<typeof KubernetesSshGateway>[0]["exec"] = projects.exec,
) {
  const logged: { message: string; fields: Record<string, unknown> }[] = [];
  const gateway = new KubernetesSshGateway({
    db: database.db,
    box,
    exec,
    bindAddress: "127.0.0.1",
    limits,
    log: (message, fields = {}) => logged.push({ message, fields }),
  });
  await gateway.start();
  return { gateway, logged };
}

/** Sets the project's recorded key (what the gateway lets in), and has the gateway read it. */
async function recordKey(publicKey: string, gateway?: KubernetesSshGateway) {
  await database.db.query(
    "update tenants set spec = jsonb_set(spec, '{sshPublicKey}', to_jsonb($2::text)) where project_id = $1",
    [projectId, publicKey],
  );
  await gateway?.sync();
}

/** The real OpenSSH client, as `sbx ssh` runs it: only the owner's key, the gateway's host key pinned. */
const ssh = (args: readonly string[]) =>
  execFileAsync(
    "ssh",
    [
      ...["-F", "/dev/null", "-i", keyFiles.owner!, "-o", "IdentitiesOnly=yes", "-o", "IdentityAgent=none"],
      ...["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", `UserKnownHostsFile=${knownHosts}`],
      ...[
        "-o",
        "GlobalKnownHostsFile=/dev/null",
        "-o",
        `HostKeyAlias=sbx-${projectId}`,
        "-o",
        "ConnectTimeout=10",
      ],
      ...["-p", String(port), "agent@127.0.0.1", ...args],
    ],
    { timeout: 30_000 },
  ).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (error: { code?: number; stdout?: string; stderr?: string }) => ({
      code: typeof error.code === "number" ? error.code : -1,
      stdout: error.stdout ?? "",
      stderr: error.stderr ?? "",
    }),
  );

/** A TCP connection to the gateway from `from`, open once this resolves. */
async function tcp(from = "127.0.0.1"): Promise<Socket> {
  const socket = connect({ port, host: "127.0.0.1", localAddress: from });
  socket.on("error", () => undefined);
  await once(socket, "connect");
  return socket;
}

/** A connection whose client says nothing (what it is sent is read and dropped, so that its end is seen). */
async function silent(from = "127.0.0.1"): Promise<Socket> {
  return (await tcp(from)).resume();
}

/** Milliseconds until the gateway closes `socket` (at most `withinMs`; undefined if it stays open). */
function closedWithin(socket: Socket, withinMs: number): Promise<number | undefined> {
  const started = Date.now();
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(undefined), withinMs);
    socket.once("close", () => {
      clearTimeout(timer);
      resolve(Date.now() - started);
    });
  });
}

/** An ssh2 client logged in as the owner, over a socket the test holds (to stop reading it). */
async function ownerClient(extra: Partial<ConnectConfig> = {}) {
  const sock = await tcp();
  const client = new Client();
  client.on("error", () => undefined);
  const ready = once(client, "ready");
  client.connect({
    sock,
    username: "agent",
    privateKey: keys.owner!.privateKey,
    hostVerifier: () => true,
    readyTimeout: 20_000,
    ...extra,
  });
  await ready;
  return { client, sock };
}

const execOn = (client: InstanceType<typeof Client>, command: string) =>
  new Promise<ClientChannel>((resolve, reject) =>
    client.exec(command, (error, channel) => (error ? reject(error) : resolve(channel))),
  );

const keys: Record<string, { privateKey: string; publicKey: string }> = {};

beforeAll(async () => {
  home = mkdtempSync(path.join(os.tmpdir(), "kwok-home-"));
  chownSync(home, AGENT_UID, AGENT_UID);
  dir = mkdtempSync(path.join(os.tmpdir(), "ssh-gateway-limits-"));
  cluster = await startKubeCluster(
    {
      workDir: home,
      runAsUser: AGENT_UID,
      runAsGroup: AGENT_UID,
      env: { HOME: home, PATH: "/usr/local/bin:/usr/bin:/bin" },
    },
    [],
  );
  // The project's Pod, as its stack would leave it: the sandbox container running on the node.
  const created = await cluster.request("POST", "/api/v1/namespaces", {
    apiVersion: "v1",
    kind: "Namespace",
    metadata: { name: target.namespace },
  });
  expect(created.status).toBe(201);
  await waitFor("the project's Pod created", 60_000, async () => {
    const pod = await cluster.request("POST", `/api/v1/namespaces/${target.namespace}/pods`, {
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: target.pod, namespace: target.namespace },
      spec: {
        automountServiceAccountToken: false,
        containers: [{ name: target.container, image: "sandbox" }],
      },
    });
    return pod.status === 201 ? true : undefined; // refused until its namespace's default account exists
  });
  await waitFor("the project's Pod running", 60_000, async () => {
    const pod = await cluster.request("GET", `/api/v1/namespaces/${target.namespace}/pods/${target.pod}`);
    return pod.body?.status?.phase === "Running" ? true : undefined;
  });
  const kubeconfigFile = path.join(dir, "kubeconfig");
  writeFileSync(kubeconfigFile, cluster.kubeconfig, { mode: 0o600 });
  projects = kubernetesProjects(kubeconfigFile);

  for (const name of ["owner", "other"]) {
    keys[name] = await generateSshKeyPair(name);
    keyFiles[name] = path.join(dir, name);
    writeFileSync(keyFiles[name], keys[name].privateKey, { mode: 0o600 });
  }
  database = await testDatabase("pglite");
  port = await freePort();
  await database.db.query(
    "insert into tenants (project_id, owner_id, spec, ssh_port, state) values ($1, 'owner', $2, $3, 'running')",
    [
      projectId,
      JSON.stringify({ projectId, backend: "kubernetes", sshPublicKey: keys.owner!.publicKey.trim() }),
      port,
    ],
  );
  // The gateway's host key, made at its first listen, pinned as `sbx` pins it.
  const { gateway } = await startGateway();
  await gateway.close();
  const { rows } = await database.db.query<{ public_key: string }>(
    "select public_key from ssh_gateway_host_keys where project_id = $1",
    [projectId],
  );
  knownHosts = path.join(dir, "known_hosts");
  writeFileSync(knownHosts, `sbx-${projectId} ${rows[0]!.public_key}\n`);
}, 300_000);

afterAll(async () => {
  projects?.close();
  await database?.close();
  if (cluster) {
    const { pids } = cluster;
    await cluster.stop();
    for (const [name, pid] of Object.entries(pids))
      expect(processAlive(pid), `${name} still runs`).toBe(false);
  }
  rmSync(home, { recursive: true, force: true });
  rmSync(dir, { recursive: true, force: true });
});

describe("the SSH gateway before a login: every way of holding a connection ends at a deadline", () => {
  const limits = { handshakeTimeoutSeconds: 1, loginTimeoutSeconds: 3 };

  /** Each way a client can sit on a connection without logging in, and the deadline that must end it. */
  const stalls: {
    name: string;
    deadline: "handshake" | "login" | "auth tries";
    hold: () => Promise<Socket>;
  }[] = [
    { name: "a TCP connection that sends nothing", deadline: "handshake", hold: () => silent() },
    {
      name: "a client that sends its version line and then nothing",
      deadline: "handshake",
      hold: async () => {
        const socket = await silent();
        socket.write("SSH-2.0-OpenSSH_9.6\r\n");
        return socket;
      },
    },
    {
      name: "a client that drips its version line a byte at a time (slowloris)",
      deadline: "handshake",
      hold: async () => {
        const socket = await silent();
        const line = Buffer.from("SSH-2.0-" + "x".repeat(200));
        let i = 0;
        const drip = setInterval(() => {
          if (socket.destroyed || i >= line.length) return clearInterval(drip);
          socket.write(line.subarray(i, ++i));
        }, 100);
        socket.once("close", () => clearInterval(drip));
        return socket;
      },
    },
    {
      name: "a client that finishes its key exchange and never authenticates",
      deadline: "login",
      hold: async () => {
        const sock = await tcp();
        const client = new Client();
        client.on("error", () => undefined);
        // An authHandler that never answers: the client waits forever after the key exchange.
        client.connect({ sock, username: "agent", hostVerifier: () => true, authHandler: () => undefined });
        await once(client, "handshake");
        return sock;
      },
    },
    {
      name: "a client that keeps guessing (passwords, other keys)",
      deadline: "auth tries",
      hold: async () => {
        const sock = await tcp();
        const client = new Client();
        client.on("error", () => undefined);
        let tries = 0;
        client.connect({
          sock,
          username: "agent",
          hostVerifier: () => true,
          // Bounded here, so that a gateway that never stops it does not spin: 50 guesses, then it gives up.
          authHandler: (_methods, _partial, next) => {
            if (++tries > 50) return next(false as never);
            next(
              tries % 2
                ? { type: "password", username: "agent", password: `guess-${tries}` }
                : { type: "publickey", username: "agent", key: keys.other!.privateKey },
            );
          },
        });
        await once(client, "handshake");
        (sock as Socket & { tries?: () => number }).tries = () => tries;
        return sock;
      },
    },
  ];

  for (const stall of stalls)
    it(`closes ${stall.name} at its ${stall.deadline} deadline`, async () => {
      const { gateway, logged } = await startGateway(limits);
      try {
        const socket = await stall.hold();
        const closedAfterMs = await closedWithin(socket, 8_000);
        socket.destroy();
        expect(closedAfterMs, `${stall.name}: still open after 8 s`).toBeDefined();
        if (stall.deadline === "handshake") {
          expect(closedAfterMs!).toBeGreaterThanOrEqual(limits.handshakeTimeoutSeconds * 1000 - 200);
          expect(closedAfterMs!).toBeLessThan(limits.loginTimeoutSeconds * 1000);
        } else if (stall.deadline === "login") {
          expect(closedAfterMs!).toBeGreaterThanOrEqual(limits.loginTimeoutSeconds * 1000 - 1200);
        } else {
          // Closed after six failed attempts (sshd's MaxAuthTries), long before either deadline.
          expect((socket as Socket & { tries: () => number }).tries()).toBeLessThanOrEqual(7);
        }
        const reason = {
          handshake: "handshake timeout",
          login: "login timeout",
          "auth tries": "too many auth failures",
        }[stall.deadline];
        expect(logged).toContainEqual({
          message: "ssh gateway: connection closed before login",
          fields: expect.objectContaining({ reason, address: "127.0.0.1" }),
        });
        await waitFor("the connection no longer counted", 5_000, async () =>
          gateway.connections.unauthenticated === 0 ? true : undefined,
        );
      } finally {
        await gateway.close();
      }
    });
});

describe("the SSH gateway's caps on connections not yet logged in", () => {
  it("refuses, and logs, what is over the per-address and the total cap; a closed one frees its place", async () => {
    const limits = { maxUnauthenticatedPerAddress: 3, maxUnauthenticated: 5, handshakeTimeoutSeconds: 60 };
    const { gateway, logged } = await startGateway(limits);
    const sockets: Socket[] = [];
    try {
      /** Opens `count` silent connections from `from`; resolves with those the gateway keeps open. */
      const open = async (from: string, count: number) => {
        const opened = await Promise.all(Array.from({ length: count }, () => silent(from)));
        sockets.push(...opened);
        const closed = await Promise.all(opened.map((socket) => closedWithin(socket, 1_500)));
        return opened.filter((_, i) => closed[i] === undefined);
      };
      // Six from one address: three are held, three closed at once.
      const first = await open(FLOOD_ADDRESS, 6);
      expect(first).toHaveLength(limits.maxUnauthenticatedPerAddress);
      expect(logged).toContainEqual({
        message: "ssh gateway: connection closed before login",
        fields: { reason: "per-address cap", address: FLOOD_ADDRESS, maxUnauthenticatedPerAddress: 3 },
      });
      // Three from another: two fit under the total, the third does not.
      const second = await open("127.0.0.3", 3);
      expect(second).toHaveLength(limits.maxUnauthenticated - limits.maxUnauthenticatedPerAddress);
      expect(logged).toContainEqual({
        message: "ssh gateway: connection closed before login",
        fields: { reason: "total cap", address: "127.0.0.3", maxUnauthenticated: 5 },
      });
      expect(gateway.connections).toEqual({ open: 5, unauthenticated: 5 });
      // The owner too is refused while the total is held (as sshd past its MaxStartups)...
      expect((await ssh(["echo in"])).code).toBe(255);
      // ...and gets in once the holders go.
      for (const socket of first) socket.destroy();
      await waitFor("the flood's places freed", 5_000, async () =>
        gateway.connections.unauthenticated === 2 ? true : undefined,
      );
      expect(await ssh(["echo in"])).toMatchObject({ code: 0, stdout: "in\n" });
      // A flood's refusals after the first are summed, not logged one by one.
      await open(FLOOD_ADDRESS, 3 + 20);
      const perAddressLines = logged.filter((line) => line.fields.reason === "per-address cap");
      expect(perAddressLines).toHaveLength(1);
      await gateway.close();
      expect(logged.at(-1)).toEqual({
        message: "ssh gateway: connections closed before login",
        // The two refused in the first six and the twenty since.
        fields: expect.objectContaining({ reason: "per-address cap", address: FLOOD_ADDRESS, count: 22 }),
      });
    } finally {
      for (const socket of sockets) socket.destroy();
      await gateway.close();
    }
  });

  it("holds its descriptors and memory under a loop of 200 idle connections, and the owner still logs in", async () => {
    const limits = SshGatewayConfig.parse({});
    const { gateway, logged } = await startGateway();
    let flood: ChildProcess | undefined;
    try {
      expect((await ssh(["echo warm"])).stdout).toBe("warm\n"); // the first exec's client and caches, made
      const before = { fds: openFds(), heap: memory().heapUsed };
      // 200 idle connections from one address, each dialled again soon after it is closed, up to 10,000 dials.
      flood = spawn(
        process.execPath,
        [
          "-e",
          // "open": connections that have stayed open for half a second (held, not in the act of being closed).
          `const net = require("net");
           const since = new Map();
           let dials = 0;
           const dial = () => {
             if (dials >= 10000) return;
             dials++;
             const s = net.connect({ port: ${port}, host: "127.0.0.1", localAddress: "${FLOOD_ADDRESS}" });
             s.on("connect", () => since.set(s, Date.now()));
             s.resume();
             s.on("error", () => undefined);
             s.on("close", () => { since.delete(s); setTimeout(dial, 100); });
           };
           for (let i = 0; i < 200; i++) dial();
           setInterval(() => {
             const open = [...since.values()].filter((t) => Date.now() - t > 500).length;
             console.log(JSON.stringify({ open, dials }));
           }, 250);`,
        ],
        { stdio: ["ignore", "pipe", "inherit"] },
      );
      let state = { open: 0, dials: 0 };
      flood.stdout!.on("data", (chunk: Buffer) => {
        const last = chunk.toString().trim().split("\n").at(-1);
        if (last) state = JSON.parse(last) as typeof state;
      });
      await waitFor("the flood's first 200 dials", 30_000, async () =>
        state.dials >= 200 ? true : undefined,
      );
      // What the flood holds open (as the flood sees it), and what that costs this process, for 4 s.
      const during: { fds: number; heap: number; held: number }[] = [];
      for (let i = 0; i < 8; i++) {
        await new Promise((resolve) => setTimeout(resolve, 500));
        during.push({ fds: openFds(), heap: memory().heapUsed, held: state.open });
      }
      // The owner logs in, from another address, while the flood goes on.
      const login = await ssh(["echo still in"]);
      expect(login).toMatchObject({ code: 0, stdout: "still in\n" });
      flood.kill("SIGKILL");
      await once(flood, "exit");
      await waitFor("the flood's connections closed", 10_000, async () =>
        openFds() <= before.fds + 8 ? true : undefined,
      ).catch(() => undefined);
      const after = { fds: openFds(), heap: memory().heapUsed };
      const grown = {
        fds: Math.max(...during.map((d) => d.fds)) - before.fds,
        heapMiB: Number(((Math.max(...during.map((d) => d.heap)) - before.heap) / MiB).toFixed(2)),
        held: Math.max(...during.map((d) => d.held)),
        fdsAfter: after.fds - before.fds,
      };
      console.log(`200 idle connections: ${JSON.stringify({ ...grown, dials: state.dials })}`);
      // The flood held at most its address's cap; each held connection is one descriptor and a few KiB.
      expect(grown.held).toBeLessThanOrEqual(limits.maxUnauthenticatedPerAddress);
      expect(grown.fds).toBeLessThanOrEqual(limits.maxUnauthenticatedPerAddress + 8);
      expect(grown.heapMiB).toBeLessThan((limits.maxUnauthenticatedPerAddress * 64 * 1024) / MiB + 4);
      expect(grown.fdsAfter).toBeLessThanOrEqual(8);
      expect(logged.some((line) => line.fields.reason === "per-address cap")).toBe(true);
    } finally {
      flood?.kill("SIGKILL");
      await gateway.close();
    }
  });
});

describe("the SSH gateway after a login", () => {
  it("refuses a session past the connection's cap, and takes one again when one closes", async () => {
    const { gateway } = await startGateway({ maxChannelsPerConnection: 3 });
    const { client, sock } = await ownerClient();
    try {
      const held = await Promise.all([1, 2, 3].map(() => execOn(client, "sleep 30")));
      for (const channel of held) channel.resume(); // read, so that a channel's close is seen after its end
      await expect(execOn(client, "echo one too many")).rejects.toThrow(/Channel open failure/);
      held[0]!.close();
      await once(held[0]!, "close");
      const next = await execOn(client, "echo next");
      const [chunk] = (await once(next, "data")) as [Buffer];
      expect(chunk.toString()).toBe("next\n");
    } finally {
      client.end();
      sock.destroy();
      await gateway.close();
    }
  });

  it("lets only a signature that verifies in: a key the crypto library cannot load is no key", async () => {
    // An ECDSA key whose point is not on its curve: ssh2 parses it, but its check of any signature answers an
    // Error (truthy) rather than false. A project whose recorded key is such a key must let nobody in.
    const sshString = (data: Buffer) => Buffer.concat([Buffer.from([0, 0, 0, data.length]), data]);
    const blob = Buffer.concat([
      sshString(Buffer.from("ecdsa-sha2-nistp256")),
      sshString(Buffer.from("nistp256")),
      sshString(Buffer.concat([Buffer.from([4]), Buffer.alloc(64, 7)])),
    ]);
    const unusable = `ecdsa-sha2-nistp256 ${blob.toString("base64")}`;
    const parsed = utils.parseKey(unusable) as ParsedKey;
    expect(parsed.verify(Buffer.from("data"), Buffer.alloc(8))).toBeInstanceOf(Error);
    const { gateway } = await startGateway();
    await recordKey(unusable, gateway);
    const sock = await tcp();
    try {
      // A client that offers the recorded key (public) and signs with nothing: an agent answering garbage.
      class ForgingAgent extends BaseAgent<ParsedKey> {
        getIdentities(cb: (error: Error | undefined, keys?: ParsedKey[]) => void) {
          cb(undefined, [parsed]);
        }
        sign(
          _key: ParsedKey,
          _data: Buffer,
          _options: unknown,
          cb?: (error: Error | undefined, signature?: Buffer) => void,
        ) {
          // r = 1, s = 1, DER-encoded
          (cb ?? (_options as typeof cb))!(
            undefined,
            Buffer.from([0x30, 0x06, 0x02, 0x01, 0x01, 0x02, 0x01, 0x01]),
          );
        }
      }
      const client = new Client();
      const outcome = new Promise<string>((resolve) => {
        client.once("ready", () => resolve("logged in"));
        client.once("error", (error) => resolve(`refused: ${error.message}`));
      });
      client.connect({ sock, username: "agent", agent: new ForgingAgent(), hostVerifier: () => true });
      expect(await outcome).toMatch(/^refused: All configured authentication methods failed/);
    } finally {
      sock.destroy();
      await recordKey(keys.owner!.publicKey.trim());
      await gateway.close();
    }
  });
});

describe("the SSH gateway's flow control: a slow reader on either side holds the other back", () => {
  const size = 64 * MiB;
  let digest: string;

  beforeAll(async () => {
    // A large file in the sandbox's home, of random bytes.
    const file = createWriteStream(path.join(home, "big.bin"));
    const hash = createHash("sha256");
    for (let written = 0; written < size; written += MiB) {
      const chunk = randomBytes(MiB);
      hash.update(chunk);
      if (!file.write(chunk)) await once(file, "drain");
    }
    file.end();
    await once(file, "close");
    chownSync(path.join(home, "big.bin"), AGENT_UID, AGENT_UID);
    digest = hash.digest("hex");
  });

  /** This process's buffers (Buffers' backing stores) after a full collection and the frees it queued. */
  async function buffers(): Promise<number> {
    collectGarbage();
    await new Promise((resolve) => setImmediate(resolve));
    collectGarbage();
    return process.memoryUsage().arrayBuffers;
  }

  /**
   * The most this process's buffers grow over `base`, sampled every 250 ms for `ms` (the gateway's buffers are
   * this process's: output or input that is not taken would pile up here).
   */
  async function growthOver(base: number, ms: number): Promise<number> {
    let most = 0;
    for (let waited = 0; waited < ms; waited += 250) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      most = Math.max(most, (await buffers()) - base);
    }
    return most;
  }

  /** Clients that do not take what the Pod sends them. */
  const readers: {
    name: string;
    stop: (client: InstanceType<typeof Client>, sock: Socket, channel: ClientChannel) => void;
  }[] = [
    {
      name: "a client whose window is spent (it reads its socket, not the channel)",
      stop: (_client, _sock, channel) => channel.pause(),
    },
    {
      name: "a client that grants an unbounded window and does not read its socket",
      stop: (client, sock, channel) => {
        // What a hostile client may do: widen the server's window to the protocol's most, then read nothing.
        const grant = 0xffff_ffff - 4 * MiB;
        const internals = channel as unknown as { outgoing: { id: number }; incoming: { window: number } };
        internals.incoming.window += grant;
        (
          client as unknown as { _protocol: { channelWindowAdjust(id: number, n: number): void } }
        )._protocol.channelWindowAdjust(internals.outgoing.id, grant);
        sock.pause();
      },
    },
  ];

  /**
   * The project's exec with the stdout it hands the gateway counted and hashed: what the gateway was given by the
   * Pod, which it must pass on whole. (What reaches it can fall short of what the command wrote: a node's
   * streaming server resets its streams as the command ends, and the API server's reader may then take the reset
   * before output it still holds, kubernetes/kubernetes#124571; docs/kubernetes.md, flow control.)
   */
  function countedExec() {
    const fromPod = { bytes: 0, hash: createHash("sha256") };
    const exec: typeof projects.exec = (id, argv, options) =>
      projects.exec(id, argv, {
        ...options,
        onOutput: (stream, chunk) => {
          if (stream === "stdout") {
            fromPod.bytes += chunk.length;
            fromPod.hash.update(chunk);
          }
          options.onOutput(stream, chunk);
        },
      });
    return { exec, fromPod };
  }

  /** The digest of the first `bytes` of the file. */
  async function prefixDigest(bytes: number): Promise<string> {
    const hash = createHash("sha256");
    if (bytes > 0)
      for await (const chunk of createReadStream(path.join(home, "big.bin"), { end: bytes - 1 }))
        hash.update(chunk as Buffer);
    return hash.digest("hex");
  }

  for (const reader of readers)
    it(`holds a command's output in the Pod for ${reader.name}, and loses none of it`, async () => {
      const { exec, fromPod } = countedExec();
      const { gateway, logged } = await startGateway({}, exec);
      const { client, sock } = await ownerClient();
      try {
        const base = await buffers();
        const channel = await execOn(client, "cat big.bin");
        const hash = createHash("sha256");
        let received = 0;
        channel.on("data", (chunk: Buffer) => {
          hash.update(chunk);
          received += chunk.length;
        });
        // How the session ended, for a failure to say (the gateway ends a session whose exec stream was cut
        // with 255; a failed start writes its reason on stderr).
        let ended = "no exit";
        channel.on("exit", (...how: unknown[]) => (ended = `exit ${how.join(" ")}`));
        channel.stderr.on("data", (chunk: Buffer) => (ended += `; stderr ${chunk.toString().trim()}`));
        reader.stop(client, sock, channel);
        const grownMiB = (await growthOver(base, 6_000)) / MiB;
        console.log(
          `${reader.name}: buffers grew ${grownMiB.toFixed(1)} MiB while ${(received / MiB).toFixed(1)} MiB of ${size / MiB} were read`,
        );
        // Bounded by the SSH channel's buffers (2 MiB each for stdout and stderr, ssh2's window), the client's
        // (its 2 MiB window), socket buffers and a few websocket frames, with room for what a collection has
        // not yet freed: not by the output's size, which an unbounded gateway holds nearly all of.
        expect(grownMiB).toBeLessThan(16);
        sock.resume();
        channel.resume();
        await once(channel, "close");
        const why = `${ended}; the Pod's exec gave the gateway ${fromPod.bytes} bytes; the gateway logged ${JSON.stringify(logged)}`;
        expect(ended, why).toBe("exit 0");
        // The gateway's own part, whole: every byte the Pod's exec gave it reached the client, in order.
        const got = hash.digest("hex");
        expect(received, why).toBe(fromPod.bytes);
        expect(got, why).toBe(fromPod.hash.digest("hex"));
        // And what the Pod's exec gave is the file, or (the API server's race above, seen twice in CI's runs)
        // the file's first part: never a byte of it changed or out of place.
        if (fromPod.bytes < size)
          console.warn(
            `the API server's exec stream ended ${size - fromPod.bytes} bytes short of the command's output (kubernetes/kubernetes#124571)`,
          );
        expect(got).toBe(fromPod.bytes === size ? digest : await prefixDigest(fromPod.bytes));
        // Such a shortfall is the output in flight between the node and the API server as the command ended (a
        // few MiB here), not a gap the gateway's pauses left.
        expect(size - fromPod.bytes).toBeLessThan(16 * MiB);
      } finally {
        client.end();
        sock.destroy();
        await gateway.close();
      }
    });

  it("holds a client's input back while the command in the Pod does not read it", async () => {
    const { gateway } = await startGateway();
    const { client, sock } = await ownerClient();
    try {
      const base = await buffers();
      // What may be in flight while the gateway reads nothing: the kernel's buffers of the client's socket
      // (its send buffer and the gateway's receive buffer, up to the sysctls' maxima: 32 MiB of receive on
      // this kernel, 6.18; 6 MiB before 2025's kernels) and the gateway's own bound. The input is twice that,
      // so a gateway that held nothing back would be seen sending it all.
      const sysctlMax = (name: string) =>
        Number(readFileSync(`/proc/sys/net/ipv4/${name}`, "utf8").trim().split(/\s+/)[2]);
      const held = sysctlMax("tcp_rmem") + sysctlMax("tcp_wmem") + 16 * MiB;
      const input = Math.max(size, 2 * held);
      // A command that reads nothing for a while, then all of its input.
      // (`head`: under kwok the end of the input does not reach the command.)
      const channel = await execOn(client, `sleep 8; head -c ${input} | wc -c`);
      const output: Buffer[] = [];
      channel.on("data", (chunk: Buffer) => output.push(chunk));
      let sent = 0;
      const sending = (async () => {
        const chunk = randomBytes(MiB);
        while (sent < input) {
          sent += chunk.length;
          if (!channel.write(chunk)) await once(channel, "drain");
        }
        channel.end();
      })();
      const grownMiB = (await growthOver(base, 5_000)) / MiB;
      console.log(
        `a command that does not read: buffers grew ${grownMiB.toFixed(1)} MiB, ${(sent / MiB).toFixed(0)} MiB sent`,
      );
      expect(grownMiB).toBeLessThan(16);
      expect(sent).toBeLessThan(held);
      await sending;
      await once(channel, "close");
      expect(Buffer.concat(output).toString().trim()).toBe(String(input));
    } finally {
      client.end();
      sock.destroy();
      await gateway.close();
    }
  });
});
