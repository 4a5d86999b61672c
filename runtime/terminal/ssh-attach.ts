// The terminal of a sandbox reached over its sshd (issue 19: a microVM has no engine to exec through): the
// platform's own key logs in as the agent, and a pty runs the same tmux session the Docker attacher joins.
import { Client, type ClientChannel } from "ssh2";
import { SANDBOX_SSH_PORT, SANDBOX_SSH_USER } from "../../lib/constants.js";
import { TMUX_SESSION, TMUX_SESSION_NAME, type SandboxAttacher, type TerminalAttachment } from "./attach.js";

/** Where a project's sshd is, as seen from the runtime's host, and the key that logs in there. */
export interface SshTarget {
  readonly host: string;
  readonly port?: number;
  readonly privateKey: string;
}

/**
 * One SSH connection, ready: a sandbox that is stopped or booting refuses the connection, and that is an
 * error naming the address (the proxy then tells the client the sandbox is not running).
 */
export async function sshConnect(target: SshTarget, timeoutMs = 10_000): Promise<Client> {
  const client = new Client();
  await new Promise<void>((resolve, reject) => {
    client.once("ready", () => resolve());
    client.once("error", (error) =>
      reject(new Error(`ssh to ${target.host}:${target.port ?? SANDBOX_SSH_PORT}: ${error.message}`)),
    );
    client.connect({
      host: target.host,
      port: target.port ?? SANDBOX_SSH_PORT,
      username: SANDBOX_SSH_USER,
      privateKey: target.privateKey,
      readyTimeout: timeoutMs,
      keepaliveInterval: 15_000,
      // The guest makes its host keys at first boot and the address is the tenant's own bridge's, which only
      // this host reaches: there is no earlier key to pin.
      hostVerifier: () => true,
    });
  });
  // An error after the handshake (a reset when the VM stops) ends the channels; it must not be unheard.
  client.on("error", () => undefined);
  return client;
}

/** The login environment a microVM guest's init wrote (proxy, project id), then the command. */
export const WITH_SANDBOX_ENV = (command: string) =>
  `if [ -r /run/sandbox-env ]; then . /run/sandbox-env; fi; ${command}`;

/** Attaches over SSH to `target`: a pty running `tmux new-session -A -s <session>` as the agent, in its home. */
async function sshAttach(target: SshTarget, session: string): Promise<TerminalAttachment> {
  if (!TMUX_SESSION_NAME.test(session)) throw new Error(`invalid tmux session name: ${session}`);
  const client = await sshConnect(target);
  const channel = await new Promise<ClientChannel>((resolve, reject) => {
    client.exec(
      WITH_SANDBOX_ENV(`cd ~ && trap '' INT QUIT TSTP; exec tmux new-session -A -s ${session}`),
      { pty: { term: "xterm-256color", cols: 80, rows: 24 }, env: {} },
      (error, stream) => (error ? reject(error) : resolve(stream)),
    );
  }).catch((error: Error) => {
    client.end();
    throw error;
  });
  let detached = false;
  const ended = new Promise<{ sandboxRunning: boolean }>((resolve) => {
    let exitCode: number | null = null;
    channel.once("exit", (code: number | null) => {
      exitCode = code;
    });
    channel.once("close", () => {
      client.end();
      // No exit status and not detached: the connection went (the VM stopped), not the tmux client.
      resolve({ sandboxRunning: detached || exitCode !== null });
    });
    channel.on("error", () => undefined);
  });
  return {
    stream: channel,
    ended,
    async resize({ cols, rows }) {
      channel.setWindow(rows, cols, 0, 0);
    },
    detach() {
      detached = true;
      // Closing the channel hangs up the pty: the tmux client detaches, the session lives on.
      channel.close();
      client.end();
    },
  };
}

/**
 * Picks the attacher by the project's backend: SSH for a microVM (`sshTarget` answers where), the engine's
 * exec for a container (`sshTarget` answers `undefined`).
 */
export function backendAttacher(
  container: SandboxAttacher,
  sshTarget: (projectId: string) => Promise<SshTarget | undefined>,
): SandboxAttacher {
  return {
    async attach(projectId, session = TMUX_SESSION) {
      const target = await sshTarget(projectId);
      return target ? sshAttach(target, session) : container.attach(projectId, session);
    },
  };
}

/** Runs `script` (under bash, with the sandbox's login environment) over SSH; its exit code and output. */
export async function sshRun(
  target: SshTarget,
  script: string,
  timeoutMs = 120_000,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const client = await sshConnect(target);
  try {
    return await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no exit within ${timeoutMs} ms`)), timeoutMs);
      const quoted = `'${script.replace(/'/g, "'\\''")}'`;
      client.exec(WITH_SANDBOX_ENV(`exec bash -c ${quoted}`), (error, channel) => {
        if (error) return (clearTimeout(timer), reject(error));
        let [stdout, stderr, code] = ["", "", -1];
        channel.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
        channel.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
        channel.on("exit", (status: number | null) => (code = status ?? -1));
        channel.once("close", () => (clearTimeout(timer), resolve({ code, stdout, stderr })));
      });
    });
  } finally {
    client.end();
  }
}
