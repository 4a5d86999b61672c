// A command in a Pod's container through the API server's `exec` subresource, over a websocket: the
// `v5.channel.k8s.io` protocol (Kubernetes 1.30 and later; `v4` accepted, without closing stdin). Each binary
// message starts with its channel: 0 stdin, 1 stdout, 2 stderr, 3 the command's final Status, 4 a terminal
// resize, 255 a close of the channel in the next byte (v5: how stdin reaches end of file).
import { constants } from "node:os";
import type WebSocket from "ws";
import { ClusterUnreachableError, KubernetesApiError, type KubernetesClient } from "./client.js";

export interface PodContainer {
  readonly namespace: string;
  readonly pod: string;
  readonly container: string;
}

export type ExecOutput = "stdout" | "stderr";

export interface PodExecOptions {
  /** Open stdin (to {@link PodExec.write}). */
  readonly stdin: boolean;
  /** Allocate a terminal: stdout and stderr come as one stream, and {@link PodExec.resize} works. */
  readonly tty: boolean;
  readonly onOutput: (stream: ExecOutput, chunk: Buffer) => void;
}

/**
 * What the connection may hold of stdin not yet sent before {@link PodExec.write} asks its caller to wait: a
 * reader that is slow (or stopped) must not make the runtime hold a whole upload.
 */
export const SEND_BUFFER_BYTES = 1024 * 1024;

export interface PodExec {
  /** The negotiated protocol (`v5.channel.k8s.io` or `v4.channel.k8s.io`). */
  readonly protocol: string;
  /**
   * Sends `data` on stdin. Answers false once the connection holds more than {@link SEND_BUFFER_BYTES} not yet
   * sent: the caller sends no more until `sent` is called, once this message has left (at once, before the
   * answer, when it answers true). A connection that has closed drops what it is given.
   */
  write(data: Buffer | string, sent?: () => void): boolean;
  /** End of file on stdin (v5 only: under v4 stdin stays open until the connection closes). */
  endInput(): void;
  resize(cols: number, rows: number): void;
  pause(): void;
  resume(): void;
  /** The exit code from the command's Status; rejects when the connection ended without one. */
  readonly exited: Promise<number>;
  /** Closes the connection (the API server then ends the exec's streams). */
  close(): void;
}

/** Go's descriptions of the signals a command is ended by (os/exec's `signal: <description>`). */
const SIGNAL_BY_DESCRIPTION: Readonly<Record<string, number>> = {
  hangup: constants.signals.SIGHUP,
  interrupt: constants.signals.SIGINT,
  quit: constants.signals.SIGQUIT,
  killed: constants.signals.SIGKILL,
  terminated: constants.signals.SIGTERM,
  "user defined signal 1": constants.signals.SIGUSR1,
  "user defined signal 2": constants.signals.SIGUSR2,
  "broken pipe": constants.signals.SIGPIPE,
};

const PROTOCOLS = ["v5.channel.k8s.io", "v4.channel.k8s.io"] as const;
const CHANNEL = { stdin: 0, stdout: 1, stderr: 2, status: 3, resize: 4, close: 255 } as const;

interface Status {
  status?: string;
  reason?: string;
  message?: string;
  details?: { causes?: { reason?: string; message?: string }[] };
}

/**
 * The exit code a final Status reports: 0 on Success, the `ExitCode` cause of a NonZeroExitCode (a kubelet
 * reports a command a signal ended as 128 + n). A node that reports a command's end in words instead (kwok, whose
 * `exit status 3` and `signal: killed` are Go's) gets the same codes.
 */
export function exitCodeOfStatus(status: Status): number {
  if (status.status === "Success") return 0;
  if (status.reason === "NonZeroExitCode") {
    const cause = status.details?.causes?.find((c) => c.reason === "ExitCode");
    const code = Number.parseInt(cause?.message ?? "", 10);
    if (Number.isInteger(code)) return code;
  }
  // kwok's local processes end as Go's os/exec reports them: `exit status N`, or `signal: <description>`.
  const exited = /: exit status (\d+)$/.exec(status.message ?? "");
  if (exited) return Number.parseInt(exited[1]!, 10);
  const signalled = /: signal: ([a-z ]+)$/.exec(status.message ?? "");
  const number = signalled ? SIGNAL_BY_DESCRIPTION[signalled[1]!] : undefined;
  if (number !== undefined) return 128 + number;
  throw new Error(`the command did not run: ${status.message ?? status.reason ?? JSON.stringify(status)}`);
}

/** The exec subresource's path with its query: one `command` per argv element. */
export function execPath(
  target: PodContainer,
  argv: readonly string[],
  stdin: boolean,
  tty: boolean,
): string {
  const query = new URLSearchParams();
  query.set("container", target.container);
  for (const arg of argv) query.append("command", arg);
  query.set("stdin", String(stdin));
  query.set("stdout", "true");
  query.set("stderr", String(!tty));
  query.set("tty", String(tty));
  const ns = encodeURIComponent(target.namespace);
  return `/api/v1/namespaces/${ns}/pods/${encodeURIComponent(target.pod)}/exec?${query.toString()}`;
}

/** Starts `argv` in the container; resolves once the API server has accepted the stream. */
export async function podExec(
  client: KubernetesClient,
  target: PodContainer,
  argv: readonly string[],
  options: PodExecOptions,
): Promise<PodExec> {
  if (argv.length === 0) throw new Error("exec: an empty argv");
  const apiPath = execPath(target, argv, options.stdin, options.tty);
  const socket = await client.websocket(apiPath, PROTOCOLS);
  await new Promise<void>((resolve, reject) => {
    // The first outcome counts: a refusal's body is read to its end before the socket is let go, and the
    // error the abandoned handshake then raises is not another outcome.
    let settled = false;
    const settle = (error?: Error) => {
      if (settled) return;
      settled = true;
      if (error) reject(error);
      else resolve();
    };
    socket.once("open", () => settle());
    socket.once("unexpected-response", (req, res) => {
      const chunks: Buffer[] = [];
      res.on("data", (chunk: Buffer) => chunks.push(chunk));
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8");
        let status: Status;
        try {
          status = JSON.parse(text) as Status;
        } catch {
          status = { message: text.slice(0, 500) };
        }
        settle(
          new KubernetesApiError(
            "GET",
            apiPath,
            res.statusCode ?? 0,
            status.reason ?? "",
            status.message ?? "",
          ),
        );
        req.destroy();
      });
    });
    socket.on("error", (error) => settle(client.networkError(error)));
  });
  const protocol = socket.protocol;
  if (!PROTOCOLS.includes(protocol as (typeof PROTOCOLS)[number])) {
    socket.close();
    throw new Error(
      `exec: the API server chose the protocol '${protocol}', not one of ${PROTOCOLS.join(", ")}`,
    );
  }
  const send = (channel: number, data: Buffer, sent?: () => void): boolean => {
    if (socket.readyState !== socket.OPEN) {
      sent?.();
      return true;
    }
    const message = Buffer.concat([Buffer.from([channel]), data]);
    if (!sent) {
      socket.send(message);
      return socket.bufferedAmount <= SEND_BUFFER_BYTES;
    }
    // Called once the message has been written to the socket, or the connection failed: either way,
    // nothing of it is held any more.
    let waiting = true;
    socket.send(message, () => {
      if (waiting) sent();
      waiting = false;
    });
    if (socket.bufferedAmount > SEND_BUFFER_BYTES) return false;
    if (waiting) sent();
    waiting = false;
    return true;
  };
  const exited = new Promise<number>((resolve, reject) => {
    let status: Status | undefined;
    socket.on("message", (message: WebSocket.RawData) => {
      const data = Array.isArray(message) ? Buffer.concat(message) : Buffer.from(message as Buffer);
      if (data.length === 0) return;
      const channel = data[0]!;
      const body = data.subarray(1);
      // Each channel sends one empty message first (its opening); nothing to pass on.
      if (body.length === 0) return;
      if (channel === CHANNEL.stdout) options.onOutput("stdout", body);
      else if (channel === CHANNEL.stderr) options.onOutput("stderr", body);
      else if (channel === CHANNEL.status) {
        try {
          status = JSON.parse(body.toString("utf8")) as Status;
        } catch {
          status = { status: "Failure", message: body.toString("utf8") };
        }
      }
    });
    socket.on("error", () => undefined);
    socket.once("close", () => {
      if (!status)
        return reject(new ClusterUnreachableError(client.access.server, "the exec stream ended early"));
      try {
        resolve(exitCodeOfStatus(status));
      } catch (error) {
        reject(error as Error);
      }
    });
  });
  exited.catch(() => undefined);
  return {
    protocol,
    write: (data, sent) => send(CHANNEL.stdin, Buffer.isBuffer(data) ? data : Buffer.from(data), sent),
    endInput: () => {
      if (protocol === "v5.channel.k8s.io") send(CHANNEL.close, Buffer.from([CHANNEL.stdin]));
    },
    resize: (cols, rows) => send(CHANNEL.resize, Buffer.from(JSON.stringify({ Width: cols, Height: rows }))),
    pause: () => socket.pause(),
    resume: () => socket.resume(),
    exited,
    close: () => socket.close(),
  };
}
