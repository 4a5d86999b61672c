import type { Duplex } from "node:stream";
import type Docker from "dockerode";
import { tenantNames } from "../../components/tenant/names.js";
import { createSandboxExec } from "../sandbox/exec.js";

/** The tmux session every terminal of a project shares (created by the first attach, kept after). */
export const TMUX_SESSION = "main";

/**
 * Another tmux session a terminal may ask for (`?session=B`): a worktree's, named after it by
 * `sbx worktree add`. Letters, digits, `_`, `-` (tmux turns `.` and `:` into `_`): it is pasted into the command.
 */
export const TMUX_SESSION_NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/;

export interface TerminalSize {
  readonly cols: number;
  readonly rows: number;
}

/** A terminal attached to the sandbox: a raw tty byte stream both ways. */
export interface TerminalAttachment {
  readonly stream: Duplex;
  resize(size: TerminalSize): Promise<void>;
  /** Resolves when the attached process has ended, saying whether the sandbox itself still runs. */
  readonly ended: Promise<{ sandboxRunning: boolean }>;
  /** Detaches (the tmux session lives on). */
  detach(): void;
}

/** How the proxy reaches a sandbox's terminal (Docker exec here; Kubernetes exec or SSH later). */
export interface SandboxAttacher {
  /** `session`: the tmux session to join (created when missing), {@link TMUX_SESSION} by default. */
  attach(projectId: string, session?: string): Promise<TerminalAttachment>;
}

/**
 * Attaches through the engine's exec API to tmux session `main` (or the one asked for) as the agent user (ARCHITECTURE
 * decision 5: nothing listens inside the sandbox for the terminal).
 */
export function dockerAttacher(docker: Docker): SandboxAttacher {
  return {
    async attach(projectId, session = TMUX_SESSION) {
      if (!TMUX_SESSION_NAME.test(session)) throw new Error(`invalid tmux session name: ${session}`);
      const name = tenantNames(projectId).container;
      const container = docker.getContainer(name);
      const exec = await createSandboxExec(docker, name, {
        // Until tmux puts the pty in raw mode, a Ctrl-C typed at connect would kill the attaching
        // client; ignored signals are inherited (tmux restores them for the shells in its panes).
        Cmd: ["sh", "-c", `trap '' INT QUIT TSTP; exec tmux new-session -A -s ${session}`],
        User: "agent",
        WorkingDir: "/home/agent",
        Env: ["TERM=xterm-256color", "LANG=C.UTF-8", "COLORTERM=truecolor"],
        Tty: true,
        AttachStdin: true,
        AttachStdout: true,
        AttachStderr: true,
      });
      const stream = (await exec.start({ hijack: true, stdin: true, Tty: true })) as Duplex;
      const ended = new Promise<{ sandboxRunning: boolean }>((resolve) => {
        let done = false;
        const finish = async () => {
          if (done) return;
          done = true;
          // A stopped sandbox kills the attached process before the engine reports the container
          // stopped: an abnormal exit is followed for a moment before the session is called ended.
          for (let waited = 0; ; waited += 100) {
            const info = await container.inspect().catch(() => undefined);
            if (!info?.State.Running) return resolve({ sandboxRunning: false });
            const { ExitCode } = await exec.inspect().catch(() => ({ ExitCode: null }));
            if (ExitCode === 0 || waited >= 3_000) return resolve({ sandboxRunning: true });
            await new Promise((r) => setTimeout(r, 100));
          }
        };
        stream.once("end", () => void finish());
        stream.once("close", () => void finish());
        // `on`, not `once`: a write after the exec has gone errors again, and an unheard error kills the runtime.
        stream.on("error", () => void finish());
      });
      return {
        stream,
        ended,
        async resize({ cols, rows }) {
          await exec.resize({ w: cols, h: rows });
        },
        detach() {
          stream.destroy();
          // The engine cannot stop an exec, and a tmux client whose output nobody drains stays
          // attached: hang it up by its host pid (the runtime runs beside the engine as root).
          exec
            .inspect()
            .then((info) => {
              if (info.Running && info.Pid > 0) process.kill(info.Pid, "SIGHUP");
            })
            .catch(() => undefined);
        },
      };
    },
  };
}
