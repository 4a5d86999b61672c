// SSH to a kubernetes project's sandbox. The Pod runs as the agent with every capability dropped, so
// it runs no sshd; instead the runtime answers SSH on the project's own port (`ssh.port` of the API, from
// `tenants.sshPortRange`, as for the other backends) and carries each session into the Pod through the API
// server's exec: a shell or a command, with a terminal when one is asked for (resized with the client's
// window), or the SFTP subsystem (which `scp` uses too). Only the project's key may log in, as `agent`; the
// gateway's host key is the project's own, made at its first listen and kept (sealed) in the database, and the
// API shows it (`ssh.host_key`) so a client can pin it. What the sandbox's sshd refuses is refused too: other
// users, passwords, agent and X11 forwarding, remote forwards; a local forward reaches only the Pod's loopback.
// The port is open to the internet, so what the sandbox's sshd bounds is bounded here too (`runtime.sshGateway`):
// a connection has a deadline for its key exchange and one for its login, those not yet logged in are capped per
// address and in all, a login holds a bounded number of sessions, and output a client does not read waits in
// the Pod (its exec paused), not in the runtime's memory.
// ssh2 is CommonJS, and Node's ESM loader finds only some of its names (not Server): take them from its default.
import { createServer, type Server as TcpServer, type Socket } from "node:net";
import type { Writable } from "node:stream";
import ssh2, { type Connection, type Server as SshServer, type ServerChannel, type Session } from "ssh2";
import { generateSshKeyPair } from "../../lib/ssh-keygen.js";
import { SshGatewayConfig } from "../../stacks/config.js";
import type { Queryable } from "../store/db.js";
import {
  addGatewayHostKey,
  deleteGatewayHostKeysOfDeletedProjects,
  gatewayHostKeyRow,
} from "../store/secrets.js";
import { kubernetesSshTenants } from "../store/tenants.js";
import type { SecretBox } from "../secrets.js";
import type { PodExec, PodExecOptions } from "./exec.js";
import { withEnv } from "./sandbox.js";

const { Server, utils } = ssh2;

/** The one user a sandbox has. */
export const SSH_USER = "agent";
/** The subsystem OpenSSH's `sftp` and `scp` ask for, and the program that serves it in the image. */
export const SFTP_SERVER = "/usr/lib/openssh/sftp-server";
/** The image's Python (Debian's), by its path: a PATH lookup is the exec's runtime's, not the sandbox's. */
const PYTHON = "/usr/bin/python3";
/** The destinations a forwarded port may name: the sandbox's own loopback. */
const LOOPBACK = new Set(["127.0.0.1", "localhost", "::1"]);
/**
 * The relay a forwarded connection runs in the Pod (the image has python3): stdin to the port, the port to
 * stdout, until the server closes its side (or, after the client's end, until it answers and closes).
 */
const RELAY = [
  "import os, select, socket, sys",
  "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))",
  "inputs = [s, 0]",
  "while True:",
  "    ready = select.select(inputs, [], [])[0]",
  "    if s in ready:",
  "        data = s.recv(65536)",
  "        if not data: break",
  "        view = memoryview(data)",
  "        while view: view = view[os.write(1, view):]",
  "    if 0 in ready:",
  "        data = os.read(0, 65536)",
  "        if data: s.sendall(data)",
  "        else: s.shutdown(socket.SHUT_WR); inputs = [s]",
].join("\n");
/** How long an SFTP server may go on after its client's end before the session is closed for it. */
const SFTP_LINGER_MS = 1_000;
/** Failed authentication attempts a connection may make before it is closed (OpenSSH's MaxAuthTries). */
const MAX_AUTH_TRIES = 6;
/**
 * Input a client may have sent on one channel and the gateway not yet passed on: twice the window ssh2 grants
 * (2 MiB), so only a client that sends past its window, which ssh2 does not stop, reaches it; it is closed.
 */
const MAX_UNREAD_INPUT_BYTES = 4 * 1024 * 1024;
/** What a session runs its argv with: in the agent's home, as sshd starts a login. */
const IN_HOME = 'cd "$HOME" 2>/dev/null; exec "$@"';

/** How often the connections refused or closed at a deadline are summed in the log while they go on. */
const DROP_LOG_INTERVAL_MS = 60_000;
/** The (reason, address) pairs summed between two such logs; past it, further ones are counted together. */
const DROP_LOG_KEYS = 256;

export interface KubernetesSshGatewayOptions {
  readonly db: Queryable;
  readonly box: SecretBox;
  /** A command in a project's Pod (runtime/kubernetes/sandbox.ts `kubernetesProjects(...).exec`). */
  readonly exec: (projectId: string, argv: readonly string[], options: PodExecOptions) => Promise<PodExec>;
  /** The address every project's port is opened on (default all: the host's firewall decides who reaches it). */
  readonly bindAddress?: string;
  /** How often the listeners follow the projects (a new one, a deleted one, a new key), default 2 s. */
  readonly syncMs?: number;
  /** Deadlines and caps (`runtime.sshGateway`); what is not given takes its default. */
  readonly limits?: Partial<SshGatewayConfig>;
  readonly log?: (message: string, fields?: Record<string, unknown>) => void;
}

interface ProjectRow {
  readonly project_id: string;
  readonly ssh_port: number;
  readonly public_key: string | null;
}

interface Listener {
  /** Accepts the port's connections and admits them, under the caps, to {@link ssh}. */
  readonly tcp: TcpServer;
  /** The SSH server, which never listens itself: each admitted socket is handed to it. */
  readonly ssh: SshServer;
  readonly port: number;
  /** The project's key as last read: a new one (a warm-pool claim) holds from the next login on. */
  key: string | null;
  /** Every socket open on the port, closed with the listener. */
  readonly sockets: Set<Socket>;
  /**
   * Admitted connections whose client has not yet sent its version line (ssh2 announces a connection only
   * then), by remote address and port.
   */
  readonly arriving: Map<string, Admitted>;
}

/** A connection admitted and not yet logged in: counted against the caps until it logs in or closes. */
interface Admitted {
  readonly socket: Socket;
  readonly address: string;
  /** Its key exchange is done: the handshake deadline no longer applies. */
  handshaken(): void;
  /** It logged in (or closed): it counts no more, and no deadline applies. */
  release(): void;
}

/** Why a connection was closed before its login. */
type DropReason =
  "per-address cap" | "total cap" | "handshake timeout" | "login timeout" | "too many auth failures";

const drains = new WeakMap<Writable, Promise<void>>();

/** Resolves when `stream` has drained, or is gone: one waiter per stream, however many wait on it. */
function drained(stream: Writable): Promise<void> {
  if (!stream.writableNeedDrain || stream.destroyed) return Promise.resolve();
  let waiting = drains.get(stream);
  if (!waiting) {
    waiting = new Promise<void>((resolve) => {
      const done = () => {
        stream.off("drain", done);
        stream.off("close", done);
        drains.delete(stream);
        resolve();
      };
      stream.on("drain", done);
      stream.on("close", done);
    });
    drains.set(stream, waiting);
  }
  return waiting;
}

/**
 * Back-pressure from `sinks` to `source`: the returned check, called after each write, pauses the source while
 * any sink holds more than its high-water mark, and resumes it once every one has drained. Output a client
 * does not read (its channel's window spent, or its socket not read) so waits where it is made.
 */
function pauseWhileFull(source: { pause(): void; resume(): void }, sinks: readonly Writable[]): () => void {
  let paused = false;
  const check = (): void => {
    if (paused || !sinks.some((sink) => sink.writableNeedDrain && !sink.destroyed)) return;
    paused = true;
    source.pause();
    void Promise.all(sinks.map(drained)).then(() => {
      paused = false;
      source.resume();
      check();
    });
  };
  return check;
}

/**
 * The project's gateway host key, made at first use: an ed25519 key in OpenSSH's format, the private half sealed
 * in `ssh_gateway_host_keys`. Two runtimes making one at once keep the first written.
 */
export async function gatewayHostKey(
  db: Queryable,
  box: SecretBox,
  projectId: string,
): Promise<{ publicKey: string; privateKey: string }> {
  const read = () => gatewayHostKeyRow(db, projectId);
  let row = await read();
  if (!row) {
    const made = await generateSshKeyPair(`sbx-${projectId}`);
    await addGatewayHostKey(
      db,
      projectId,
      // `type base64`, as known_hosts and `ssh.host_key` take it.
      made.publicKey.trim().split(" ").slice(0, 2).join(" "),
      box.seal(made.privateKey),
    );
    row = await read();
  }
  if (!row) throw new Error(`no SSH host key for project ${projectId}`);
  return { publicKey: row.public_key, privateKey: box.open(row.private_key) };
}

/** The project's authorized key line, parsed (undefined when there is none or it is not a key). */
function authorized(line: string | null) {
  let parsed: ReturnType<typeof utils.parseKey> | undefined;
  try {
    parsed = line ? utils.parseKey(line) : undefined;
  } catch {
    return undefined; // ssh2 asserts on some malformed keys rather than answering an Error
  }
  return parsed && !(parsed instanceof Error) ? parsed : undefined;
}

/** Whether the client offers `key` (its algorithm and public blob). */
const offers = (key: NonNullable<ReturnType<typeof authorized>>, offered: { algo: string; data: Buffer }) =>
  key.type === offered.algo && key.getPublicSSH().equals(offered.data);

export class KubernetesSshGateway {
  private readonly listeners = new Map<string, Listener>();
  private readonly sessions = new Set<PodExec>();
  /** Each project's last failure to listen, so it is logged when it starts or changes. */
  private readonly failures = new Map<string, string>();
  private readonly limits: SshGatewayConfig;
  /** Connections not yet logged in, in all and by address (over every project's port). */
  private unauthenticated = 0;
  private readonly unauthenticatedByAddress = new Map<string, number>();
  /** Connections closed before login since the last summary, by reason and address: those after the first. */
  private readonly drops = new Map<string, { reason: DropReason; address: string; count: number }>();
  private dropsUncounted = 0;
  private timer: NodeJS.Timeout | undefined;
  private dropTimer: NodeJS.Timeout | undefined;
  private syncing: Promise<void> | undefined;

  constructor(private readonly options: KubernetesSshGatewayOptions) {
    this.limits = SshGatewayConfig.parse(options.limits ?? {});
  }

  /** Listens for every kubernetes project now, and follows them from then on. */
  async start(): Promise<void> {
    await this.sync();
    this.timer = setInterval(() => void this.sync(), this.options.syncMs ?? 2000);
    this.timer.unref();
    this.dropTimer = setInterval(() => this.logDrops(), DROP_LOG_INTERVAL_MS);
    this.dropTimer.unref();
  }

  /** The ports listened on now, each with its project. */
  get ports(): ReadonlyMap<number, string> {
    return new Map([...this.listeners].map(([projectId, l]) => [l.port, projectId]));
  }

  /** Connections open now, and those of them not yet logged in. */
  get connections(): { open: number; unauthenticated: number } {
    let open = 0;
    for (const listener of this.listeners.values()) open += listener.sockets.size;
    return { open, unauthenticated: this.unauthenticated };
  }

  sync(): Promise<void> {
    this.syncing ??= this.syncOnce().finally(() => (this.syncing = undefined));
    return this.syncing;
  }

  private async syncOnce(): Promise<void> {
    let rows: ProjectRow[];
    try {
      rows = await kubernetesSshTenants(this.options.db);
    } catch (error) {
      this.options.log?.("ssh gateway: tenants not read", { error: (error as Error).message });
      return;
    }
    const wanted = new Map(rows.map((row) => [row.project_id, row]));
    let closed = this.timer === undefined; // the first sync also clears what an earlier runtime left
    for (const [projectId, listener] of this.listeners) {
      const row = wanted.get(projectId);
      if (row && row.ssh_port === listener.port) {
        listener.key = row.public_key;
        continue;
      }
      this.listeners.delete(projectId);
      void this.closeListener(listener);
      closed = true;
    }
    for (const row of rows) {
      if (this.listeners.has(row.project_id)) continue;
      await this.listen(row).then(
        () => this.failures.delete(row.project_id),
        (error: Error) => {
          // Said once per cause, not at every sync while it lasts (a port taken, a key this runtime cannot open).
          if (this.failures.get(row.project_id) === error.message) return;
          this.failures.set(row.project_id, error.message);
          this.options.log?.("ssh gateway: project not listened for", {
            project: row.project_id,
            port: row.ssh_port,
            error: error.message,
          });
        },
      );
    }
    for (const projectId of this.failures.keys()) if (!wanted.has(projectId)) this.failures.delete(projectId);
    // A deleted project's host key has no further use: swept when a listener closes, and at the first sync.
    if (closed) await deleteGatewayHostKeysOfDeletedProjects(this.options.db).catch(() => undefined);
  }

  private async listen(row: ProjectRow): Promise<void> {
    const { privateKey } = await gatewayHostKey(this.options.db, this.options.box, row.project_id);
    const listener: Listener = {
      tcp: createServer({ noDelay: true }, (socket) => this.admit(listener, socket)),
      ssh: new Server({ hostKeys: [privateKey], ident: "agent-sandbox" }, (client, info) =>
        this.connection(row.project_id, listener, client, `${info.ip}|${info.port}`),
      ),
      port: row.ssh_port,
      key: row.public_key,
      sockets: new Set(),
      arriving: new Map(),
    };
    await new Promise<void>((resolve, reject) => {
      listener.tcp.once("error", reject);
      listener.tcp.listen(row.ssh_port, this.options.bindAddress ?? "0.0.0.0", () => {
        listener.tcp.off("error", reject);
        resolve();
      });
    });
    listener.tcp.on("error", (error: Error) =>
      this.options.log?.("ssh gateway listener failed", { project: row.project_id, error: error.message }),
    );
    this.listeners.set(row.project_id, listener);
  }

  /** Stops listening on the port and closes its connections. */
  private closeListener(listener: Listener): Promise<void> {
    const closed = new Promise<void>((resolve) => listener.tcp.close(() => resolve()));
    for (const socket of listener.sockets) socket.destroy();
    return closed;
  }

  /**
   * A new connection on a project's port: refused at once over the caps of connections not yet logged in
   * (from its address, and in all), else counted until it logs in and held to the handshake and login
   * deadlines, as sshd's MaxStartups and LoginGraceTime hold the container backend's.
   */
  private admit(listener: Listener, socket: Socket): void {
    socket.on("error", () => undefined); // a client that goes away mid-handshake
    const address = socket.remoteAddress ?? "";
    const fromAddress = this.unauthenticatedByAddress.get(address) ?? 0;
    const over: DropReason | undefined =
      fromAddress >= this.limits.maxUnauthenticatedPerAddress
        ? "per-address cap"
        : this.unauthenticated >= this.limits.maxUnauthenticated
          ? "total cap"
          : undefined;
    if (over) {
      socket.destroy();
      this.dropped(over, address);
      return;
    }
    this.unauthenticated++;
    this.unauthenticatedByAddress.set(address, fromAddress + 1);
    listener.sockets.add(socket);
    // Each channel whose input is held watches the socket (ssh2's reader is one more).
    socket.setMaxListeners(this.limits.maxChannelsPerConnection + 10);
    const deadline = (reason: DropReason, seconds: number) =>
      setTimeout(() => {
        this.dropped(reason, address);
        socket.destroy();
      }, seconds * 1000);
    const handshake = deadline("handshake timeout", this.limits.handshakeTimeoutSeconds);
    const login = deadline("login timeout", this.limits.loginTimeoutSeconds);
    let counted = true;
    const arrival = `${address}|${socket.remotePort}`;
    const admitted: Admitted = {
      socket,
      address,
      handshaken: () => clearTimeout(handshake),
      release: () => {
        clearTimeout(handshake);
        clearTimeout(login);
        if (!counted) return;
        counted = false;
        this.unauthenticated--;
        const left = (this.unauthenticatedByAddress.get(address) ?? 1) - 1;
        if (left > 0) this.unauthenticatedByAddress.set(address, left);
        else this.unauthenticatedByAddress.delete(address);
      },
    };
    listener.arriving.set(arrival, admitted);
    socket.once("close", () => {
      admitted.release();
      listener.arriving.delete(arrival);
      listener.sockets.delete(socket);
    });
    listener.ssh.injectSocket(socket);
  }

  /**
   * A connection closed before its login, logged: the first for a reason and address at once, any more
   * summed once a minute, so that a flood is seen without flooding the log.
   */
  private dropped(reason: DropReason, address: string): void {
    const key = `${reason} ${address}`;
    const seen = this.drops.get(key);
    if (seen) {
      seen.count++;
      return;
    }
    if (this.drops.size >= DROP_LOG_KEYS) {
      this.dropsUncounted++;
      return;
    }
    this.drops.set(key, { reason, address, count: 0 });
    this.options.log?.("ssh gateway: connection closed before login", {
      reason,
      address,
      ...this.capOf(reason),
    });
  }

  private logDrops(): void {
    for (const { reason, address, count } of this.drops.values())
      if (count > 0)
        this.options.log?.("ssh gateway: connections closed before login", {
          reason,
          address,
          count,
          seconds: DROP_LOG_INTERVAL_MS / 1000,
          ...this.capOf(reason),
        });
    if (this.dropsUncounted > 0)
      this.options.log?.("ssh gateway: connections closed before login", {
        reason: "any",
        address: "others",
        count: this.dropsUncounted,
        seconds: DROP_LOG_INTERVAL_MS / 1000,
      });
    this.drops.clear();
    this.dropsUncounted = 0;
  }

  /** The setting a drop's reason comes from, for its log line. */
  private capOf(reason: DropReason): Record<string, number> {
    switch (reason) {
      case "per-address cap":
        return { maxUnauthenticatedPerAddress: this.limits.maxUnauthenticatedPerAddress };
      case "total cap":
        return { maxUnauthenticated: this.limits.maxUnauthenticated };
      case "handshake timeout":
        return { handshakeTimeoutSeconds: this.limits.handshakeTimeoutSeconds };
      case "login timeout":
        return { loginTimeoutSeconds: this.limits.loginTimeoutSeconds };
      case "too many auth failures":
        return { maxAuthTries: MAX_AUTH_TRIES };
    }
  }

  private connection(projectId: string, listener: Listener, client: Connection, arrival: string): void {
    client.on("error", () => undefined); // a client that goes away mid-handshake
    const admitted = listener.arriving.get(arrival);
    listener.arriving.delete(arrival);
    if (!admitted) {
      // Not a socket this gateway admitted (it cannot be: ssh2 has no other way in); not served.
      client.end();
      return;
    }
    client.once("handshake", () => admitted.handshaken());
    let failures = 0;
    client.on("authentication", (context) => {
      const key = context.method === "publickey" && context.username === SSH_USER && authorized(listener.key);
      if (key && context.method === "publickey" && offers(key, context.key)) {
        // The first ask is whether the key would do; the second carries the signature to check. ssh2 answers
        // an Error (truthy) when the check itself fails (a key the crypto library cannot load): only `true` is.
        if (!context.signature) return context.accept();
        if (key.verify(context.blob!, context.signature, context.hashAlgo) === true) return context.accept();
      }
      context.reject(["publickey"]);
      // Every client asks with `none` first; that is not a failed attempt.
      if (context.method !== "none" && ++failures >= MAX_AUTH_TRIES) {
        this.dropped("too many auth failures", admitted.address);
        admitted.socket.destroy();
      }
    });
    client.on("ready", () => {
      admitted.release();
      this.options.log?.("ssh gateway: login", { project: projectId });
      // Sessions and forwarded connections open at once, each an exec in the Pod: capped as sshd's MaxSessions.
      let channels = 0;
      const opened = (kind: string): boolean => {
        if (channels >= this.limits.maxChannelsPerConnection) {
          this.options.log?.("ssh gateway: channel refused", {
            project: projectId,
            kind,
            maxChannelsPerConnection: this.limits.maxChannelsPerConnection,
          });
          return false;
        }
        channels++;
        return true;
      };
      const closed = () => channels--;
      client.on("session", (accept, reject) => {
        if (!opened("session")) return reject();
        const session = accept();
        session.once("close", closed);
        this.session(projectId, admitted.socket, session);
      });
      // A local forward (`ssh -L`, `-W`) to a port of the sandbox's own loopback (a dev server): carried by a
      // relay in the Pod. Anywhere else is refused: the sandbox's egress is its proxy's to allow.
      client.on("tcpip", (accept, reject, info) => {
        if (!LOOPBACK.has(info.destIP) || !Number.isInteger(info.destPort) || info.destPort < 1)
          return reject();
        if (!opened("forward")) return reject();
        const channel = accept();
        channel.once("close", closed);
        void this.forward(projectId, admitted.socket, channel, info.destPort);
      });
      client.on("request", (accept, reject) => reject?.());
    });
  }

  private session(projectId: string, socket: Socket, session: Session): void {
    let terminal: { term: string; cols: number; rows: number } | undefined;
    let running: PodExec | undefined;
    session.on("pty", (accept, _reject, info) => {
      terminal = { term: info.term || "xterm-256color", cols: info.cols, rows: info.rows };
      accept?.();
    });
    session.on("window-change", (accept, _reject, info) => {
      running?.resize(info.cols, info.rows);
      accept?.();
    });
    session.on("env", (_accept, reject) => reject?.());
    session.on("auth-agent", (_accept, reject) => reject?.());
    session.on("x11", (_accept, reject) => reject?.());
    session.on("signal", (accept) => accept?.());
    const start = (channel: ServerChannel, argv: readonly string[], tty: boolean, endsWithInput = false) =>
      void this.run(projectId, socket, channel, argv, tty ? terminal : undefined, endsWithInput).then(
        (exec) => (running = exec),
      );
    session.on("shell", (accept) => start(accept(), ["bash", "-l"], true));
    session.on("exec", (accept, _reject, info) => start(accept(), ["bash", "-c", info.command], true));
    session.on("subsystem", (accept, reject, info) => {
      if (info.name !== "sftp") return reject();
      start(accept(), [SFTP_SERVER], false, true);
    });
  }

  /**
   * The client's input to the exec, with back-pressure: while the exec's connection holds more than it lets
   * a writer add, the channel is paused, so ssh2 stops widening the client's window and the client stops
   * sending. ssh2 does not hold a client to its window (a packet past it is taken), so one that sends on
   * regardless is closed once its channel holds more than the window allowed.
   */
  private carryInput(socket: Socket, channel: ServerChannel, exec: PodExec): void {
    let held = false;
    const overflowing = () => {
      if (channel.readableLength > MAX_UNREAD_INPUT_BYTES) socket.destroy();
    };
    const release = () => {
      if (!held) return;
      held = false;
      socket.off("data", overflowing); // after ssh2's own reader, which feeds the channel
      channel.resume();
    };
    channel.on("data", (chunk: Buffer) => {
      if (exec.write(chunk, release) || held) return;
      held = true;
      channel.pause();
      socket.on("data", overflowing);
    });
    channel.once("close", release);
  }

  /** Carries one channel into the Pod: input in, output out (stderr apart without a terminal), the exit code. */
  private async run(
    projectId: string,
    socket: Socket,
    channel: ServerChannel,
    argv: readonly string[],
    terminal: { term: string; cols: number; rows: number } | undefined,
    endsWithInput = false,
  ): Promise<PodExec | undefined> {
    // The container's own environment (its user's HOME), plus what a login over SSH sets.
    const env = { LANG: "C.UTF-8", ...(terminal ? { TERM: terminal.term } : {}) };
    let exec: PodExec | undefined;
    const outputRoom = pauseWhileFull({ pause: () => exec?.pause(), resume: () => exec?.resume() }, [
      channel,
      channel.stderr,
      socket,
    ]);
    try {
      exec = await this.options.exec(
        projectId,
        withEnv(
          env,
          // With a terminal, its size is set before the command starts: the exec's resize message travels
          // after the process has started, and a command that reads its size at once (stty size, a
          // full-screen editor's first frame) got 0x0 (kubernetes-cluster.test.ts, in a full run).
          terminal
            ? ["sh", "-c", `stty cols "$1" rows "$2" 2>/dev/null; shift 2; ${IN_HOME}`, "sh"].concat(
                [String(terminal.cols), String(terminal.rows)],
                argv,
              )
            : ["sh", "-c", IN_HOME, "sh", ...argv],
        ),
        {
          stdin: true,
          tty: terminal !== undefined,
          onOutput: (stream, chunk) => {
            (stream === "stderr" ? channel.stderr : channel).write(chunk);
            outputRoom();
          },
        },
      );
    } catch (error) {
      channel.stderr.write(`agent-sandbox: ${(error as Error).message}\r\n`);
      channel.exit(255);
      channel.end();
      return undefined;
    }
    const started = exec;
    this.sessions.add(started);
    let closedAfterEnd = false;
    if (terminal) started.resize(terminal.cols, terminal.rows);
    this.carryInput(socket, channel, started);
    channel.on("end", () => {
      started.endInput();
      // An SFTP client sends its end only when every answer has come, so the server has nothing left to say.
      // Where the end cannot reach it (a v4 exec, or kwok: stdin stays open), the session is ended here.
      if (endsWithInput) {
        closedAfterEnd = true;
        setTimeout(() => started.close(), SFTP_LINGER_MS).unref();
      }
    });
    channel.on("close", () => {
      // An SFTP session the client closes has ended as it should (the server's exit is not a failure then).
      if (endsWithInput) closedAfterEnd = true;
      started.close();
    });
    void started.exited
      .then(
        (code) => {
          channel.exit(code);
          channel.end();
        },
        () => {
          // The Pod (or the cluster's reach) went away mid-session; or an SFTP session ended by its client.
          channel.exit(closedAfterEnd ? 0 : 255);
          channel.end();
        },
      )
      .finally(() => this.sessions.delete(started));
    return started;
  }

  /** Carries one forwarded connection to `port` on the Pod's loopback through a relay run by exec. */
  private async forward(
    projectId: string,
    socket: Socket,
    channel: ServerChannel,
    port: number,
  ): Promise<void> {
    let exec: PodExec | undefined;
    const outputRoom = pauseWhileFull({ pause: () => exec?.pause(), resume: () => exec?.resume() }, [
      channel,
      socket,
    ]);
    try {
      exec = await this.options.exec(projectId, [PYTHON, "-c", RELAY, String(port)], {
        stdin: true,
        tty: false,
        onOutput: (stream, chunk) => {
          if (stream !== "stdout") return;
          channel.write(chunk);
          outputRoom();
        },
      });
    } catch {
      channel.close();
      return;
    }
    const started = exec;
    this.sessions.add(started);
    this.carryInput(socket, channel, started);
    channel.on("end", () => started.endInput());
    channel.on("close", () => started.close());
    void started.exited
      .catch(() => undefined)
      .then(() => channel.end())
      .finally(() => this.sessions.delete(started));
  }

  /** Stops listening and ends every session and connection. */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    if (this.dropTimer) clearInterval(this.dropTimer);
    this.logDrops();
    await this.syncing;
    for (const exec of this.sessions) exec.close();
    await Promise.all([...this.listeners.values()].map((listener) => this.closeListener(listener)));
    this.listeners.clear();
  }
}
