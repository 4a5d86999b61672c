// Files in a sandbox for the API, moved as bytes through an exec's stdin and stdout (binary
// safe, streamed both ways) by a script that runs as the agent. Paths are resolved inside the sandbox, by
// the agent, and confined to /home/agent and /workspace:
// - a read opens the file first and checks what it opened (/proc/$$/fd/3), so that a path swapped after the
//   check reads nothing else;
// - a write, a delete and a tar upload enter the resolved directory first and check where they are
//   (`pwd -P`), then act on a name relative to it: a symlink swapped in later above that directory cannot
//   redirect them. A write goes to a temporary file in that directory renamed over the name (`mv -T`: a
//   symlink at the name is replaced, not followed).
// What is left is a race only the tenant's own processes can run (another exec, the agent at a terminal),
// against files the agent may touch anyway: the confinement keeps API clients' paths where they mean them
// to be; the boundary is the agent's uid, since nothing here runs as root.
import { posix } from "node:path";

/** The directories API paths are confined to; relative paths start at the first that exists. */
export const AGENT_HOME = "/home/agent";
export const WORKSPACE = "/workspace";
/** Linux's PATH_MAX and NAME_MAX, in bytes. */
export const MAX_PATH_BYTES = 4096;
export const MAX_NAME_BYTES = 255;

/**
 * Why `path` cannot be asked for at all (checked before the sandbox is): empty, a NUL byte, longer than
 * the kernel takes. Undefined when it may be.
 */
export function pathProblem(path: string): string | undefined {
  if (path.length === 0) return "must not be empty";
  if (path.includes("\0")) return "must not contain NUL bytes";
  if (path.split("/").includes(".."))
    return "must not have a '..' component (a path names a place in the home or the workspace as it is)";
  if (Buffer.byteLength(path) > MAX_PATH_BYTES) return `is longer than ${MAX_PATH_BYTES} bytes`;
  const long = path.split("/").find((name) => Buffer.byteLength(name) > MAX_NAME_BYTES);
  if (long !== undefined) return `has a name longer than ${MAX_NAME_BYTES} bytes (${long.slice(0, 40)}…)`;
  return undefined;
}

/** The path the sandbox is given: absolute as asked, or under the workspace root (resolved there). */
export const sandboxPath = (path: string): string => (path.startsWith("/") ? posix.normalize(path) : path);

/**
 * The script (`sh -c FILES_SCRIPT sbx-files <op> <path> [args]`). Its first line on stderr is its status:
 * `ok [detail]`, or `err <code> <path or message>` and exit 1; a read's bytes and a listing follow on
 * stdout. Codes: missing, outside, denied, isdir, notdir, invalid, toolarge, tar.
 *
 * `stat <path> <count> <cursor>` lists a directory in its names' byte order, `count` entries at most, from
 * the first name after the cursor's (base64; empty: from the start). The cursor goes into sort's input as a
 * record of its own, `<name>/~`, which sorts after a real entry of the same name (whose `/` is followed by
 * its type letter), and everything up to it is dropped: the runtime never reads more than it answers.
 */
export const FILES_SCRIPT = String.raw`
op="$1"; p="$2"
fail() { printf 'err %s %s\n' "$1" "$2" >&2; exit 1; }
inside() { case "$1" in ${AGENT_HOME}|${AGENT_HOME}/*|${WORKSPACE}|${WORKSPACE}/*) return 0;; esac; return 1; }
case "$p" in
  /*) ;;
  *) if [ -d ${WORKSPACE} ]; then p="${WORKSPACE}/$p"; else p="${AGENT_HOME}/$p"; fi ;;
esac
# Enters the directory of $1 (created first when $2 is "create") and checks where it is: sets here, name.
enter_parent() {
  dir=$(dirname -- "$1"); name=$(basename -- "$1")
  case "$name" in .|..|/) fail invalid "$1";; esac
  if [ "$2" = create ]; then
    real=$(realpath -m -- "$dir") || fail invalid "$1"
    inside "$real" || fail outside "$real/$name"
    mkdir -p -- "$real" 2>/dev/null || fail denied "$real"
  else
    real=$(realpath -e -- "$dir" 2>/dev/null) || fail missing "$1"
  fi
  cd -- "$real" 2>/dev/null || fail denied "$real"
  here=$(pwd -P)
  inside "$here" || fail outside "$here/$name"
}
entry() { find "$@" -printf '%f/%y\t%s\t%m\t%T@\t%l\0'; }
case "$op" in
  read)
    max="$3"
    # A failed redirection of exec ends sh: what it would say is found first.
    seen=$(realpath -m -- "$p"); inside "$seen" || fail outside "$seen"
    [ -e "$p" ] || fail missing "$p"
    [ -r "$p" ] || fail denied "$p"
    exec 3< "$p"
    real=$(readlink -f "/proc/$$/fd/3")
    inside "$real" || fail outside "$real"
    [ -d "$real" ] && fail isdir "$real"
    # The open file's size (gVisor's /proc cannot stat an fd's link: the descriptor's own fstat there).
    size=$(stat -L -c %s "/proc/$$/fd/3" 2>/dev/null || python3 -c 'import os; print(os.fstat(3).st_size)')
    [ "$size" -gt "$max" ] && fail toolarge "$real is $size bytes"
    printf 'ok %s\n' "$size" >&2
    exec cat <&3 ;;
  stat)
    real=$(realpath -e -- "$p" 2>/dev/null) || fail missing "$p"
    inside "$real" || fail outside "$real"
    if [ -d "$real" ]; then
      cd -- "$real" 2>/dev/null || fail denied "$real"
      here=$(pwd -P); inside "$here" || fail outside "$here"
      printf 'ok directory %s\n' "$here" >&2
      { entry . -mindepth 1 -maxdepth 1; printf '%s' "$4" | base64 -d; printf '/~\0'; } |
        LC_ALL=C sort -z -t / -k 1,1 | LC_ALL=C sed -z '0,/^[^/]*\/~$/d' | head -z -n "$3"
    else
      printf 'ok file %s\n' "$real" >&2
      entry "$real" -maxdepth 0
    fi ;;
  write)
    mode="$3"
    enter_parent "$p" create
    if [ -d "$name" ] && [ ! -L "$name" ]; then fail isdir "$here/$name"; fi
    tmp=$(mktemp ./.sbx-write.XXXXXX 2>/dev/null) || fail denied "$here"
    trap 'rm -f -- "$tmp"' EXIT
    trap 'exit 1' TERM INT HUP
    cat > "$tmp" || fail io "$here/$name"
    chmod "$mode" "$tmp" || fail io "$here/$name"
    mv -f -T -- "$tmp" "$name" 2>/dev/null || fail denied "$here/$name"
    trap - EXIT
    printf 'ok %s\n' "$here/$name" >&2 ;;
  delete)
    recursive="$3"
    enter_parent "$p"
    full="$here/$name"
    case "$full" in ${AGENT_HOME}|${WORKSPACE}) fail invalid "$full";; esac
    [ -e "$name" ] || [ -L "$name" ] || fail missing "$full"
    if [ -d "$name" ] && [ ! -L "$name" ]; then
      [ "$recursive" = true ] || fail isdir "$full"
      rm -rf -- "$name" 2>/dev/null || fail denied "$full"
    else
      rm -f -- "$name" 2>/dev/null || fail denied "$full"
    fi
    printf 'ok %s\n' "$full" >&2 ;;
  tar-out)
    real=$(realpath -e -- "$p" 2>/dev/null) || fail missing "$p"
    inside "$real" || fail outside "$real"
    if [ -d "$real" ]; then
      cd -- "$real" 2>/dev/null || fail denied "$real"
      here=$(pwd -P); inside "$here" || fail outside "$here"
      printf 'ok %s\n' "$here" >&2
      exec tar -c -f - .
    else
      enter_parent "$real"
      printf 'ok %s\n' "$here/$name" >&2
      exec tar -c -f - -- "$name"
    fi ;;
  tar-in)
    real=$(realpath -m -- "$p") || fail invalid "$p"
    inside "$real" || fail outside "$real"
    mkdir -p -- "$real" 2>/dev/null || fail denied "$real"
    cd -- "$real" 2>/dev/null || fail denied "$real"
    here=$(pwd -P); inside "$here" || fail outside "$here"
    errors=$(mktemp) || fail denied /tmp
    trap 'rm -f -- "$errors"' EXIT
    trap 'exit 1' TERM INT HUP
    # As the agent: owners are the agent's, modes as archived (-p), no name with .. (GNU tar's default).
    n=$(tar -x -v -p --no-same-owner -f - 2>"$errors" | wc -l)
    [ -s "$errors" ] && fail tar "$(head -c 500 "$errors" | tr '\n' ' ')"
    printf 'ok %s\n' "$n" >&2 ;;
  *) fail invalid "$op" ;;
esac
`;

/**
 * The longest record `entry` prints: a name (NAME_MAX), a symlink's target (PATH_MAX less its NUL), the
 * type, size, mode and time between them.
 */
export const MAX_ENTRY_BYTES = MAX_NAME_BYTES + MAX_PATH_BYTES + 128;

export interface FileEntry {
  readonly name: string;
  readonly type: "file" | "directory" | "symlink" | "other";
  readonly size: number;
  /** Permission bits, octal as text (`644`). */
  readonly mode: string;
  readonly modified_at: string;
  /** Where a symlink points (as written in it). */
  readonly link_target: string | null;
}

const TYPES: Record<string, FileEntry["type"]> = { f: "file", d: "directory", l: "symlink" };

/** One listed entry with its name's bytes as the sandbox has them (what a cursor carries). */
export interface ListedEntry {
  readonly entry: FileEntry;
  readonly nameBytes: Buffer;
}

/**
 * find's `-printf '%f/%y\t%s\t%m\t%T@\t%l\0'` records, in the names' byte order (the order the script
 * lists in): a name holds neither `/` nor NUL, a symlink's target may hold anything but NUL, so it is last.
 */
export function parseEntries(output: Buffer): ListedEntry[] {
  const listed: ListedEntry[] = [];
  for (let start = 0; start < output.length;) {
    // Whole records only: a listing cut short ends in a part of one.
    const end = output.indexOf(0, start);
    if (end < 0) break;
    const record = output.subarray(start, end);
    start = end + 1;
    const slash = record.indexOf(0x2f);
    if (slash < 0) continue;
    const nameBytes = Buffer.from(record.subarray(0, slash));
    const [type = "", size, mode = "", modified, ...link] = record
      .subarray(slash + 1)
      .toString("utf8")
      .split("\t");
    if (!Number.isFinite(Number(modified))) continue;
    listed.push({
      nameBytes,
      entry: {
        name: nameBytes.toString("utf8"),
        type: TYPES[type] ?? "other",
        size: Number(size),
        mode: mode.padStart(3, "0"),
        modified_at: new Date(Number(modified) * 1000).toISOString(),
        link_target: type === "l" ? link.join("\t") : null,
      },
    });
  }
  return listed.sort((a, b) => Buffer.compare(a.nameBytes, b.nameBytes));
}

/** The cursor that continues a listing after `nameBytes` (URL-safe base64 of the name's bytes). */
export const listingCursor = (nameBytes: Buffer): string => nameBytes.toString("base64url");

/**
 * The script's cursor argument for a client's `cursor`: the name's bytes up to the first byte no name holds
 * (`/`, NUL: a cursor this runtime made has none), as standard base64; empty for none.
 */
export function cursorArgument(cursor: string | undefined): string {
  if (!cursor) return "";
  const bytes = Buffer.from(cursor, "base64url");
  const stop = bytes.findIndex((byte) => byte === 0 || byte === 0x2f);
  return (stop < 0 ? bytes : bytes.subarray(0, stop)).toString("base64");
}
