// A sandbox reached over its sshd (issue 19: a microVM has no engine to exec through). The platform's own key
// logs in as the agent for the terminal, exec, files and sync; as root it may run only what the guest's
// forced command allows (sandbox-image/rootfs/usr/local/sbin/sandbox-platform-command: the final backup).
import { Client, type ClientChannel } from "ssh2";
import { SANDBOX_SSH_PORT, SANDBOX_SSH_USER } from "../../lib/constants.js";
import { SandboxNotRunningError } from "./exec.js";

/** Where a project's sshd is, as seen from the runtime's host, and the key that logs in there. */
export interface SshTarget {
  readonly host: string;
  readonly port?: number;
  readonly privateKey: string;
}

/** What a connection that never reached sshd fails with: nothing answers at the address (stopped, booting). */
const UNREACHABLE =
  /ECONNREFUSED|EHOSTUNREACH|ENETUNREACH|ETIMEDOUT|ECONNRESET|Timed out while waiting for handshake/;

/**
 * One SSH connection, ready, as `user` (the agent unless said). A sandbox that is stopped or still booting
 * refuses it or never answers: that is a {@link SandboxNotRunningError} naming the address, as the engine's
 * refusal is for a container; any other failure (a refused key) is an error saying what happened.
 */
export async function sshConnect(
  target: SshTarget,
  options: { timeoutMs?: number; user?: string } = {},
): Promise<Client> {
  const client = new Client();
  const address = `${target.host}:${target.port ?? SANDBOX_SSH_PORT}`;
  await new Promise<void>((resolve, reject) => {
    client.once("ready", () => resolve());
    client.once("error", (error) =>
      reject(
        UNREACHABLE.test(`${(error as NodeJS.ErrnoException).code ?? ""} ${error.message}`)
          ? new SandboxNotRunningError(`microVM at ${address}`)
          : new Error(`ssh to ${address}: ${error.message}`),
      ),
    );
    client.connect({
      host: target.host,
      port: target.port ?? SANDBOX_SSH_PORT,
      username: options.user ?? SANDBOX_SSH_USER,
      privateKey: target.privateKey,
      readyTimeout: options.timeoutMs ?? 10_000,
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

/** One word for a POSIX shell: as it is when it needs no quoting, else single-quoted. */
export function shellWord(word: string): string {
  return /^[A-Za-z0-9_./,:=@%+-]+$/.test(word) ? word : `'${word.replace(/'/g, "'\\''")}'`;
}

/** A command channel on `client`; its errors are the caller's (the channel's `close` ends it either way). */
export function sshExec(
  client: Client,
  command: string,
  options: { pty?: boolean } = {},
): Promise<ClientChannel> {
  return new Promise((resolve, reject) =>
    client.exec(
      command,
      options.pty ? { pty: { term: "xterm-256color", cols: 80, rows: 24 }, env: {} } : {},
      (error, channel) => (error ? reject(error) : resolve(channel)),
    ),
  );
}
