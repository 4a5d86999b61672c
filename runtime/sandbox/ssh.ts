// A sandbox reached over its sshd (a microVM has no engine to exec through). The platform's own key
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
const UNREACHABLE = /ECONNREFUSED|EHOSTUNREACH|ENETUNREACH|ETIMEDOUT/;
/**
 * A handshake not finished in time: something answers, too slowly (an emulated guest on a loaded host takes
 * seconds per key exchange; seen as execs answered "its microVM is down" while it ran). Tried again, and
 * only then a sandbox this runtime cannot reach, saying why.
 */
const SLOW = /Timed out while waiting for handshake/;
const SLOW_ATTEMPTS = 3;
/**
 * How long one handshake may take: an emulated guest's key exchange on a loaded host took over 10 s (24 execs
 * at once, beside other VMs); a stopped guest is told at once by the connect's refusal, not by this.
 */
const HANDSHAKE_TIMEOUT_MS = 30_000;
/**
 * What a busy sshd does to a connection beyond its MaxStartups (10 unauthenticated at once by default): it
 * closes it before the handshake. Many execs at once meet that; they try again.
 */
const DROPPED = /ECONNRESET|Connection lost before handshake/;
const CONNECT_ATTEMPTS = 6;
/** Handshakes in flight per sshd from this runtime, under sshd's MaxStartups (10). */
const MAX_HANDSHAKES = 6;
const handshakes = new Map<string, { active: number; waiting: (() => void)[] }>();

/** Runs `handshake` once fewer than MAX_HANDSHAKES of `address`'s are in flight (a TCG guest's are slow). */
async function inHandshakeSlot<T>(address: string, handshake: () => Promise<T>): Promise<T> {
  const slot = handshakes.get(address) ?? { active: 0, waiting: [] };
  handshakes.set(address, slot);
  while (slot.active >= MAX_HANDSHAKES) await new Promise<void>((resolve) => slot.waiting.push(resolve));
  slot.active++;
  try {
    return await handshake();
  } finally {
    slot.active--;
    slot.waiting.shift()?.();
    if (slot.active === 0 && slot.waiting.length === 0) handshakes.delete(address);
  }
}

/**
 * One SSH connection, ready, as `user` (the agent unless said). A sandbox that is stopped or still booting
 * refuses it or never answers: that is a {@link SandboxNotRunningError} naming the address, as the engine's
 * refusal is for a container; a connection a busy sshd dropped, or whose handshake it did not finish in
 * time, is tried again; any other failure (a refused key) is an error saying what happened.
 */
export async function sshConnect(
  target: SshTarget,
  options: { timeoutMs?: number; user?: string } = {},
): Promise<Client> {
  const address = `${target.host}:${target.port ?? SANDBOX_SSH_PORT}`;
  for (let attempt = 1; ; attempt++) {
    const client = new Client();
    const failure = await inHandshakeSlot(
      address,
      () =>
        new Promise<Error | undefined>((resolve) => {
          client.once("ready", () => resolve(undefined));
          // `on`, not `once`: a connection dropped before its handshake errors twice, and an unheard error would
          // end the runtime (the second lands here and changes nothing).
          client.on("error", (error) => resolve(error));
          client.connect({
            host: target.host,
            port: target.port ?? SANDBOX_SSH_PORT,
            username: options.user ?? SANDBOX_SSH_USER,
            privateKey: target.privateKey,
            readyTimeout: options.timeoutMs ?? HANDSHAKE_TIMEOUT_MS,
            keepaliveInterval: 15_000,
            // The guest makes its host keys at first boot and the address is the tenant's own bridge's, which
            // only this host reaches: there is no earlier key to pin.
            hostVerifier: () => true,
          });
        }),
    );
    if (!failure) {
      // An error after the handshake (a reset when the VM stops) ends the channels; it must not be unheard.
      client.on("error", () => undefined);
      return client;
    }
    client.end();
    const what = `${(failure as NodeJS.ErrnoException).code ?? ""} ${failure.message}`;
    if (DROPPED.test(what) && attempt < CONNECT_ATTEMPTS) {
      await new Promise((resolve) => setTimeout(resolve, 100 * 2 ** attempt * (0.5 + Math.random())));
      continue;
    }
    if (SLOW.test(what)) {
      if (attempt < SLOW_ATTEMPTS) continue;
      throw new SandboxNotRunningError(
        `microVM at ${address}`,
        `its sshd at ${address} did not finish a handshake within ${(options.timeoutMs ?? HANDSHAKE_TIMEOUT_MS) / 1000} s, ${attempt} times (busy)`,
      );
    }
    if (UNREACHABLE.test(what)) throw new SandboxNotRunningError(`microVM at ${address}`);
    throw new Error(
      `ssh to ${address}: ${failure.message}${DROPPED.test(what) ? ` (dropped ${attempt} times: sshd busy)` : ""}`,
    );
  }
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
  options: { pty?: boolean | { cols: number; rows: number } } = {},
): Promise<ClientChannel> {
  const size = typeof options.pty === "object" ? options.pty : { cols: 80, rows: 24 };
  return new Promise((resolve, reject) =>
    client.exec(
      command,
      options.pty ? { pty: { term: "xterm-256color", ...size }, env: {} } : {},
      (error, channel) => (error ? reject(error) : resolve(channel)),
    ),
  );
}
