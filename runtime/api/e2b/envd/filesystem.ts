// envd's Filesystem service over the sandbox's runner: stat, list to a depth, make a directory, move, remove,
// and watch a directory (a stream, or a watcher polled for its events), all as the agent and confined to its
// home and the workspace.
import { randomUUID } from "node:crypto";
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Channel } from "./channel.js";
import { notRunning, sandboxPath, type EnvdOptions, type EnvdSandbox } from "./gate.js";
import { runFsOp, type EntryInit } from "./fs-script.js";
import { watchDirectory, type Watch } from "./watch.js";
import { Filesystem, type FilesystemEventSchema } from "./gen/filesystem/filesystem_pb.js";
import type { SandboxOf } from "./processes.js";

type EventInit = MessageInitShape<typeof FilesystemEventSchema>;

/** Depth a listing may ask for; deeper trees are listed in more calls. */
const MAX_DEPTH = 64;
/** Events a watcher keeps until they are asked for; older ones go first. */
const WATCHER_EVENTS = 1000;
/** Watchers one sandbox may hold at once. */
const MAX_WATCHERS = 32;

export function filesystemService(
  options: EnvdOptions,
  sandboxOf: SandboxOf,
): ServiceImpl<typeof Filesystem> {
  const { maxListEntries } = options.limits.files;
  /** The watchers made by CreateWatcher, by id, with the sandbox each belongs to. */
  const watchers = new Map<string, { projectId: string; watch: Watch; events: EventInit[] }>();

  async function op(sandbox: EnvdSandbox, args: string[], asked: string): Promise<EntryInit[]> {
    try {
      return await runFsOp(sandbox.runner, args, asked);
    } catch (error) {
      throw notRunning(sandbox.projectId, error);
    }
  }
  async function one(sandbox: EnvdSandbox, args: string[], asked: string): Promise<EntryInit> {
    const [entry] = await op(sandbox, args, asked);
    if (!entry) throw new ConnectError(`${asked}: the sandbox described no entry`, Code.Internal);
    return entry;
  }

  function watcherOf(context: HandlerContext, id: string) {
    const found = watchers.get(id);
    if (!found || found.projectId !== sandboxOf(context).projectId)
      throw new ConnectError(`watcher ${id.slice(0, 64)} not found`, Code.NotFound);
    return found;
  }

  return {
    async stat(request, context) {
      const path = sandboxPath(request.path);
      return { entry: await one(sandboxOf(context), ["stat", path], path) };
    },
    async makeDir(request, context) {
      const path = sandboxPath(request.path);
      return { entry: await one(sandboxOf(context), ["mkdir", path], path) };
    },
    async move(request, context) {
      const source = sandboxPath(request.source, "source");
      const destination = sandboxPath(request.destination, "destination");
      return { entry: await one(sandboxOf(context), ["move", source, destination], source) };
    },
    async listDir(request, context) {
      const path = sandboxPath(request.path);
      const depth = request.depth === 0 ? 1 : request.depth;
      if (depth > MAX_DEPTH)
        throw new ConnectError(`depth must be at most ${MAX_DEPTH} (${depth} asked)`, Code.InvalidArgument);
      const args = ["list", path, String(depth), String(3 * maxListEntries)];
      return { entries: await op(sandboxOf(context), args, path) };
    },
    async remove(request, context) {
      const path = sandboxPath(request.path);
      await op(sandboxOf(context), ["delete", path, "true"], path);
      return {};
    },
    async *watchDir(request, context) {
      const sandbox = sandboxOf(context);
      const channel = new Channel<EventInit>();
      const watch = await watchDirectory(sandbox, sandboxPath(request.path), request.recursive, {
        onEvent: (event) => channel.push(event),
        onEnd: (error) => channel.end(error),
      });
      context.signal.addEventListener("abort", () => channel.end(), { once: true });
      try {
        yield { event: { case: "start" as const, value: {} } };
        for await (const event of channel) yield { event: { case: "filesystem" as const, value: event } };
      } finally {
        watch.stop();
      }
    },
    async createWatcher(request, context) {
      const sandbox = sandboxOf(context);
      const held = [...watchers.values()].filter((w) => w.projectId === sandbox.projectId).length;
      if (held >= MAX_WATCHERS)
        throw new ConnectError(
          `sandbox ${sandbox.projectId} already has ${held} watchers, the most it may; remove one first`,
          Code.ResourceExhausted,
        );
      const id = randomUUID();
      const events: EventInit[] = [];
      const watch = await watchDirectory(sandbox, sandboxPath(request.path), request.recursive, {
        onEvent: (event) => {
          events.push(event);
          if (events.length > WATCHER_EVENTS) events.shift();
        },
        onEnd: () => watchers.delete(id),
      });
      watchers.set(id, { projectId: sandbox.projectId, watch, events });
      return { watcherId: id };
    },
    getWatcherEvents(request, context) {
      const { events } = watcherOf(context, request.watcherId);
      return { events: events.splice(0, events.length) };
    },
    removeWatcher(request, context) {
      const watcher = watcherOf(context, request.watcherId);
      watcher.watch.stop();
      watchers.delete(request.watcherId);
      return {};
    },
  };
}
