// A directory watched in the sandbox: the envd script's watch op prints a snapshot of the tree (type, mode,
// size, mtime, relative path) each time it changes, polled a few times a second (the image has no inotify
// tools, and the runner's exec is the one way in for every backend); the differences between snapshots are
// envd's events.
import { randomUUID } from "node:crypto";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { StatusLine } from "../../files/streams.js";
import { checkStatus, ENVD_FS_SCRIPT } from "./fs-script.js";
import { notRunning, type EnvdSandbox } from "./gate.js";
import { EventType, type FilesystemEventSchema } from "./gen/filesystem/filesystem_pb.js";

type EventInit = MessageInitShape<typeof FilesystemEventSchema>;

/** Seconds between two looks at the directory. */
const POLL_SECONDS = "0.2";
/** How deep a recursive watch looks. */
const RECURSIVE_DEPTH = 32;
/** The most of one snapshot kept (bytes): a tree larger than this is not watched whole. */
const MAX_SNAPSHOT_BYTES = 8 * 1024 * 1024;
/** The files API's writes go through temporary files named so; they are not the tenant's changes. */
const TEMPORARY = /(^|\/)\.sbx-write\.[A-Za-z0-9]{6}$/;

export interface Watch {
  stop(): void;
}

/** Each entry's state (type, mode, size, mtime) by its path relative to the watched directory. */
type Snapshot = Map<string, { type: string; mode: string; stamp: string }>;

function parseSnapshot(records: Buffer[]): Snapshot {
  const snapshot: Snapshot = new Map();
  for (const record of records) {
    const text = record.toString("utf8");
    const tab = text.indexOf("\t");
    const [type = "", mode = "", size = "", modified = ""] = text.slice(0, tab).split(" ");
    const name = text.slice(tab + 1);
    if (tab > 0 && !TEMPORARY.test(name)) snapshot.set(name, { type, mode, stamp: `${size} ${modified}` });
  }
  return snapshot;
}

/** What changed from `before` to `after`, as envd's events. */
export function differences(before: Snapshot, after: Snapshot): EventInit[] {
  const events: EventInit[] = [];
  for (const [name, now] of after) {
    const was = before.get(name);
    if (!was || was.type !== now.type) events.push({ name, type: EventType.CREATE });
    else if (was.stamp !== now.stamp) events.push({ name, type: EventType.WRITE });
    else if (was.mode !== now.mode) events.push({ name, type: EventType.CHMOD });
  }
  for (const name of before.keys()) if (!after.has(name)) events.push({ name, type: EventType.REMOVE });
  return events;
}

/**
 * Watches `path` (its direct entries, or its tree when `recursive`) until stopped; resolves once the first
 * snapshot is in, so that a change made after it is seen. A refusal (missing, outside) is a ConnectError.
 */
export async function watchDirectory(
  sandbox: EnvdSandbox,
  path: string,
  recursive: boolean,
  on: { onEvent: (event: EventInit) => void; onEnd: (error?: unknown) => void },
): Promise<Watch> {
  const id = randomUUID();
  const statusLine = new StatusLine();
  let settle!: (line: string) => void;
  const status = new Promise<string>((resolve) => (settle = resolve));
  let ready!: () => void;
  let failed!: (error: unknown) => void;
  const first = new Promise<void>((resolve, reject) => ((ready = resolve), (failed = reject)));
  let previous: Snapshot | undefined;
  let records: Buffer[] = [];
  let pending = Buffer.alloc(0);
  let held = 0;
  const onSnapshot = () => {
    const snapshot = parseSnapshot(records);
    records = [];
    held = 0;
    if (previous) for (const event of differences(previous, snapshot)) on.onEvent(event);
    else ready();
    previous = snapshot;
  };
  const depth = String(recursive ? RECURSIVE_DEPTH : 1);
  const argv = ["/bin/sh", "-c", ENVD_FS_SCRIPT, "envd-fs", "watch", path, depth, POLL_SECONDS];
  let stopped = false;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    void sandbox.runner.signal(id, "KILL").catch(() => undefined);
    process?.detach();
  };
  let process: Awaited<ReturnType<typeof sandbox.runner.start>> | undefined;
  try {
    process = await sandbox.runner.start(id, { argv }, (stream, chunk) => {
      if (stream === "stderr") {
        const line = statusLine.push(chunk);
        if (line !== undefined) settle(line);
        return;
      }
      let buffer = Buffer.concat([pending, chunk]);
      for (let end = buffer.indexOf(0); end >= 0; end = buffer.indexOf(0)) {
        if (end === 0) onSnapshot();
        else if ((held += end) <= MAX_SNAPSHOT_BYTES) records.push(Buffer.from(buffer.subarray(0, end)));
        buffer = buffer.subarray(end + 1);
      }
      pending = Buffer.from(buffer);
    });
  } catch (error) {
    throw notRunning(sandbox.projectId, error);
  }
  void process.exited.then(
    (code) => {
      settle(`err exit the watch ended (exit code ${code})`);
      stopped = true;
      const early = new ConnectError(`the watch of ${path} ended before it began`, Code.Internal);
      failed(early);
      on.onEnd(previous ? undefined : early);
    },
    (error: unknown) => (failed(error), on.onEnd(error)),
  );
  try {
    checkStatus(await status, path);
    await first;
  } catch (error) {
    stop();
    throw error;
  }
  return { stop };
}
