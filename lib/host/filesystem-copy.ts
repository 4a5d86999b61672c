// Consistent copies of an ext4 image while it is in use: its writes are held for the one copy taken at that
// point (a loop-mounted home, sandbox:host:Filesystem, frozen by `fsfreeze`: dirty data written, the journal
// flushed and new writes held; a microVM's home disk, its guest paused: lib/microvm/hold.ts), and every
// further copy is made from that one, after the hold.
import { spawn } from "node:child_process";
import { promises as fs } from "node:fs";
import { run } from "../process.js";

/** What is mounted at exactly this path (the last mount wins, as the kernel shows it), with its source. */
export async function mountAt(
  mountpoint: string,
): Promise<{ source: string; backingFile?: string } | undefined> {
  const mountinfo = await fs.readFile("/proc/self/mountinfo", "utf8");
  let found: string | undefined;
  for (const line of mountinfo.split("\n")) {
    const fields = line.split(" ");
    const target = fields[4]?.replace(/\\040/g, " ");
    const dash = fields.indexOf("-");
    if (target === mountpoint && dash > 0) found = fields[dash + 2];
  }
  if (found === undefined) return undefined;
  const loop = /^\/dev\/(loop\d+)$/.exec(found);
  if (!loop) return { source: found };
  const backing = await fs
    .readFile(`/sys/block/${loop[1]}/loop/backing_file`, "utf8")
    .then((text) => text.trim())
    .catch(() => undefined);
  return { source: found, backingFile: backing };
}

export interface ImageCopies {
  /** When the copies' point was taken (the freeze began; the copy's start when nothing was mounted). */
  readonly at: Date;
  /** Whether the source was mounted, and so frozen for the first copy. */
  readonly frozen: boolean;
  /** How long writes to the source were held (0 when it was not mounted). */
  readonly frozenMs: number;
  /** All copies, start to end. */
  readonly totalMs: number;
  /** Disk space the copies hold (allocated blocks; extents shared by reflink, where the host has it, count once each copy). */
  readonly bytesAllocated: number;
}

/**
 * How writes to an image in use are held for the one copy of a point, and let go again. A watchdog process
 * runs `watchdogRelease` should this process die while they are held, or at the hold's deadline.
 */
export interface WriteHold {
  /** What is held, as a message names it (a mountpoint, a microVM's directory). */
  readonly what: string;
  hold(): Promise<void>;
  /** Lets the writes go; one the watchdog let go already is let go. */
  release(): Promise<void>;
  /** The watchdog's release: a command and its arguments, run without a shell. */
  readonly watchdogRelease: readonly string[];
}

/**
 * Longest a source's writes are held: a copy that takes longer is discarded, and a watchdog of its own lets
 * them go then. Should this process die mid-copy, the watchdog lets them go at once.
 */
export const FREEZE_DEADLINE_SECONDS = 120;

const COPY_ARGS = ["--reflink=auto", "--sparse=always"];
const partialOf = (destination: string) => `${destination}.partial`;

/**
 * The hold of `imagePath` mounted at `mountpoint` (`fsfreeze -f` / `-u`), or none when nothing is mounted
 * there (an image no one writes to). Something else mounted there is an error: never a freeze of another
 * filesystem (the host's own, under an unmounted mountpoint).
 */
export async function mountFreeze(imagePath: string, mountpoint: string): Promise<WriteHold | undefined> {
  const mount = await mountAt(mountpoint);
  if (!mount) return undefined;
  if (mount.backingFile !== imagePath)
    throw new Error(
      `${mountpoint} is a mount of ${mount.backingFile ?? mount.source}, not of ${imagePath}; refusing to freeze or copy it`,
    );
  return {
    what: mountpoint,
    hold: () => run("fsfreeze", ["-f", mountpoint]).then(() => undefined),
    release: () =>
      run("fsfreeze", ["-u", mountpoint]).then(
        () => undefined,
        (error: Error) => {
          // Thawed by the watchdog already is thawed.
          if (!/Invalid argument/.test(error.message)) throw error;
        },
      ),
    watchdogRelease: ["fsfreeze", "-u", mountpoint],
  };
}

/**
 * Copies of `imagePath` (mounted at `mountpoint`, or not mounted at all) to each of `destinations`, all of
 * one point in time: {@link copyImageAtOnePoint} with the mount's freeze ({@link mountFreeze}).
 */
export async function copyImageConsistently(
  imagePath: string,
  mountpoint: string,
  destinations: readonly string[],
  options: { timeoutMs?: number; freezeDeadlineSeconds?: number } = {},
): Promise<ImageCopies> {
  if (destinations.length === 0) throw new Error("copyImageConsistently: no destination");
  return copyImageAtOnePoint(imagePath, await mountFreeze(imagePath, mountpoint), destinations, options);
}

/**
 * Copies of `imagePath` to each of `destinations`, all of one point in time: the first with the source's
 * writes held (`hold`; none: nothing writes to it), let go in a `finally` and by a detached watchdog as soon
 * as this process dies, or at {@link FREEZE_DEADLINE_SECONDS}), the others copied from it.
 * `cp --reflink=auto --sparse=always`: copy-on-write where the host filesystem has it (btrfs, XFS), else
 * only the image's allocated blocks. Each copy is written as `<destination>.partial` and renamed when all are
 * whole; any failure removes everything made, and nothing is left half-made under a destination's name.
 */
export async function copyImageAtOnePoint(
  imagePath: string,
  hold: WriteHold | undefined,
  destinations: readonly string[],
  { timeoutMs = 600_000, freezeDeadlineSeconds = FREEZE_DEADLINE_SECONDS } = {},
): Promise<ImageCopies> {
  if (destinations.length === 0) throw new Error("copyImageAtOnePoint: no destination");
  const made: string[] = [];
  const started = Date.now();
  let frozenMs = 0;
  try {
    const [first, ...rest] = destinations.map(partialOf);
    made.push(first!);
    if (hold) {
      frozenMs = await whileHeld(hold, freezeDeadlineSeconds, () =>
        run("cp", [...COPY_ARGS, imagePath, first!], timeoutMs).then(() => undefined),
      );
    } else await run("cp", [...COPY_ARGS, imagePath, first!], timeoutMs);
    for (const partial of rest) {
      made.push(partial);
      await run("cp", [...COPY_ARGS, first!, partial], timeoutMs);
    }
    let bytesAllocated = 0;
    for (const partial of made) bytesAllocated += (await fs.stat(partial)).blocks * 512;
    for (const destination of destinations) {
      await fs.rename(partialOf(destination), destination);
      made.push(destination);
    }
    return {
      at: new Date(started),
      frozen: hold !== undefined,
      frozenMs,
      totalMs: Date.now() - started,
      bytesAllocated,
    };
  } catch (error) {
    await Promise.all(made.map((file) => fs.rm(file, { force: true })));
    throw error;
  }
}

/** Runs `work` with the source's writes held; resolves with how long they were. */
async function whileHeld(
  source: WriteHold,
  deadlineSeconds: number,
  work: () => Promise<void>,
): Promise<number> {
  // The watchdog: its own process group, so it outlives this process and can be ended as one. It lets the
  // writes go when its standard input ends, which is when this process dies (the pipe's only writer: kill -9
  // included), or at the deadline, whichever comes first; ended by this process first, it does nothing.
  // `--foreground` keeps cat in the watchdog's group, so the group's end is cat's too.
  const watchdog = spawn(
    "sh",
    [
      "-c",
      `timeout --foreground ${deadlineSeconds} cat >/dev/null; exec "$@"`,
      "sh",
      ...source.watchdogRelease,
    ],
    { detached: true, stdio: ["pipe", "ignore", "ignore"] },
  );
  watchdog.stdin!.on("error", () => undefined); // EPIPE once it is gone; nothing is ever written
  watchdog.unref();
  let fired = false;
  watchdog.on("exit", (_code, signal) => {
    if (signal === null) fired = true;
  });
  const heldAt = Date.now();
  try {
    await source.hold();
    try {
      await work();
    } finally {
      await source.release();
    }
    const heldMs = Date.now() - heldAt;
    if (fired || heldMs >= deadlineSeconds * 1000)
      throw new Error(
        `the copy of ${source.what} took longer than the hold's ${deadlineSeconds} s deadline: it may not be of one point, and is discarded`,
      );
    return heldMs;
  } finally {
    if (watchdog.pid !== undefined && watchdog.exitCode === null && watchdog.signalCode === null)
      try {
        process.kill(-watchdog.pid, "SIGKILL");
      } catch {
        // Ended on its own in between.
      }
    // Only now, with the group gone: closed first, its end would have the watchdog let go (a later hold's).
    watchdog.stdin!.destroy();
  }
}
