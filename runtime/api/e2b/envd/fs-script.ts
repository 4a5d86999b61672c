// What envd's filesystem calls run in the sandbox, as the agent, confined like the files API (the home and
// the workspace; runtime/sandbox/files.ts says how and why): stat, a listing to a depth, make a directory,
// move, and a watcher's snapshots. Removing reuses the files API's own script.
import { Code, ConnectError } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { AGENT_HOME, FILES_SCRIPT, WORKSPACE } from "../../../sandbox/files.js";
import type { SandboxRunner } from "../../../sandbox/runner.js";
import { FileType, type EntryInfoSchema } from "./gen/filesystem/filesystem_pb.js";

export type EntryInit = MessageInitShape<typeof EntryInfoSchema>;

/** One entry: type, size, mode, mtime, owner, group, then its path and a symlink's target, NUL-ended. */
const ENTRY = String.raw`%y\t%s\t%m\t%T@\t%u\t%g\0%p\0%l\0`;

/**
 * `sh -c ENVD_FS_SCRIPT envd-fs <op> <path> [arg]`: its first line on stderr is `ok` or `err <code> <detail>`
 * (as the files script's), entries follow on stdout.
 */
export const ENVD_FS_SCRIPT = String.raw`
op="$1"; p="$2"
fail() { printf 'err %s %s\n' "$1" "$2" >&2; exit 1; }
inside() { case "$1" in ${AGENT_HOME}|${AGENT_HOME}/*|${WORKSPACE}|${WORKSPACE}/*) return 0;; esac; return 1; }
# The place a path names without following a last symlink (a link is stat-ed, moved, as itself).
place() { d=$(realpath -m -- "$(dirname -- "$1")") || fail invalid "$1"; printf '%s/%s' "$d" "$(basename -- "$1")"; }
case "$op" in
  stat)
    at=$(place "$p"); inside "$at" || fail outside "$at"
    [ -e "$at" ] || [ -L "$at" ] || fail missing "$at"
    printf 'ok\n' >&2; find "$at" -maxdepth 0 -printf '${ENTRY}' ;;
  list)
    real=$(realpath -e -- "$p" 2>/dev/null) || fail missing "$p"
    inside "$real" || fail outside "$real"
    [ -d "$real" ] || fail notdir "$real"
    cd -- "$real" 2>/dev/null || fail denied "$real"
    here=$(pwd -P); inside "$here" || fail outside "$here"
    printf 'ok\n' >&2; find "$here" -mindepth 1 -maxdepth "$3" -printf '${ENTRY}' | head -z -n "$4" ;;
  mkdir)
    at=$(realpath -m -- "$p") || fail invalid "$p"; inside "$at" || fail outside "$at"
    [ -e "$at" ] && fail exists "$at"
    mkdir -p -- "$at" 2>/dev/null || fail denied "$at"
    real=$(realpath -e -- "$at"); inside "$real" || fail outside "$real"
    printf 'ok\n' >&2; find "$real" -maxdepth 0 -printf '${ENTRY}' ;;
  move)
    from=$(place "$p"); inside "$from" || fail outside "$from"
    [ -e "$from" ] || [ -L "$from" ] || fail missing "$from"
    to=$(place "$3"); inside "$to" || fail outside "$to"
    mkdir -p -- "$(dirname -- "$to")" 2>/dev/null || fail denied "$to"
    inside "$(realpath -e -- "$(dirname -- "$to")")" || fail outside "$to"
    mv -T -- "$from" "$to" 2>/dev/null || fail denied "$to"
    printf 'ok\n' >&2; find "$to" -maxdepth 0 -printf '${ENTRY}' ;;
  watch)
    real=$(realpath -e -- "$p" 2>/dev/null) || fail missing "$p"
    inside "$real" || fail outside "$real"
    [ -d "$real" ] || fail notdir "$real"
    cd -- "$real" 2>/dev/null || fail denied "$real"
    here=$(pwd -P); inside "$here" || fail outside "$here"
    old=$(mktemp) && new=$(mktemp) || fail denied /tmp
    trap 'rm -f -- "$old" "$new"' EXIT
    trap 'exit 0' TERM INT HUP
    printf 'ok\n' >&2
    # A snapshot (type, mode, size, mtime, relative path) whenever it changes, ended by an empty record.
    printf 'first' > "$old"
    while :; do
      find "$here" -mindepth 1 -maxdepth "$3" -printf '%y %m %s %T@\t%P\0' | LC_ALL=C sort -z > "$new"
      if ! cmp -s "$new" "$old"; then cat "$new"; printf '\0'; cp "$new" "$old"; fi
      sleep "$4"
    done ;;
  *) fail invalid "$op" ;;
esac
`;

/** How each of the scripts' failure codes is answered. */
const FAILURES: Record<string, { code: Code; what: (detail: string) => string }> = {
  missing: { code: Code.NotFound, what: (d) => `${d}: no such file or directory` },
  outside: { code: Code.PermissionDenied, what: (d) => `${d} is outside ${AGENT_HOME} and ${WORKSPACE}` },
  denied: { code: Code.PermissionDenied, what: (d) => `${d}: the sandbox's user may not do that there` },
  exists: { code: Code.AlreadyExists, what: (d) => `${d} already exists` },
  notdir: { code: Code.InvalidArgument, what: (d) => `${d} is not a directory` },
  isdir: { code: Code.InvalidArgument, what: (d) => `${d} is a directory` },
  invalid: { code: Code.InvalidArgument, what: (d) => `${d} names no file` },
  toolarge: { code: Code.ResourceExhausted, what: (d) => d },
  io: { code: Code.Internal, what: (d) => `${d} could not be written` },
};

/** A script's status line as nothing (ok) or the ConnectError it names. */
export function checkStatus(line: string | undefined, asked: string): void {
  if (line?.startsWith("ok")) return;
  const [, code = "", ...rest] = (line ?? "").split(" ");
  const failure = FAILURES[code];
  if (!failure)
    throw new ConnectError(`the file operation on ${asked} failed: ${line ?? "no status"}`, Code.Internal);
  throw new ConnectError(failure.what(rest.join(" ") || asked), failure.code);
}

/** Runs one op of the envd script (or `delete`, the files API's); its entries once its status is ok. */
export async function runFsOp(runner: SandboxRunner, args: string[], asked: string): Promise<EntryInit[]> {
  const script = args[0] === "delete" ? FILES_SCRIPT : ENVD_FS_SCRIPT;
  const result = await runner.run(["/bin/sh", "-c", script, "envd-fs", ...args], { timeoutMs: 60_000 });
  checkStatus(result.stderr.split("\n")[0], asked);
  return parseEntries(result.stdout);
}

const TYPES: Record<string, FileType> = { f: FileType.FILE, d: FileType.DIRECTORY, l: FileType.SYMLINK };

/** The script's entries (whole ones: a listing cut at the output bound ends in a part of one). */
export function parseEntries(output: string): EntryInit[] {
  const fields = output.split("\0");
  const entries: EntryInit[] = [];
  for (let at = 0; at + 3 < fields.length; at += 3) {
    const [type = "", size, mode = "0", modified, owner, group] = fields[at]!.split("\t");
    const path = fields[at + 1]!;
    const modeBits = Number.parseInt(mode, 8);
    entries.push({
      name: path.slice(path.lastIndexOf("/") + 1),
      path,
      type: TYPES[type] ?? FileType.UNSPECIFIED,
      size: BigInt(Number(size) || 0),
      mode: modeBits,
      permissions: permissions(type, modeBits),
      owner,
      group,
      modifiedTime: timestampOf(modified ?? "0"),
      symlinkTarget: type === "l" ? fields[at + 2] : undefined,
    });
  }
  return entries;
}

/** find's `%T@` (seconds, a fraction to the nanosecond) as a Timestamp, whole nanoseconds. */
function timestampOf(text: string) {
  const [seconds = "0", fraction = ""] = text.split(".");
  return {
    seconds: BigInt(/^\d+$/.test(seconds) ? seconds : "0"),
    nanos: Number(fraction.padEnd(9, "0").slice(0, 9)) || 0,
  };
}

/** `ls -l`'s form of a mode (`-rw-r--r--`), as envd gives it. */
function permissions(type: string, mode: number): string {
  const bits = ["r", "w", "x"];
  const rest = Array.from({ length: 9 }, (_, i) => (mode & (1 << (8 - i)) ? bits[i % 3] : "-")).join("");
  return `${type === "d" ? "d" : type === "l" ? "L" : "-"}${rest}`;
}
