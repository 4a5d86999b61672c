// The terminal of a sandbox reached over its sshd (a microVM has no engine to exec through): the
// platform's own key logs in as the agent, and a pty runs the same tmux session the Docker attacher joins.
import type { ClientChannel } from "ssh2";
import { sshConnect, sshExec, WITH_SANDBOX_ENV, type SshTarget } from "../sandbox/ssh.js";
import { TMUX_SESSION_NAME, type TerminalAttachment } from "./attach.js";

/** Attaches over SSH to `target`: a pty running `tmux new-session -A -s <session>` as the agent, in its home. */
export async function sshAttach(target: SshTarget, session: string): Promise<TerminalAttachment> {
  if (!TMUX_SESSION_NAME.test(session)) throw new Error(`invalid tmux session name: ${session}`);
  const client = await sshConnect(target);
  const channel: ClientChannel = await sshExec(
    client,
    WITH_SANDBOX_ENV(`cd ~ && trap '' INT QUIT TSTP; exec tmux new-session -A -s ${session}`),
    { pty: true },
  ).catch((error: Error) => {
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
