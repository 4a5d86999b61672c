// `sbx sync --artifacts`: what comes back is a tar stream that only the sandbox makes (the remote side runs
// in the agent's login shell, so the agent can send any bytes at all). It is read here, header by header,
// never by the host's tar: only regular files and directories at or under the path asked for are taken;
// nothing in a .git (a hook or a `core.fsmonitor` there runs at the developer's next `git status`), no link,
// device or other kind, no name that climbs out or is not plain; every size is checked against the limit
// before a byte of it is read. The stream goes into a fresh directory beside the destination and moves into
// place only once all of it was accepted, and never through a symbolic link there: a refused archive
// changes nothing on this machine.
import { constants } from "node:fs";
import * as fs from "node:fs/promises";
import * as path from "node:path";
import { CliError, EXIT } from "./errors.js";
import { printableName } from "./printable.js";
import {
  applyPax,
  BLOCK,
  checksumHolds,
  DIRECTORY_KIND,
  field,
  FILE_KINDS,
  headerNumber,
  isZero,
  MAX_NAME_BYTES,
  MAX_PAX_BYTES,
  padding,
  paxRecords,
  REFUSED_KINDS,
  StreamReader,
  strictUtf8,
  type Overrides,
} from "./tar-reader.js";

/** Zeros read after the end-of-archive blocks (tar pads to its record size, 10 KiB by default). */
const MAX_TRAILING_ZEROS = 1 << 20;
/** How many refused members a message names before it counts the rest. */
const NAMED_IN_MESSAGE = 20;

export interface ArchiveLimits {
  /** Bytes of data (every member's, pax headers' and long names' together) read before the stream is refused. */
  readonly maxBytes: number;
  /** Members (headers) read before the stream is refused. */
  readonly maxMembers: number;
}

export const DEFAULT_ARCHIVE_LIMITS: ArchiveLimits = {
  maxBytes: Number(process.env.SBX_MAX_ARTIFACTS_MB ?? 1024) * 1024 * 1024,
  maxMembers: 100_000,
};

export interface Extracted {
  readonly files: number;
  readonly directories: number;
  readonly bytes: number;
}

/** An archive from the sandbox that was not taken; `members` names each refused member and why. */
export class ArchiveRefused extends CliError {
  constructor(
    readonly artifact: string,
    readonly members: readonly string[],
    readonly problem?: string,
  ) {
    const named = members.slice(0, NAMED_IN_MESSAGE).join(", ");
    const more = members.length > NAMED_IN_MESSAGE ? `, and ${members.length - NAMED_IN_MESSAGE} more` : "";
    super(
      EXIT.refused,
      `refused what the sandbox sent for ${artifact}; nothing of it was written here` +
        (members.length > 0 ? `. Refused members: ${named}${more}` : "") +
        (problem ? `. ${problem}` : ""),
      { artifact, refused: members, ...(problem ? { problem } : {}) },
    );
  }
}

/** Code points git ignores when it compares a name with `.git` on HFS+ (git's is_hfs_dotgit). */
const IGNORABLE = /[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]/g;

/**
 * Whether a path component is `.git` on any filesystem: any case (macOS, Windows), trailing dots and spaces
 * (Windows drops them), the 8.3 short name, and code points HFS+ ignores.
 */
export function isGitName(component: string): boolean {
  const folded = component
    .replace(IGNORABLE, "")
    .replace(/[. ]+$/, "")
    .toLowerCase();
  return folded === ".git" || folded === "git~1";
}

/** A path given to --artifacts, canonical (`./dist/` is `dist`), or a refusal naming what is wrong with it. */
export function artifactPath(raw: string): string {
  const canonical = path.posix.normalize(raw).replace(/\/+$/, "");
  if (
    path.posix.isAbsolute(raw) ||
    raw.split("/").includes("..") ||
    !/^[A-Za-z0-9._/-]+$/.test(raw) ||
    canonical === "." ||
    canonical === ""
  )
    throw new CliError(
      EXIT.badInput,
      `--artifacts ${raw}: must be a path inside the repository (no '..', no shell characters)`,
    );
  if (canonical.split("/").some(isGitName))
    throw new CliError(
      EXIT.badInput,
      `--artifacts ${raw}: nothing in a .git directory is copied back (git runs the hooks and the config there)`,
    );
  return canonical;
}

/** Why a member called `name` (a directory's without its trailing '/') is refused; undefined when it is taken. */
export function memberNameProblem(name: string, artifact: string): string | undefined {
  if (name === "") return "an empty name";
  if (/[\u0000-\u001f\u007f-\u009f]/.test(name)) return "a control character in its name";
  if (name.startsWith("/")) return "an absolute path";
  const parts = name.split("/");
  if (parts.includes("..")) return "a '..' component";
  if (parts.some((part) => part === "" || part === ".")) return "not a plain relative path";
  if (parts.some(isGitName)) return "inside a .git directory";
  if (name !== artifact && !name.startsWith(`${artifact}/`)) return `outside ${artifact}`;
  return undefined;
}

/**
 * Reads the tar stream `source` into `staging` (a fresh, empty directory), taking only regular files and
 * directories at or under `artifact`. Every member that is refused is named (the stream is read to its end
 * so that all of them are); a stream that is not a well-formed archive (a bad checksum, a truncation, a size
 * over the limit, data after its end) stops at once. Throws {@link ArchiveRefused} unless all was taken.
 */
export async function receiveArchive(
  source: AsyncIterable<Buffer | string>,
  staging: string,
  artifact: string,
  limits: ArchiveLimits = DEFAULT_ARCHIVE_LIMITS,
): Promise<Extracted> {
  const reader = new StreamReader(source[Symbol.asyncIterator]());
  const refused: string[] = [];
  const stop = (problem: string) => new ArchiveRefused(artifact, refused, problem);
  let left = limits.maxBytes;
  let members = 0;
  let overrides: Overrides = {};
  const files = new Set<string>();
  const directories = new Set<string>();
  let bytes = 0;

  /** Reads `size` bytes (and the padding after them) the archive holds but this CLI does not keep. */
  const skip = async (size: number, what: string) => {
    if (!(await reader.forward(size + padding(size), async () => undefined)))
      throw stop(`the archive ends inside ${what} (truncated)`);
  };

  for (;;) {
    const block = await reader.read(BLOCK);
    if (!block) throw stop("the archive ends before its end-of-archive blocks (truncated)");
    if (isZero(block)) {
      const second = await reader.read(BLOCK);
      if (!second || !isZero(second)) throw stop("a lone zero block: the archive is truncated or malformed");
      if (!(await reader.restIsZeros(MAX_TRAILING_ZEROS))) throw stop("data after the end of the archive");
      break;
    }
    if (++members > limits.maxMembers) throw stop(`more than ${limits.maxMembers} members`);
    if (!checksumHolds(block))
      throw stop(`header ${members} has a bad checksum: not a tar archive, or a damaged one`);
    const kind = String.fromCharCode(block[156]!);
    const headerSize = headerNumber(block.subarray(124, 136));
    if (headerSize === undefined) throw stop(`header ${members} has a size that is not a number`);
    const isMeta = kind === "x" || kind === "g" || kind === "L" || kind === "K";
    const size = isMeta ? headerSize : (overrides.size ?? headerSize);
    if (size > left)
      throw stop(
        `header ${members} declares ${size} bytes, over the limit of ${limits.maxBytes} bytes for the whole archive ($SBX_MAX_ARTIFACTS_MB)`,
      );
    left -= size;

    if (isMeta) {
      const most = kind === "x" || kind === "g" ? MAX_PAX_BYTES : MAX_NAME_BYTES + 1;
      if (size > most) throw stop(`header ${members} ('${kind}') holds ${size} bytes, over ${most}`);
      const data = await reader.read(size);
      if (!data || !(await reader.read(padding(size))))
        throw stop(`the archive ends inside header ${members} (truncated)`);
      if (kind === "L" || kind === "K") {
        const text = strictUtf8(field(data, 0, data.length));
        if (text === undefined) throw stop(`header ${members} has a GNU long name that is not UTF-8`);
        overrides[kind === "L" ? "path" : "linkpath"] = text;
        continue;
      }
      const records = paxRecords(data);
      if (typeof records === "string") throw stop(`header ${members}: ${records}`);
      if (kind === "g") {
        const global = [...records.keys()].find(
          (key) => key === "path" || key === "linkpath" || key === "size" || key.startsWith("GNU.sparse."),
        );
        if (global) throw stop(`a global pax header sets ${global} for every member`);
        continue;
      }
      const problem = applyPax(records, overrides);
      if (problem) throw stop(`header ${members}: ${problem}`);
      continue;
    }

    // A member: its name is pax's path, GNU's long name, or the header's (with ustar's prefix).
    const ustar = block.subarray(257, 263).toString("latin1") === "ustar\0";
    const prefix = ustar ? field(block, 345, 155) : Buffer.alloc(0);
    const headerName = strictUtf8(
      prefix.length > 0
        ? Buffer.concat([prefix, Buffer.from("/"), field(block, 0, 100)])
        : field(block, 0, 100),
    );
    const rawName = overrides.path ?? headerName;
    const linkName = overrides.linkpath ?? strictUtf8(field(block, 157, 100)) ?? "";
    overrides = {};
    if (rawName === undefined) {
      refused.push(`header ${members} (a name that is not UTF-8)`);
      await skip(size, `header ${members}`);
      continue;
    }
    const isDirectory = kind === DIRECTORY_KIND;
    const name = isDirectory ? rawName.replace(/\/$/, "") : rawName;
    const shown = printableName(rawName);
    const kindProblem =
      REFUSED_KINDS[kind] !== undefined
        ? `${REFUSED_KINDS[kind]}${kind === "1" || kind === "2" ? ` to ${printableName(linkName)}` : ""}`
        : !FILE_KINDS.has(kind) && !isDirectory
          ? `an unknown member type ${JSON.stringify(kind)}`
          : undefined;
    // Only a regular file has data: any other member with some could be read two ways, so the stream stops.
    if (!FILE_KINDS.has(kind) && kindProblem === undefined && size !== 0)
      throw stop(`${shown} is a directory with ${size} bytes of data`);
    if (REFUSED_KINDS[kind] !== undefined && kind !== "S" && kind !== "D" && kind !== "M" && size !== 0)
      throw stop(`${shown} is ${REFUSED_KINDS[kind]} with ${size} bytes of data`);
    const nameProblem = memberNameProblem(name, artifact);
    const parents = name
      .split("/")
      .slice(0, -1)
      .map((_, i, all) => all.slice(0, i + 1).join("/"));
    const clash =
      nameProblem || kindProblem
        ? undefined
        : files.has(name) || (!isDirectory && directories.has(name))
          ? "a second member of that name"
          : (isDirectory && files.has(name)) || parents.some((parent) => files.has(parent))
            ? "a file and a directory of the same name"
            : undefined;
    const problems = [kindProblem, nameProblem, clash].filter(Boolean);
    if (problems.length > 0) {
      refused.push(`${shown} (${problems.join("; ")})`);
      await skip(size, shown);
      continue;
    }

    for (const parent of parents) directories.add(parent);
    const target = path.join(staging, name);
    if (isDirectory) {
      directories.add(name);
      await fs.mkdir(target, { recursive: true, mode: 0o755 });
      continue;
    }
    files.add(name);
    await fs.mkdir(path.dirname(target), { recursive: true, mode: 0o755 });
    const mode = (headerNumber(block.subarray(100, 108)) ?? 0) & 0o111 ? 0o755 : 0o644;
    // O_EXCL|O_NOFOLLOW: a fresh file in a directory this CLI made, whatever is in the archive.
    const handle = await fs.open(
      target,
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
      mode,
    );
    try {
      const complete = await reader.forward(size, async (piece) => {
        for (let at = 0; at < piece.length;)
          at += (await handle.write(piece, at, piece.length - at)).bytesWritten;
      });
      if (!complete || !(await reader.read(padding(size))))
        throw stop(`the archive ends inside ${shown} (truncated)`);
    } finally {
      await handle.close();
    }
    bytes += size;
  }
  if (refused.length > 0) throw new ArchiveRefused(artifact, refused);
  if (files.size === 0 && !directories.has(artifact)) throw stop(`the archive holds nothing of ${artifact}`);
  return { files: files.size, directories: directories.size, bytes };
}

/** What is at `file` on this machine: undefined when nothing is. */
async function lstatOrNothing(file: string) {
  return fs.lstat(file).catch((error: NodeJS.ErrnoException) => {
    if (error.code === "ENOENT") return undefined;
    throw error;
  });
}

const describeKind = (stat: Awaited<ReturnType<typeof fs.lstat>>) =>
  stat.isSymbolicLink()
    ? "a symbolic link"
    : stat.isDirectory()
      ? "a directory"
      : stat.isFile()
        ? "a file"
        : "neither a file nor a directory";

/**
 * Moves what {@link receiveArchive} staged for `artifact` to `dest/artifact`: new files and directories are
 * moved in, a file of the same name is replaced, anything else there stays. Everything is checked before
 * anything moves: a symbolic link on the way (in `artifact`'s parents or in what is already there) or a
 * file where a directory comes (or the other way round) refuses the whole copy, naming each.
 */
export async function installStaged(staging: string, dest: string, artifact: string): Promise<void> {
  const conflicts: string[] = [];
  const toMake: string[] = [];
  const moves: [from: string, to: string][] = [];
  const parts = artifact.split("/");
  let missing = false;
  for (let i = 1; i < parts.length; i++) {
    const rel = parts.slice(0, i).join("/");
    const here = missing ? undefined : await lstatOrNothing(path.join(dest, rel));
    if (!here) {
      missing = true;
      toMake.push(path.join(dest, rel));
    } else if (!here.isDirectory()) conflicts.push(`${rel} is ${describeKind(here)} here`);
  }
  const walk = async (rel: string): Promise<void> => {
    const staged = await fs.lstat(path.join(staging, rel));
    const there = missing ? undefined : await lstatOrNothing(path.join(dest, rel));
    if (!there) moves.push([path.join(staging, rel), path.join(dest, rel)]);
    else if (staged.isDirectory() && there.isDirectory())
      for (const entry of (await fs.readdir(path.join(staging, rel))).sort()) await walk(`${rel}/${entry}`);
    else if (staged.isFile() && there.isFile()) moves.push([path.join(staging, rel), path.join(dest, rel)]);
    else
      conflicts.push(`${rel} is ${describeKind(there)} here where the sandbox sent ${describeKind(staged)}`);
  };
  if (conflicts.length === 0) await walk(artifact);
  if (conflicts.length > 0)
    throw new ArchiveRefused(
      artifact,
      [],
      `Not written through or over what is here: ${conflicts.map(printableName).join(", ")}`,
    );
  for (const dir of toMake) await fs.mkdir(dir, { mode: 0o755 });
  for (const [from, to] of moves) await fs.rename(from, to);
}

/**
 * The tar stream `source` for `artifact`, checked whole into a fresh directory beside `dest`, then moved to
 * `dest/artifact`. `accepted` runs once the whole stream was taken and before anything moves (the caller
 * checks there that the sandbox's side ended well). The staging directory never outlives the call.
 */
export async function extractArtifact(
  source: AsyncIterable<Buffer | string>,
  dest: string,
  artifact: string,
  options: { limits?: ArchiveLimits; accepted?: () => Promise<void> } = {},
): Promise<Extracted> {
  const staging = await fs.mkdtemp(path.join(dest, ".sbx-artifacts-"));
  try {
    const extracted = await receiveArchive(source, staging, artifact, options.limits);
    await options.accepted?.();
    await installStaged(staging, dest, artifact);
    return extracted;
  } finally {
    await fs.rm(staging, { recursive: true, force: true });
  }
}
