// `sbx open [port]`: a one-time URL that lets the project's owner through the front door to a dev server
// the sandbox runs (docs/front-door.md).
import { spawn } from "node:child_process";
import type { Command } from "commander";
import type { ProjectView } from "../../sdk/src/client.js";
import { context, globalsOf, requireLogin, resolveProject } from "../context.js";
import { CliError, EXIT } from "../errors.js";
import { emit } from "../output.js";
import { parseWorktreeName, worktreeRoute } from "../worktree-name.js";

/** One of the project's declared front-door routes. */
type FrontDoorEntry = ProjectView["front_door"][number];

/**
 * The declared route for `port` (or the first one), among those named `worktree` when given, or a clear
 * refusal naming what is declared.
 */
export function chooseRoute(
  entries: readonly FrontDoorEntry[],
  port?: string,
  worktree?: string,
): FrontDoorEntry {
  const declared = entries.map((e) => `${e.port}${e.name ? ` (${e.name})` : ""}`).join(", ");
  if (entries.length === 0)
    throw new CliError(
      EXIT.badInput,
      "the project declares no front-door ports: add forwardPorts to devcontainer.json, or PATCH /projects/{id} with ports",
    );
  if (worktree !== undefined) {
    const named = entries.filter((e) => e.name === worktree);
    if (named.length === 0)
      throw new CliError(
        EXIT.badInput,
        `worktree ${worktree} has no front-door route (declared: ${declared}): sbx worktree add ${worktree} --port N declares one`,
      );
    return port === undefined ? named[0]! : chooseRoute(named, port);
  }
  if (port === undefined) return entries[0]!;
  if (!/^\d{1,5}$/.test(port))
    throw new CliError(EXIT.usage, `port: ${JSON.stringify(port)} is not a port number`);
  const found = entries.find((e) => e.port === Number(port));
  if (!found)
    throw new CliError(
      EXIT.badInput,
      `port ${port} is not declared for the front door (declared: ${declared})`,
    );
  return found;
}

/**
 * The one-time URL as it may be handed to a browser: an http(s) URL and nothing else (xdg-open would as
 * readily open a `file:` path, a `javascript:` URL or another program's scheme handler).
 */
export function openableUrl(url: unknown): string {
  let parsed: URL | undefined;
  try {
    parsed = typeof url === "string" ? new URL(url) : undefined;
  } catch {
    parsed = undefined;
  }
  if (
    !parsed ||
    (parsed.protocol !== "http:" && parsed.protocol !== "https:") ||
    parsed.username ||
    parsed.password
  )
    throw new CliError(
      EXIT.refused,
      `the front door's session URL is not a plain http(s) URL, so it is not opened: ${JSON.stringify(url)}`,
    );
  return parsed.href;
}

export function registerOpen(program: Command): void {
  program
    .command("open")
    .description("open a dev server the sandbox runs, through the front door (only you get through)")
    .argument("[port]", "a declared port (default: the first declared)")
    .option("--browser", "open the URL with xdg-open instead of only printing it")
    .option("--worktree <branch>", "the route of that worktree (sbx worktree add <branch> --port N)")
    .addHelpText(
      "after",
      '\nExamples:\n  $ sbx open 3000                 # prints a one-time URL (60 s) that sets your cookie\n  $ curl -L -c jar -b jar "$(sbx open --json | jq -r .url)"',
    )
    .action(
      async (
        port: string | undefined,
        options: { browser?: boolean; worktree?: string },
        command: Command,
      ) => {
        const globals = globalsOf(command);
        const { api, config } = await context(globals);
        await requireLogin(config);
        const { id } = await resolveProject(globals, config);
        const project = await api.project(id);
        // A worktree's route is named after its directory: feat/x's (.worktrees/feat__x) is feat--x.
        const routeName =
          options.worktree === undefined ? undefined : worktreeRoute(parseWorktreeName(options.worktree).dir);
        if (options.worktree !== undefined && routeName === undefined)
          throw new CliError(
            EXIT.badInput,
            `worktree ${options.worktree} cannot have a front-door route: its name is not a host name's label`,
          );
        // A declared route first; else a dev server the front door found listening (`sbx ports`).
        const declared = (() => {
          try {
            return chooseRoute(project.front_door, port, routeName);
          } catch (error) {
            if (error instanceof CliError && error.code === EXIT.badInput) return error;
            throw error;
          }
        })();
        const { data: body } =
          declared instanceof CliError
            ? await api
                .call("POST", "/projects/{id}/dev-servers/session", {
                  params: { id },
                  body:
                    options.worktree !== undefined
                      ? { worktree: options.worktree }
                      : port
                        ? { port: Number(port) }
                        : {},
                })
                .catch((error: unknown) => {
                  // Nothing found there either: the declared routes' refusal, and why no found server serves.
                  if (!(error instanceof CliError)) throw error;
                  if (error.code === EXIT.notFound)
                    throw new CliError(
                      EXIT.badInput,
                      `${declared.message}; and no dev server listens there in the sandbox now (sbx ports lists those that do)`,
                    );
                  if (error.code === EXIT.conflict)
                    throw new CliError(EXIT.badInput, `${declared.message}; ${error.message}`);
                  throw error;
                })
            : await api.call("POST", "/projects/{id}/front-door/session", {
                params: { id },
                body:
                  declared.name === null
                    ? { port: declared.port }
                    : { port: declared.port, name: declared.name },
              });
        const route = { port: body.port };
        const url = openableUrl(body.url);
        if (options.browser)
          spawn("xdg-open", [url], { stdio: "ignore", detached: true })
            .on("error", () => undefined)
            .unref();
        emit(
          { project_id: id, port: route.port, url, front_door_url: body.front_door_url },
          `${url}\n(one-time, ${body.expires_in} s; it sets your cookie and goes on to ${body.front_door_url})`,
        );
      },
    );
}
