// The sync mode as a project setting: GET/PUT /projects/{id}/sync. The sandbox's own
// sandbox-sync daemon (sandbox-image/rootfs/usr/local/bin/sandbox-sync) commits on its own in auto-commit
// and auto-idle; what it reads is ~/.config/agent-sandbox/sync in the agent's home, which lives on the
// home volume and so outlives stop, start, snapshot and restore. These routes read and write that file,
// as the agent, in the running sandbox: the setting is where the daemon looks, never a copy that could
// disagree with it. (`sbx sync --mode` uses them.)
import { z } from "zod";
import { HttpError } from "../../errors.js";
import { SandboxNotRunningError } from "../../sandbox/exec.js";
import type { SandboxRunners } from "../../sandbox/runner.js";
import { sandboxNotRunning } from "../projects/view.js";
import { notFound, notRunning } from "../answers.js";
import { ProjectParams } from "../projects/schemas.js";
import type { ProjectRow } from "../../store/project-view.js";
import { route, type Routes } from "../route.js";

export const SYNC_MODES = ["manual", "auto-commit", "auto-idle"] as const;

export const SyncBody = z
  .object({
    mode: z.enum(SYNC_MODES).meta({
      description:
        "manual (only `sbx sync`), auto-commit (commit every worktree with changes each interval), auto-idle (commit a worktree once nothing in it changed for one interval); commits stay inside until the host fetches them",
    }),
    interval_seconds: z
      .number()
      .int({ message: "must be a whole number of seconds" })
      .min(1, { message: "must be at least 1 second" })
      .max(86_400, { message: "must be at most 86400 seconds (a day)" })
      .default(60),
  })
  .strict();
export const SyncAnswer = z.object({ mode: z.enum(SYNC_MODES), interval_seconds: z.number().int() }).strict();

const SETTING = ".config/agent-sandbox/sync";
/** The write script's exit status when the agent may not write the setting where the daemon reads it. */
const NOT_WRITABLE = 3;
/**
 * Writes the setting atomically (the daemon may read at any moment), 0600 in a 0700 directory. A home the
 * agent may not write there (a protected path over ~/.config, a read-only volume) exits NOT_WRITABLE,
 * leaving the setting as it was.
 */
const WRITE = `set -u
umask 077
{ mkdir -p "$HOME/.config/agent-sandbox" &&
  printf 'mode=%s\\ninterval=%s\\n' "$1" "$2" >"$HOME/${SETTING}.tmp" &&
  mv -f "$HOME/${SETTING}.tmp" "$HOME/${SETTING}"; } 2>/dev/null ||
  { rm -f "$HOME/${SETTING}.tmp" 2>/dev/null; exit ${NOT_WRITABLE}; }`;
const READ = `cat "$HOME/${SETTING}" 2>/dev/null || true`;

/** The file as the daemon reads it (the last valid line of each; its defaults for the rest). */
export function parseSyncSetting(text: string): z.infer<typeof SyncAnswer> {
  const last = (pattern: RegExp) =>
    text
      .split("\n")
      .map((line) => pattern.exec(line)?.[1])
      .filter((value): value is string => value !== undefined)
      .at(-1);
  const mode = (last(/^mode=(manual|auto-commit|auto-idle)$/) ?? "manual") as (typeof SYNC_MODES)[number];
  const interval = Number(last(/^interval=([0-9]{1,6})$/) ?? 60);
  return { mode, interval_seconds: Math.max(interval, 1) };
}

export const getSyncRoute = route({
  method: "get",
  path: "/projects/{id}/sync",
  summary:
    "The sync mode (manual, auto-commit, auto-idle) and interval the sandbox's sync daemon follows, read from the running sandbox",
  params: ProjectParams,
  access: "owner",
  responses: { 200: { description: "the setting", body: SyncAnswer }, 404: notFound, 409: notRunning },
});

export const putSyncRoute = route({
  method: "put",
  path: "/projects/{id}/sync",
  summary:
    "Set the sync mode: written where the sandbox's sync daemon reads it (the agent's home, kept across stop, start and restore); the daemon follows at once",
  params: ProjectParams,
  body: SyncBody,
  access: "owner",
  responses: {
    200: { description: "the setting now in force", body: SyncAnswer },
    403: "the agent may not write the setting in its home (a protected path covers ~/.config, or the home is read-only)",
    404: notFound,
    409: notRunning,
  },
});

/** The routes above, in the document's order. */
export const syncRoutes = [getSyncRoute, putSyncRoute] as const;

export interface SyncRoutesOptions {
  /** Each project's sandbox, by its backend (runtime/sandbox/runner.ts). */
  readonly sandboxes: SandboxRunners;
}

export function registerSyncRoutes(routes: Routes, { sandboxes }: SyncRoutesOptions): void {
  /** Runs `script` as the agent in `id`'s sandbox; a sandbox that is not running is a 409 naming its status. */
  const inSandbox = async (id: string, project: ProjectRow, args: string[]) => {
    try {
      const sandbox = await sandboxes(id);
      const result = await sandbox.run(["bash", "-c", args[0]!, "sync-setting", ...args.slice(1)], {
        timeoutMs: 10_000,
      });
      if (result.exitCode === NOT_WRITABLE)
        throw new HttpError(
          403,
          "permission_denied",
          `the agent may not write ~/${SETTING} in its sandbox (a protected path covers it, or the home is read-only); the sync setting is unchanged`,
          { path: `/home/agent/${SETTING}` },
        );
      if (result.exitCode !== 0)
        throw new Error(`the sync setting script exited ${result.exitCode}: ${result.stderr.slice(0, 200)}`);
      return result.stdout;
    } catch (error) {
      if (error instanceof SandboxNotRunningError) throw sandboxNotRunning(id, project, error);
      throw error;
    }
  };

  routes.handle(getSyncRoute, async ({ params: { id }, project }) => {
    return parseSyncSetting(await inSandbox(id, project, [READ]));
  });

  routes.handle(putSyncRoute, async ({ params: { id }, body, project }) => {
    await inSandbox(id, project, [WRITE, body.mode, String(body.interval_seconds)]);
    return parseSyncSetting(await inSandbox(id, project, [READ]));
  });
}
