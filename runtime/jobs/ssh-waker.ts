// The SSH waker: while a sandbox sleeps (runtime/tenants/wake.ts), its SSH port is free, so an `ssh` to it
// would be refused. The runtime listens there instead. A connection that starts as SSH does (the client's
// identification line, which OpenSSH sends unasked) wakes the sandbox and is held until it runs; then it is
// joined to the sandbox's own sshd, which does everything else (keys, the session): the waker reads nothing
// past that first line, and a connection that says something else, or nothing, wakes nothing.
//
// The port must be the sandbox's again before anything starts it: every operation of the project takes it
// back first (the reconciler's `sleepingPorts`), and the waker lets go of it before it asks for the start.
// Clients that come within a moment of the first are held with it; a later one, in the second or so between
// that and the sandbox's own listener, is refused (`ssh -o ConnectionAttempts=` retries it).
import { connect, createServer, type Server, type Socket } from "node:net";
import type { Database } from "../store/db.js";
import { sleepingSshPorts } from "../store/tenants.js";

export interface SshWakerOptions {
  /** Starts the project if it is asleep and waits until it runs (wakeProject with the runtime's bound). */
  readonly wake: (projectId: string, gone: () => boolean) => Promise<boolean>;
  /** How often the sleeping sandboxes are listed again (default 2 s). */
  readonly refreshMs?: number;
  /** The address the sandboxes' SSH ports are published on (default every address, as the engine does). */
  readonly host?: string;
  /** How long the port stays ours after the first SSH client, for others that come with it (default 250 ms). */
  readonly gatherMs?: number;
  /** How long the sandbox's sshd may take to answer once it runs (default 20 s). */
  readonly sshdWaitMs?: number;
  /** How long a connection may take to say an SSH client's first line before it is closed (default 10 s). */
  readonly identificationWaitMs?: number;
  readonly log?: (message: string, fields?: Record<string, unknown>) => void;
}

/** What a connection must say first: an SSH client's identification line begins so (RFC 4253, 4.2). */
const SSH_IDENTIFICATION = "SSH-";
/** How long a connection may take to say it (by default), and the most it may send before the line ends. */
const IDENTIFICATION_WAIT_MS = 10_000;
const IDENTIFICATION_MAX_BYTES = 255;

export class SshWaker {
  /** The listeners held now, by project. */
  private readonly held = new Map<string, { port: number; server: Server }>();
  /** Projects an operation is working on: never held until it ends (counted, operations can overlap). */
  private readonly busy = new Map<string, number>();
  /** The wake under way for each project, shared by the connections that came for it. */
  private readonly waking = new Map<string, Promise<boolean>>();
  /** Connections joined or being woken, so `stop` can end them. */
  private readonly connections = new Set<Socket>();
  private timer: NodeJS.Timeout | undefined;
  private refreshing: Promise<void> | undefined;
  private stopped = false;

  constructor(
    private readonly db: Database,
    private readonly options: SshWakerOptions,
  ) {}

  start(): void {
    const tick = () => {
      this.timer = setTimeout(
        () => void this.refresh().finally(() => !this.stopped && tick()),
        this.refreshMs,
      );
    };
    void this.refresh().finally(() => !this.stopped && tick());
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await this.refreshing;
    for (const projectId of [...this.held.keys()]) await this.release(projectId);
    for (const socket of this.connections) socket.destroy();
  }

  /** The projects whose SSH port the waker holds now. */
  holding(): string[] {
    return [...this.held.keys()].sort();
  }

  /**
   * Gives the project's port back for an operation, and keeps it given until the returned function is
   * called (the operation ended): the sandbox's start binds it.
   */
  async takeBack(projectId: string): Promise<() => void> {
    this.busy.set(projectId, (this.busy.get(projectId) ?? 0) + 1);
    await this.release(projectId);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const left = (this.busy.get(projectId) ?? 1) - 1;
      if (left > 0) this.busy.set(projectId, left);
      else this.busy.delete(projectId);
    };
  }

  /** Lists the sleeping sandboxes again: listens on each one's port, lets go of those no longer asleep. */
  refresh(): Promise<void> {
    this.refreshing ??= this.refreshNow().finally(() => (this.refreshing = undefined));
    return this.refreshing;
  }

  private get refreshMs(): number {
    return this.options.refreshMs ?? 2_000;
  }

  private async refreshNow(): Promise<void> {
    let sleeping: { project_id: string; ssh_port: number }[];
    try {
      sleeping = await sleepingSshPorts(this.db);
    } catch (error) {
      this.log("the sleeping sandboxes could not be listed", { error: (error as Error).message });
      return;
    }
    const wanted = new Map(sleeping.map((s) => [s.project_id, s.ssh_port]));
    for (const [projectId, { port }] of [...this.held])
      if (wanted.get(projectId) !== port) await this.release(projectId);
    for (const [projectId, port] of wanted) {
      if (this.stopped || this.held.has(projectId) || this.busy.has(projectId)) continue;
      await this.hold(projectId, port);
    }
  }

  private async hold(projectId: string, port: number): Promise<void> {
    const server = createServer((socket) => this.connected(projectId, port, socket));
    const listening = await new Promise<boolean>((resolve) => {
      server.once("error", (error: NodeJS.ErrnoException) => {
        // Taken: the sandbox itself has it again (started meanwhile), or something else does: not ours.
        if (error.code !== "EADDRINUSE")
          this.log("could not listen on a sleeping sandbox's SSH port", {
            project: projectId,
            port,
            error: error.message,
          });
        resolve(false);
      });
      server.listen({ port, host: this.options.host ?? "0.0.0.0", exclusive: true }, () => resolve(true));
    });
    // An operation may have begun while it bound: the port is the sandbox's then.
    if (!listening || this.busy.has(projectId) || this.stopped) {
      if (listening) await closeListener(server);
      return;
    }
    this.held.set(projectId, { port, server });
  }

  private async release(projectId: string): Promise<void> {
    const held = this.held.get(projectId);
    if (!held) return;
    this.held.delete(projectId);
    await closeListener(held.server);
  }

  /** One connection to a sleeping sandbox's port: an SSH client's wakes it and is joined to its sshd. */
  private connected(projectId: string, port: number, client: Socket): void {
    this.connections.add(client);
    client.once("close", () => this.connections.delete(client));
    client.on("error", () => client.destroy());
    void this.serve(projectId, port, client).catch((error: Error) => {
      this.log("an SSH connection to a sleeping sandbox was not served", {
        project: projectId,
        error: error.message,
      });
      client.destroy();
    });
  }

  private async serve(projectId: string, port: number, client: Socket): Promise<void> {
    const said = await identification(client, this.options.identificationWaitMs ?? IDENTIFICATION_WAIT_MS);
    if (!said) {
      client.destroy();
      return;
    }
    // Not asleep after all (started meanwhile, or stopped by its owner): its sshd answers now or never.
    const woke = await this.wakeOnce(projectId);
    if (client.destroyed) return;
    const gone = () => client.destroyed;
    const sshd = await sshdAnswer(port, woke ? (this.options.sshdWaitMs ?? 20_000) : 2_000, gone);
    if (!sshd) {
      client.destroy();
      return;
    }
    this.connections.add(sshd.socket);
    sshd.socket.once("close", () => this.connections.delete(sshd.socket));
    join(client, sshd.socket, said, sshd.first);
  }

  /**
   * Wakes the project once for every connection that asks while it wakes. The port stays ours for a moment
   * after the first (`gatherMs`): clients that come together (an editor opens several) are held together,
   * where a later one would be refused while the sandbox's own listener is not there yet. Then the port goes
   * back (the start binds it) and the wake is asked for.
   */
  private wakeOnce(projectId: string): Promise<boolean> {
    let waking = this.waking.get(projectId);
    if (!waking) {
      waking = (async () => {
        await new Promise((resolve) => setTimeout(resolve, this.options.gatherMs ?? 250));
        const giveBack = await this.takeBack(projectId);
        try {
          this.log("an SSH connection wakes a sleeping sandbox", { project: projectId });
          return await this.options.wake(projectId, () => this.stopped);
        } finally {
          giveBack();
        }
      })().finally(() => this.waking.delete(projectId));
      this.waking.set(projectId, waking);
    }
    return waking;
  }

  private log(message: string, fields?: Record<string, unknown>): void {
    this.options.log?.(`ssh waker: ${message}`, fields);
  }
}

/** Stops listening now (the port is free at once); connections already accepted go on. */
function closeListener(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close();
    // close's own callback waits for the accepted connections to end; the listening socket is closed by
    // the next turn of the loop.
    setImmediate(resolve);
  });
}

/**
 * What the client sent first, once it holds a whole line that begins as an SSH client's identification, or
 * undefined when it says something else, too much, or nothing in time. Reading stops there.
 */
function identification(client: Socket, waitMs: number): Promise<Buffer | undefined> {
  return new Promise((resolve) => {
    let received = Buffer.alloc(0);
    const finish = (value: Buffer | undefined) => {
      clearTimeout(timer);
      client.off("data", onData);
      client.off("close", onClose);
      client.pause();
      resolve(value);
    };
    const onData = (chunk: Buffer) => {
      received = Buffer.concat([received, chunk]);
      const start = received.subarray(0, SSH_IDENTIFICATION.length).toString("latin1");
      if (!SSH_IDENTIFICATION.startsWith(start)) return finish(undefined);
      if (received.includes(0x0a)) return finish(received);
      if (received.length > IDENTIFICATION_MAX_BYTES) finish(undefined);
    };
    const onClose = () => finish(undefined);
    const timer = setTimeout(() => finish(undefined), waitMs);
    client.on("data", onData);
    client.once("close", onClose);
  });
}

/**
 * A connection to the sandbox's SSH port once its sshd answers (its first bytes), retried until `waitMs`:
 * the engine's or the forwarder's listener accepts before the sshd behind it is up, and then closes.
 */
async function sshdAnswer(
  port: number,
  waitMs: number,
  gone: () => boolean,
): Promise<{ socket: Socket; first: Buffer } | undefined> {
  const deadline = Date.now() + waitMs;
  while (Date.now() < deadline && !gone()) {
    const answer = await new Promise<{ socket: Socket; first: Buffer } | undefined>((resolve) => {
      const socket = connect({ host: "127.0.0.1", port });
      const timer = setTimeout(() => fail(), Math.max(100, deadline - Date.now()));
      const fail = () => {
        clearTimeout(timer);
        socket.destroy();
        resolve(undefined);
      };
      socket.once("error", fail);
      socket.once("close", fail);
      socket.once("data", (first: Buffer) => {
        clearTimeout(timer);
        socket.off("error", fail);
        socket.off("close", fail);
        socket.pause();
        resolve({ socket, first });
      });
    });
    if (answer) return answer;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  return undefined;
}

/** Joins the client to the sandbox's sshd, each side first given what the other already said. */
function join(client: Socket, sshd: Socket, fromClient: Buffer, fromSshd: Buffer): void {
  const close = () => {
    client.destroy();
    sshd.destroy();
  };
  for (const socket of [client, sshd]) {
    socket.on("error", close);
    socket.on("close", close);
  }
  client.write(fromSshd);
  sshd.write(fromClient);
  client.pipe(sshd);
  sshd.pipe(client);
  client.resume();
  sshd.resume();
}
