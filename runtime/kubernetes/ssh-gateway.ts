// SSH to a kubernetes project's sandbox (issue 20). The Pod runs as the agent with every capability dropped, so
// it runs no sshd; instead the runtime answers SSH on the project's own port (`ssh.port` of the API, from
// `tenants.sshPortRange`, as for the other backends) and carries each session into the Pod through the API
// server's exec: a shell or a command, with a terminal when one is asked for (resized with the client's
// window), or the SFTP subsystem (which `scp` uses too). Only the project's key may log in, as `agent`; the
// gateway's host key is the project's own, made at its first listen and kept (sealed) in the database, and the
// API shows it (`ssh.host_key`) so a client can pin it. What the sandbox's sshd refuses is refused too: other
// users, passwords, agent and X11 forwarding, remote forwards; a local forward reaches only the Pod's loopback.
// ssh2 is CommonJS, and Node's ESM loader finds only some of its names (not Server): take them from its default.
import ssh2, { type Connection, type Server as SshServer, type ServerChannel, type Session } from "ssh2";
import { generateSshKeyPair } from "../../lib/ssh-keygen.js";
import type { Queryable } from "../db.js";
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

export interface KubernetesSshGatewayOptions {
  readonly db: Queryable;
  readonly box: SecretBox;
  /** A command in a project's Pod (runtime/kubernetes/sandbox.ts `kubernetesProjects(...).exec`). */
  readonly exec: (projectId: string, argv: readonly string[], options: PodExecOptions) => Promise<PodExec>;
  /** The address every project's port is opened on (default all: the host's firewall decides who reaches it). */
  readonly bindAddress?: string;
  /** How often the listeners follow the projects (a new one, a deleted one, a new key), default 2 s. */
  readonly syncMs?: number;
  readonly log?: (message: string, fields?: Record<string, unknown>) => void;
}

interface ProjectRow {
  readonly project_id: string;
  readonly ssh_port: number;
  readonly public_key: string | null;
}

interface Listener {
  readonly server: SshServer;
  readonly port: number;
  /** The project's key as last read: a new one (a warm-pool claim) holds from the next login on. */
  key: string | null;
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
  const read = async () =>
    (
      await db.query<{ public_key: string; private_key: string }>(
        "select public_key, private_key from ssh_gateway_host_keys where project_id = $1",
        [projectId],
      )
    ).rows[0];
  let row = await read();
  if (!row) {
    const made = await generateSshKeyPair(`sbx-${projectId}`);
    await db.query(
      `insert into ssh_gateway_host_keys (project_id, public_key, private_key) values ($1, $2, $3)
         on conflict (project_id) do nothing`,
      // `type base64`, as known_hosts and `ssh.host_key` take it.
      [projectId, made.publicKey.trim().split(" ").slice(0, 2).join(" "), box.seal(made.privateKey)],
    );
    row = await read();
  }
  if (!row) throw new Error(`no SSH host key for project ${projectId}`);
  return { publicKey: row.public_key, privateKey: box.open(row.private_key) };
}

/** The project's authorized key line, parsed (undefined when there is none or it is not a key). */
function authorized(line: string | null) {
  const parsed = line ? utils.parseKey(line) : undefined;
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
  private timer: NodeJS.Timeout | undefined;
  private syncing: Promise<void> | undefined;

  constructor(private readonly options: KubernetesSshGatewayOptions) {}

  /** Listens for every kubernetes project now, and follows them from then on. */
  async start(): Promise<void> {
    await this.sync();
    this.timer = setInterval(() => void this.sync(), this.options.syncMs ?? 2000);
    this.timer.unref();
  }

  /** The ports listened on now, each with its project. */
  get ports(): ReadonlyMap<number, string> {
    return new Map([...this.listeners].map(([projectId, l]) => [l.port, projectId]));
  }

  sync(): Promise<void> {
    this.syncing ??= this.syncOnce().finally(() => (this.syncing = undefined));
    return this.syncing;
  }

  private async syncOnce(): Promise<void> {
    let rows: ProjectRow[];
    try {
      ({ rows } = await this.options.db.query<ProjectRow>(
        `select project_id, ssh_port, spec->>'sshPublicKey' as public_key from tenants
          where spec->>'backend' = 'kubernetes' and ssh_port is not null and state <> 'deleted'`,
      ));
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
      listener.server.close();
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
    if (closed)
      await this.options.db
        .query(
          `delete from ssh_gateway_host_keys k using tenants t
            where t.project_id = k.project_id and t.state = 'deleted'`,
        )
        .catch(() => undefined);
  }

  private async listen(row: ProjectRow): Promise<void> {
    const { privateKey } = await gatewayHostKey(this.options.db, this.options.box, row.project_id);
    const listener: Listener = {
      server: new Server({ hostKeys: [privateKey], ident: "agent-sandbox" }, (client) =>
        this.connection(row.project_id, listener, client),
      ),
      port: row.ssh_port,
      key: row.public_key,
    };
    await new Promise<void>((resolve, reject) => {
      listener.server.once("error", reject);
      listener.server.listen(row.ssh_port, this.options.bindAddress ?? "0.0.0.0", () => {
        listener.server.off("error", reject);
        resolve();
      });
    });
    listener.server.on("error", (error: Error) =>
      this.options.log?.("ssh gateway listener failed", { project: row.project_id, error: error.message }),
    );
    this.listeners.set(row.project_id, listener);
  }

  private connection(projectId: string, listener: Listener, client: Connection): void {
    client.on("error", () => undefined); // a client that goes away mid-handshake
    client.on("authentication", (context) => {
      const key = context.method === "publickey" && context.username === SSH_USER && authorized(listener.key);
      if (key && context.method === "publickey" && offers(key, context.key)) {
        // The first ask is whether the key would do; the second carries the signature to check.
        if (!context.signature) return context.accept();
        if (key.verify(context.blob!, context.signature, context.hashAlgo)) return context.accept();
      }
      context.reject(["publickey"]);
    });
    client.on("ready", () => {
      this.options.log?.("ssh gateway: login", { project: projectId });
      client.on("session", (accept) => this.session(projectId, accept()));
      // A local forward (`ssh -L`, `-W`) to a port of the sandbox's own loopback (a dev server): carried by a
      // relay in the Pod. Anywhere else is refused: the sandbox's egress is its proxy's to allow.
      client.on("tcpip", (accept, reject, info) => {
        if (!LOOPBACK.has(info.destIP) || !Number.isInteger(info.destPort) || info.destPort < 1)
          return reject();
        void this.forward(projectId, accept(), info.destPort);
      });
      client.on("request", (accept, reject) => reject?.());
    });
  }

  private session(projectId: string, session: Session): void {
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
      void this.run(projectId, channel, argv, tty ? terminal : undefined, endsWithInput).then(
        (exec) => (running = exec),
      );
    session.on("shell", (accept) => start(accept(), ["bash", "-l"], true));
    session.on("exec", (accept, _reject, info) => start(accept(), ["bash", "-c", info.command], true));
    session.on("subsystem", (accept, reject, info) => {
      if (info.name !== "sftp") return reject();
      start(accept(), [SFTP_SERVER], false, true);
    });
  }

  /** Carries one channel into the Pod: input in, output out (stderr apart without a terminal), the exit code. */
  private async run(
    projectId: string,
    channel: ServerChannel,
    argv: readonly string[],
    terminal: { term: string; cols: number; rows: number } | undefined,
    endsWithInput = false,
  ): Promise<PodExec | undefined> {
    // The container's own environment (its user's HOME), plus what a login over SSH sets.
    const env = { LANG: "C.UTF-8", ...(terminal ? { TERM: terminal.term } : {}) };
    let exec: PodExec;
    try {
      exec = await this.options.exec(
        projectId,
        withEnv(env, ["sh", "-c", 'cd "$HOME" 2>/dev/null; exec "$@"', "sh", ...argv]),
        {
          stdin: true,
          tty: terminal !== undefined,
          onOutput: (stream, chunk) =>
            stream === "stderr" ? channel.stderr.write(chunk) : channel.write(chunk),
        },
      );
    } catch (error) {
      channel.stderr.write(`agent-sandbox: ${(error as Error).message}\r\n`);
      channel.exit(255);
      channel.end();
      return undefined;
    }
    this.sessions.add(exec);
    let closedAfterEnd = false;
    if (terminal) exec.resize(terminal.cols, terminal.rows);
    channel.on("data", (chunk: Buffer) => exec.write(chunk));
    channel.on("end", () => {
      exec.endInput();
      // An SFTP client sends its end only when every answer has come, so the server has nothing left to say.
      // Where the end cannot reach it (a v4 exec, or kwok: stdin stays open), the session is ended here.
      if (endsWithInput) {
        closedAfterEnd = true;
        setTimeout(() => exec.close(), SFTP_LINGER_MS).unref();
      }
    });
    channel.on("close", () => {
      // An SFTP session the client closes has ended as it should (the server's exit is not a failure then).
      if (endsWithInput) closedAfterEnd = true;
      exec.close();
    });
    void exec.exited
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
      .finally(() => this.sessions.delete(exec));
    return exec;
  }

  /** Carries one forwarded connection to `port` on the Pod's loopback through a relay run by exec. */
  private async forward(projectId: string, channel: ServerChannel, port: number): Promise<void> {
    let exec: PodExec;
    try {
      exec = await this.options.exec(projectId, [PYTHON, "-c", RELAY, String(port)], {
        stdin: true,
        tty: false,
        onOutput: (stream, chunk) => {
          if (stream === "stdout") channel.write(chunk);
        },
      });
    } catch {
      channel.close();
      return;
    }
    this.sessions.add(exec);
    channel.on("data", (chunk: Buffer) => exec.write(chunk));
    channel.on("end", () => exec.endInput());
    channel.on("close", () => exec.close());
    void exec.exited
      .catch(() => undefined)
      .then(() => channel.end())
      .finally(() => this.sessions.delete(exec));
  }

  /** Stops listening and ends every session. */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.syncing;
    for (const exec of this.sessions) exec.close();
    await Promise.all(
      [...this.listeners.values()].map(
        (listener) => new Promise<void>((resolve) => listener.server.close(() => resolve())),
      ),
    );
    this.listeners.clear();
  }
}
