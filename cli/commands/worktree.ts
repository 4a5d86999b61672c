// `sbx worktree add|list|rm`: worktrees of the repository inside, each with its own branch, tmux session
// and, with --port, a front-door route of its own.
import * as path from "node:path";
import type { Command } from "commander";
import type { ProjectView } from "../../sdk/src/client.js";
import { context, follow, globalsOf, projectTarget, resolveProject, running, settled } from "../context.js";
import { CliError, EXIT } from "../errors.js";
import { emit } from "../output.js";
import { runScript, WORKTREE_ADD, WORKTREE_LIST, WORKTREE_RM } from "../sandbox-scripts.js";
import { checkBranchName, parseWorktreeName, worktreeLabel, worktreeRoute } from "../worktree-name.js";

export function registerWorktree(program: Command): void {
  const worktree = program
    .command("worktree")
    .description("worktrees of the repository inside, each with its own branch and tmux session");
  worktree
    .command("add")
    .description(
      "make /workspace/<repo>/.worktrees/<dir> on branch <branch> (made from --from, or HEAD, when new) with tmux session <dir>; <dir> is the branch with each / as __",
    )
    .argument("<branch>", "letters, digits, _, - and / (feat/x: directory and tmux session feat__x)")
    .option("--from <ref>", "the commit a new branch starts at (default: HEAD inside)")
    .option(
      "--port <port>",
      "the port this worktree's dev server listens on: a front-door route http://<project>-<name>.sandbox.localhost",
    )
    .addHelpText(
      "after",
      "\nExamples:\n  $ sbx worktree add feature-x --from main && sbx attach --worktree feature-x\n  $ sbx worktree add feat/y --port 3001 && sbx open --worktree feat/y   # .worktrees/feat__y, route feat--y",
    )
    .action(async (name: string, options: { from?: string; port?: string }, command: Command) => {
      const { branch, dir } = parseWorktreeName(name);
      if (dir === "main")
        throw new CliError(
          EXIT.badInput,
          "main is the repository's own session; name the worktree otherwise",
        );
      await checkBranchName(branch);
      if (options.from && (options.from.startsWith("-") || /[\s~^:?*[\\]/.test(options.from)))
        throw new CliError(EXIT.badInput, `--from ${JSON.stringify(options.from)} is not a ref name`);
      // Checked before anything is made: a route's name is part of a host name.
      const routeName = worktreeRoute(dir);
      if (options.port !== undefined) {
        if (!/^\d{1,5}$/.test(options.port) || Number(options.port) < 1 || Number(options.port) > 65535)
          throw new CliError(EXIT.usage, `--port: ${JSON.stringify(options.port)} is not a port number`);
        if (routeName === undefined)
          throw new CliError(
            EXIT.badInput,
            `worktree ${name} cannot name a front-door route (${worktreeLabel(dir)} is not a host name's label: a-z, 0-9 and '-', at most 32 characters); nothing was made`,
          );
      }
      const { target, link } = await projectTarget(command);
      if (!link)
        throw new CliError(
          EXIT.notFound,
          "run sbx worktree inside the repository you started the project from",
        );
      const made = (
        await runScript(target, `worktree add ${branch}`, WORKTREE_ADD, [
          link.repo,
          branch,
          dir,
          options.from ?? "",
        ])
      ).trim();
      const route =
        options.port === undefined || routeName === undefined
          ? undefined
          : await setWorktreeRoute(command, routeName, Number(options.port)).catch(async (error: unknown) => {
              // Nothing half-made: the worktree goes again when its route cannot be declared.
              await runScript(target, `worktree rm ${branch}`, WORKTREE_RM, [
                link.repo,
                dir,
                "yes",
                dir,
              ]).catch(() => undefined);
              throw error;
            });
      emit(
        {
          name: dir,
          path: made.replace(/^\/home\/agent\/workspace/, "/workspace"),
          branch,
          session: dir,
          ...(route ? { front_door: route } : {}),
        },
        `worktree ${branch} at /workspace/${link.repo}/.worktrees/${dir} (branch ${branch}); sbx attach --worktree ${branch}` +
          (route ? `\nits dev server on ${route.port}: ${route.url} (sbx open --worktree ${branch})` : ""),
      );
    });
  worktree
    .command("list")
    .description("the worktrees inside and their tmux sessions")
    .action(async (_options: unknown, command: Command) => {
      const { target, link } = await projectTarget(command);
      if (!link)
        throw new CliError(
          EXIT.notFound,
          "run sbx worktree inside the repository you started the project from",
        );
      const out = await runScript(target, "worktree list", WORKTREE_LIST, [link.repo]);
      const [trees, sessions = ""] = out.split("--sessions\n");
      const attached = new Map(
        sessions
          .split("\n")
          .filter(Boolean)
          .map((l) => l.split(" ") as [string, string]),
      );
      const list = trees!
        .split("\n\n")
        .filter((b) => b.trim())
        .map((block) => {
          const tree = /^worktree (.*)$/m.exec(block)?.[1] ?? "";
          const branch = /^branch refs\/heads\/(.*)$/m.exec(block)?.[1] ?? null;
          const name = tree.includes("/.worktrees/") ? path.basename(tree) : "main";
          return {
            name,
            path: tree.replace(/^\/home\/agent\/workspace/, "/workspace"),
            branch,
            session: attached.has(name) ? name : null,
            attached_clients: Number(attached.get(name) ?? 0),
          };
        });
      emit({ worktrees: list }, () =>
        list
          .map(
            (w) =>
              `${w.name.padEnd(20)} ${String(w.branch).padEnd(20)} ${w.path}${w.session ? `  (tmux ${w.session}, ${w.attached_clients} attached)` : ""}`,
          )
          .join("\n"),
      );
    });
  worktree
    .command("rm")
    .description("remove a worktree and end its tmux session (its branch stays)")
    .argument("<branch>", "its branch (feat/x) or its directory's name (feat__x)")
    .option("--force", "discard the worktree's uncommitted changes")
    .action(async (name: string, options: { force?: boolean }, command: Command) => {
      const { dir } = parseWorktreeName(name);
      const { target, link } = await projectTarget(command);
      if (!link)
        throw new CliError(
          EXIT.notFound,
          "run sbx worktree inside the repository you started the project from",
        );
      await runScript(target, `worktree rm ${name}`, WORKTREE_RM, [
        link.repo,
        dir,
        options.force ? "yes" : "no",
        name,
      ]);
      // Worktrees never share a route name (WORKTREE_ADD), so a route of this one's name is its own.
      const routeName = worktreeRoute(dir);
      const routes =
        routeName === undefined ? { removed: 0 } : await setWorktreeRoute(command, routeName, undefined);
      emit(
        { removed: dir, routes_removed: routes.removed },
        `removed worktree ${name} (.worktrees/${dir}; its branch kept)${routes.removed > 0 ? `; its front-door route is gone` : ""}`,
      );
    });
}

/** One of the project's front-door routes. */
type FrontDoorView = ProjectView["front_door"][number];

/**
 * Declares the worktree's front-door route (its name, `port`), or with `port` undefined removes every route
 * of that name; the other declared ports stay. Waits for the update of the stack that makes the routes.
 */
async function setWorktreeRoute(
  command: Command,
  name: string,
  port: number | undefined,
): Promise<FrontDoorView & { removed: number }> {
  const globals = globalsOf(command);
  const { api, config } = await context(globals);
  const { id } = await resolveProject(globals, config);
  const declared = (await api.project(id)).front_door;
  const kept = declared.filter((route) => route.name !== name);
  const removed = declared.length - kept.length;
  const ports = [
    ...kept.map((route) =>
      route.name === null ? { port: route.port } : { port: route.port, name: route.name },
    ),
    ...(port === undefined ? [] : [{ port, name }]),
  ];
  if (port === undefined && removed === 0) return { name, port: 0, url: "", removed };
  const { data: applied } = await api.call("PATCH", "/projects/{id}", { params: { id }, body: { ports } });
  if (!settled(applied)) await follow(api, id, (p) => running(p) && settled(p));
  const route = (await api.project(id)).front_door.find((r) => r.name === name && r.port === port);
  return { name, port: port ?? 0, url: route?.url ?? "", removed };
}
