// How a user's agent config and logins reach a project's home: the runtime writes them through the project's
// sandbox runner (the exec machinery of the API's exec and files routes), as the agent, never as root. A
// project's config is written once, the first time the runtime sees it running after its owner stored one; a
// login whenever the project's login secret is newer than what was written; a login's file goes when its
// secret does (a logout, or the secret deleted), at once when the sandbox runs, else at its next start.
import type { Database } from "../../store/db.js";
import {
  claimConfigDelivery,
  configFiles,
  forgetDelivery,
  loginsAwaitingDelivery,
  loginsAwaitingRemoval,
  projectsAwaitingConfig,
  recordDelivery,
} from "../../store/agent-config.js";
import { sealedSecrets } from "../../store/secrets.js";
import type { SecretBox } from "../../secrets.js";
import { SandboxNotRunningError } from "../../sandbox/exec.js";
import type { SandboxRunners } from "../../sandbox/runner.js";
import { AGENT_NAMES, AGENTS, agentOfLoginSecret } from "../../../lib/agent-config-paths.js";

/** The secrets' names that deliver logins. */
export const LOGIN_SECRETS = AGENT_NAMES.map((agent) => AGENTS[agent].secret);

/**
 * Run as the agent with a JSON request on stdin; answers a JSON line. Every path is one the API took
 * (relative, no `..`, within the agents' directories), joined to the agent's own home; no component on the
 * way may be a symbolic link (a file would land elsewhere), and a file is written to a temporary name beside
 * it and renamed over it, so a link at the name is replaced, never followed.
 * - `config`: a file is written where the home has none, or has the image's default unchanged
 *   (`/opt/agent/home-defaults`); a file the home has otherwise is kept (a fork's, a restored home's, the
 *   agent's own edits). Mode 0644, directories 0700.
 * - `login`: the file is written whatever is there, mode 0600.
 * - `remove`: each path is unlinked if present (a link itself, not what it points to).
 */
export const HOME_WRITER = String.raw`
import json, os, pwd, sys, tempfile
req = json.load(sys.stdin)
home = pwd.getpwuid(os.getuid()).pw_dir
defaults = "/opt/agent/home-defaults"
out = {"written": [], "kept": [], "removed": [], "refused": []}

def parent_of(rel, make):
    d = home
    for name in rel.split("/")[:-1]:
        d = os.path.join(d, name)
        if os.path.islink(d):
            return None
        if not os.path.isdir(d):
            if not make or os.path.lexists(d):
                return None
            os.mkdir(d, 0o700)
    return d

def same_as_default(target, rel):
    try:
        with open(os.path.join(defaults, rel), "rb") as a, open(target, "rb") as b:
            return a.read() == b.read()
    except OSError:
        return False

for f in req["files"]:
    rel = f["path"]
    d = parent_of(rel, req["mode"] != "remove")
    target = os.path.join(home, rel)
    if req["mode"] == "remove":
        if d is not None and os.path.lexists(target):
            os.unlink(target)
            out["removed"].append(rel)
        continue
    if d is None:
        out["refused"].append(rel)
        continue
    if req["mode"] == "config" and os.path.lexists(target):
        if os.path.islink(target) or not os.path.isfile(target) or not same_as_default(target, rel):
            out["kept"].append(rel)
            continue
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".sbx-")
    try:
        os.fchmod(fd, 0o600 if req["mode"] == "login" else 0o644)
        with os.fdopen(fd, "wb") as w:
            w.write(f["content"].encode("utf-8"))
            w.flush()
            os.fsync(w.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    out["written"].append(rel)
print(json.dumps(out))
`;

export interface HomeWriteResult {
  readonly written: string[];
  readonly kept: string[];
  readonly removed: string[];
  /** Paths whose directory was a link or no directory: nothing written there. */
  readonly refused: string[];
}

export type HomeWriteMode = "config" | "login" | "remove";

/** Writes (or removes) files in the project's home, as the agent; throws SandboxNotRunningError when it does not run. */
export async function writeIntoHome(
  sandboxes: SandboxRunners,
  projectId: string,
  mode: HomeWriteMode,
  files: readonly { path: string; content?: string }[],
): Promise<HomeWriteResult> {
  const runner = await sandboxes(projectId);
  const result = await runner.run(["python3", "-c", HOME_WRITER], {
    stdin: Buffer.from(JSON.stringify({ mode, files })),
    timeoutMs: 30_000,
  });
  if (result.exitCode !== 0)
    throw new Error(
      `writing the agent's files into project ${projectId}'s home failed (exit ${result.exitCode}): ${result.stderr.trim().split("\n").at(-1) ?? ""}`,
    );
  return JSON.parse(result.stdout.trim().split("\n").at(-1)!) as HomeWriteResult;
}

/** How a login's removal from one project went. */
export type RemovalOutcome = "removed" | "absent" | "at_next_start";

export interface AgentDeliveryOptions {
  readonly db: Database;
  readonly box: SecretBox;
  readonly sandboxes: SandboxRunners;
  /** How often the runtime looks for projects to write into (2 s). */
  readonly intervalMs?: number;
  readonly log?: (message: string, fields: Record<string, unknown>) => void;
}

/** A project that could not be written into is tried again after this long, not at every look. */
const RETRY_AFTER_MS = 30_000;

/** Writes users' configs and logins into their projects' homes, and takes logins out again. */
export class AgentDelivery {
  private timer: NodeJS.Timeout | undefined;
  private looking: Promise<void> | undefined;
  /** Project and item → when it may be tried again, after a failure. */
  private readonly backoff = new Map<string, number>();

  constructor(private readonly options: AgentDeliveryOptions) {}

  /** Writes the owner's config into the project's home, once per project; false when it was already. */
  async deliverConfig(projectId: string, userId: string): Promise<boolean> {
    const { db, sandboxes } = this.options;
    if (!(await claimConfigDelivery(db, projectId))) return false;
    try {
      const files = await configFiles(db, userId);
      await writeIntoHome(sandboxes, projectId, "config", files);
      return true;
    } catch (error) {
      await forgetDelivery(db, projectId, "config");
      throw error;
    }
  }

  /** Writes the project's login secret `name` at its agent's path; false when the project holds none. */
  async deliverLogin(projectId: string, name: string): Promise<boolean> {
    const { db, box, sandboxes } = this.options;
    const agent = agentOfLoginSecret(name);
    if (!agent) return false;
    const secret = (await sealedSecrets(db, projectId)).find((s) => s.name === name && s.delivery === "file");
    if (!secret) return false;
    await writeIntoHome(sandboxes, projectId, "login", [
      { path: AGENTS[agent].login, content: box.open(secret.sealed) },
    ]);
    await recordDelivery(db, projectId, name, "delivered");
    // A logout may have deleted the secret while the file was being written: then it goes again at once.
    if (!(await sealedSecrets(db, projectId)).some((s) => s.name === name)) {
      await this.removeLogin(projectId, name);
      return false;
    }
    return true;
  }

  /**
   * Removes the login file of secret `name` from the project's home now, when its sandbox runs; otherwise it
   * is marked to go at the sandbox's next start.
   */
  async removeLogin(projectId: string, name: string): Promise<RemovalOutcome> {
    const { db, sandboxes } = this.options;
    const agent = agentOfLoginSecret(name)!;
    await recordDelivery(db, projectId, name, "remove");
    try {
      const result = await writeIntoHome(sandboxes, projectId, "remove", [{ path: AGENTS[agent].login }]);
      await forgetDelivery(db, projectId, name);
      return result.removed.length > 0 ? "removed" : "absent";
    } catch (error) {
      // Not running, or not reachable now: the mark stays, and the file goes when the runtime next sees the
      // sandbox running.
      if (!(error instanceof SandboxNotRunningError))
        this.options.log?.("agent login removal failed", { projectId, error: (error as Error).message });
      return "at_next_start";
    }
  }

  /** One look: every running project owed a config, a login or a login's removal gets it. */
  async deliverPending(): Promise<void> {
    const { db } = this.options;
    const attempt = async (key: string, work: () => Promise<unknown>) => {
      if ((this.backoff.get(key) ?? 0) > Date.now()) return;
      try {
        await work();
        this.backoff.delete(key);
      } catch (error) {
        this.backoff.set(key, Date.now() + RETRY_AFTER_MS);
        this.options.log?.("agent config delivery failed", { key, error: (error as Error).message });
      }
    };
    for (const project of await projectsAwaitingConfig(db))
      await attempt(`${project.id}:config`, () => this.deliverConfig(project.id, project.user_id));
    for (const { project_id, name } of await loginsAwaitingRemoval(db, LOGIN_SECRETS))
      await attempt(`${project_id}:${name}:remove`, () => this.removeLogin(project_id, name));
    for (const { project_id, name } of await loginsAwaitingDelivery(db, LOGIN_SECRETS))
      await attempt(`${project_id}:${name}`, () => this.deliverLogin(project_id, name));
  }

  /** Looks every `intervalMs`, one look at a time; a look that fails (the database down) is logged. */
  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => {
      if (this.looking) return;
      this.looking = this.deliverPending()
        .catch((error: Error) =>
          this.options.log?.("agent config delivery could not look", { error: error.message }),
        )
        .finally(() => (this.looking = undefined));
    }, this.options.intervalMs ?? 2000);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.looking;
  }
}
