// `sbx sync --artifacts` reads a tar stream that the sandbox alone makes. Fed hostile archives built here
// byte by byte (a hook, a .git/config, links out, '..' names, devices, hard links, a pax name that says
// something else than the header, absurd sizes, truncations), the reader refuses each, names every refused
// member, and leaves the destination (a repository with its .git) exactly as it was; real tar's archives
// (gnu, ustar and pax, long names, modes) are taken whole.
import { execFileSync } from "node:child_process";
import * as fs from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ArchiveRefused,
  artifactPath,
  extractArtifact,
  isGitName,
  type ArchiveLimits,
} from "../../cli/artifacts.js";
import { headerNumber } from "../../cli/tar-reader.js";
import { CliError, EXIT } from "../../cli/errors.js";
import { treeListing } from "../helpers/sbx.js";

// ---- a tar writer of the test's own, which writes whatever it is told ----

interface HeaderSpec {
  readonly type?: string;
  readonly size?: number;
  /** Written as is into the size field (12 bytes), instead of `size` in octal. */
  readonly sizeField?: Buffer;
  readonly mode?: number;
  readonly linkname?: string;
  readonly prefix?: string;
  readonly badChecksum?: boolean;
}

function octal(value: number, length: number): string {
  return `${value.toString(8).padStart(length - 1, "0")}\0`;
}

function header(name: string, spec: HeaderSpec = {}): Buffer {
  const block = Buffer.alloc(512);
  block.write(name, 0, 100, "utf8");
  block.write(octal(spec.mode ?? 0o644, 8), 100, "latin1");
  block.write(octal(1000, 8), 108, "latin1");
  block.write(octal(1000, 8), 116, "latin1");
  if (spec.sizeField) spec.sizeField.copy(block, 124, 0, 12);
  else block.write(octal(spec.size ?? 0, 12), 124, "latin1");
  block.write(octal(1_700_000_000, 12), 136, "latin1");
  block.write(spec.type ?? "0", 156, "latin1");
  block.write(spec.linkname ?? "", 157, 100, "utf8");
  block.write("ustar\0", 257, "latin1");
  block.write("00", 263, "latin1");
  block.write(spec.prefix ?? "", 345, 155, "utf8");
  block.fill(0x20, 148, 156);
  let sum = 0;
  for (const byte of block) sum += byte;
  block.write(octal(spec.badChecksum ? sum + 1 : sum, 7), 148, "latin1");
  block[155] = 0x20;
  return block;
}

const pad = (data: Buffer) => Buffer.concat([data, Buffer.alloc((512 - (data.length % 512)) % 512)]);

/** A member with its data. */
function member(name: string, data: string | Buffer = "", spec: HeaderSpec = {}): Buffer {
  const bytes = Buffer.isBuffer(data) ? data : Buffer.from(data);
  return Buffer.concat([header(name, { size: bytes.length, ...spec }), pad(bytes)]);
}

function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  let length = body.length + 1;
  while (`${length}${body}`.length !== length) length += 1;
  return `${length}${body}`;
}

/** A pax extended header ('x', or 'g' for a global one). */
function pax(records: Record<string, string>, type = "x"): Buffer {
  const data = Buffer.from(
    Object.entries(records)
      .map(([k, v]) => paxRecord(k, v))
      .join(""),
  );
  return member("PaxHeaders/x", data, { type });
}

const END = Buffer.alloc(1024);
const archive = (...parts: Buffer[]) => Buffer.concat([...parts, END]);

/** The archive as a stream cut into pieces of `piece` bytes (a reader must not care where a chunk ends). */
async function* streamOf(bytes: Buffer, piece = 4096): AsyncGenerator<Buffer> {
  for (let at = 0; at < bytes.length; at += piece) yield bytes.subarray(at, at + piece);
}

// ---- the destination: a repository with a .git, and what is in it ----

let root: string;
let n = 0;
beforeAll(async () => {
  root = await fs.mkdtemp(path.join(os.tmpdir(), "sbx-artifacts-"));
});
afterAll(async () => {
  await fs.rm(root, { recursive: true, force: true });
});

/** A fresh destination: a git repository with a hook, a config, a dist/ of its own, and a directory beside it. */
async function destination(): Promise<{ repo: string; outside: string }> {
  const base = path.join(root, `case-${n++}`);
  const repo = path.join(base, "repo");
  const outside = path.join(base, "outside");
  await fs.mkdir(outside, { recursive: true });
  await fs.writeFile(path.join(outside, "secret.txt"), "the developer's\n");
  await fs.mkdir(repo, { recursive: true });
  execFileSync("git", ["init", "-q", repo]);
  await fs.writeFile(path.join(repo, ".git", "hooks", "pre-commit"), "#!/bin/sh\nexit 0\n", { mode: 0o755 });
  await fs.mkdir(path.join(repo, "dist"));
  await fs.writeFile(path.join(repo, "dist", "kept.js"), "kept\n");
  await fs.writeFile(path.join(repo, "README.md"), "# app\n");
  return { repo, outside };
}

const listing = treeListing;

const LIMITS: ArchiveLimits = { maxBytes: 1 << 20, maxMembers: 100 };

async function refusal(run: () => Promise<unknown>): Promise<ArchiveRefused> {
  try {
    await run();
  } catch (error) {
    if (error instanceof ArchiveRefused) return error;
    throw error;
  }
  throw new Error("not refused");
}

/** Feeds `bytes` for `artifact` into a fresh repository; returns the refusal, after checking nothing changed. */
async function refusedWhole(bytes: Buffer, artifact = "dist", limits = LIMITS): Promise<ArchiveRefused> {
  const { repo } = await destination();
  const base = path.dirname(repo);
  const before = await listing(base);
  const refused = await refusal(() => extractArtifact(streamOf(bytes, 777), repo, artifact, { limits }));
  expect(refused.code).toBe(EXIT.refused);
  expect(await listing(base)).toEqual(before);
  return refused;
}

describe("hostile archives from the sandbox", () => {
  const ok = member("dist/app.js", "built\n");

  it.each([
    [
      "a hook",
      member(".git/hooks/pre-commit", "#!/bin/sh\ntouch /tmp/pwned\n", { mode: 0o755 }),
      /\.git\/hooks\/pre-commit \(inside a \.git directory\)/,
    ],
    [
      "a .git/config with core.fsmonitor",
      member(".git/config", "[core]\n\tfsmonitor = touch /tmp/pwned\n"),
      /\.git\/config \(inside a \.git directory\)/,
    ],
    [
      "a .git inside the artifact",
      member("dist/.git/config", "[core]\n\tfsmonitor = x\n"),
      /dist\/\.git\/config \(inside a \.git directory\)/,
    ],
    [
      "a .GIT in another case",
      member("dist/.GIT/hooks/post-checkout", "x"),
      /dist\/\.GIT\/hooks\/post-checkout \(inside a \.git directory\)/,
    ],
    ["a .git with a trailing dot", member("dist/.git./config", "x"), /inside a \.git directory/],
    [
      "a .git with an HFS+-ignored code point",
      member("dist/.g\u200cit/config", "x"),
      /inside a \.git directory/,
    ],
    ["git's 8.3 short name", member("dist/GIT~1/config", "x"), /inside a \.git directory/],
    [
      "a symbolic link out of the repository",
      member("dist/link", "", { type: "2", linkname: "../../outside" }),
      /dist\/link \(a symbolic link to \.\.\/\.\.\/outside\)/,
    ],
    [
      "a symbolic link to /",
      member("dist/root", "", { type: "2", linkname: "/" }),
      /dist\/root \(a symbolic link to \/\)/,
    ],
    [
      "a hard link to a file outside",
      member("dist/passwd", "", { type: "1", linkname: "/etc/passwd" }),
      /dist\/passwd \(a hard link to \/etc\/passwd\)/,
    ],
    [
      "a hard link inside the artifact",
      member("dist/again.js", "", { type: "1", linkname: "dist/app.js" }),
      /dist\/again\.js \(a hard link to dist\/app\.js\)/,
    ],
    ["a character device", member("dist/null", "", { type: "3" }), /dist\/null \(a character device\)/],
    ["a block device", member("dist/sda", "", { type: "4" }), /dist\/sda \(a block device\)/],
    ["a FIFO", member("dist/fifo", "", { type: "6" }), /dist\/fifo \(a FIFO\)/],
    [
      "a '..' name",
      member("dist/../../outside/secret.txt", "overwritten\n"),
      /dist\/\.\.\/\.\.\/outside\/secret\.txt \(a '\.\.' component\)/,
    ],
    ["an absolute name", member("/etc/cron.d/pwned", "x"), /\/etc\/cron\.d\/pwned \(an absolute path\)/],
    ["a name outside the artifact", member("src/index.js", "x"), /src\/index\.js \(outside dist\)/],
    [
      "a name that only starts like the artifact",
      member("dist-evil/x", "x"),
      /dist-evil\/x \(outside dist\)/,
    ],
    [
      "a ustar prefix that leaves",
      member("x", "x", { prefix: "dist/../.." }),
      /dist\/\.\.\/\.\.\/x \(a '\.\.' component\)/,
    ],
    ["a './' name", member("./dist/app.js", "x"), /\.\/dist\/app\.js \(not a plain relative path\)/],
    ["an empty component", member("dist//app.js", "x"), /dist\/\/app\.js \(not a plain relative path\)/],
    [
      "a control character in a name",
      member("dist/\u001b]52;c;cHduZWQ=\u0007", "x"),
      /dist\/\\x1b\]52;c;cHduZWQ=\\x07 \(a control character in its name\)/,
    ],
    [
      "an unknown member type",
      member("dist/thing", "x", { type: "Z" }),
      /dist\/thing \(an unknown member type "Z"\)/,
    ],
    ["a sparse file", member("dist/sparse", "", { type: "S" }), /dist\/sparse \(a sparse file\)/],
    [
      "the same file twice",
      Buffer.concat([member("dist/app.js", "one"), member("dist/app.js", "two")]),
      /dist\/app\.js \(a second member of that name\)/,
    ],
    [
      "a file where a directory was",
      Buffer.concat([member("dist/sub", "file"), member("dist/sub/x", "y")]),
      /dist\/sub\/x \(a file and a directory of the same name\)/,
    ],
    // The classic two-reader trick: the header says one name, its pax record another; the pax one counts.
    [
      "a pax path that leaves while the header's name does not",
      Buffer.concat([pax({ path: "../../outside/secret.txt" }), member("dist/innocent.js", "x")]),
      /\.\.\/\.\.\/outside\/secret\.txt \(a '\.\.' component\)/,
    ],
    [
      "a pax linkpath on a symbolic link",
      Buffer.concat([pax({ linkpath: "/home" }), member("dist/home", "", { type: "2", linkname: "ok" })]),
      /dist\/home \(a symbolic link to \/home\)/,
    ],
    [
      "a GNU long name into .git",
      Buffer.concat([
        member("././@LongLink", `${".git/hooks/".padEnd(120, "x")}\0`, { type: "L" }),
        member("dist/short", "x"),
      ]),
      /\.git\/hooks\/x{109} \(inside a \.git directory\)/,
    ],
    [
      "a GNU long link name",
      Buffer.concat([
        member("././@LongLink", `${"/".padEnd(150, "a")}\0`, { type: "K" }),
        member("dist/l", "", { type: "2", linkname: "x" }),
      ]),
      /dist\/l \(a symbolic link to \/a{149}\)/,
    ],
  ] as const)("refuses %s, naming it, and writes nothing", async (_what, hostile, named) => {
    const refused = await refusedWhole(archive(ok, hostile, ok.subarray(0, 0)));
    expect(refused.message).toMatch(named);
    expect(refused.message).toMatch(
      /^refused what the sandbox sent for dist; nothing of it was written here\. Refused members: /,
    );
    // The good member beside it was not written either: the archive is taken whole or not at all.
  });

  it("names every refused member of one archive, and counts past twenty", async () => {
    const many = Array.from({ length: 25 }, (_, i) => member(`dist/l${i}`, "", { type: "2", linkname: "/" }));
    const refused = await refusedWhole(
      archive(member(".git/hooks/pre-commit", "x"), ...many, member("dist/app.js", "x")),
    );
    expect(refused.members).toHaveLength(26);
    expect(refused.message).toMatch(
      /\.git\/hooks\/pre-commit \(inside a \.git directory\), dist\/l0 \(a symbolic link to \/\)/,
    );
    expect(refused.message).toMatch(/, and 6 more$/);
  });

  it.each([
    [
      "a bad checksum",
      archive(member("dist/app.js", "x", { badChecksum: true })),
      /header 1 has a bad checksum/,
    ],
    [
      "no end-of-archive blocks",
      Buffer.concat([member("dist/app.js", "built\n")]),
      /ends before its end-of-archive blocks \(truncated\)/,
    ],
    [
      "a stream cut inside a file's data",
      member("dist/app.js", "x".repeat(2000)).subarray(0, 1000),
      /ends inside dist\/app\.js \(truncated\)/,
    ],
    ["a stream cut inside a header", member("dist/app.js", "x").subarray(0, 300), /truncated/],
    [
      "a lone zero block",
      Buffer.concat([member("dist/app.js", "x"), Buffer.alloc(512)]),
      /a lone zero block/,
    ],
    [
      "data after the end of the archive",
      Buffer.concat([archive(member("dist/app.js", "x")), member(".git/config", "x")]),
      /data after the end of the archive/,
    ],
    [
      "endless zeros after the end of the archive",
      Buffer.concat([archive(member("dist/app.js", "x")), Buffer.alloc(2 << 20)]),
      /data after the end of the archive/,
    ],
    [
      "a size over the limit (octal, 8 GiB)",
      archive(member("dist/big", "", { sizeField: Buffer.from("77777777777\0") })),
      /header 1 declares 8589934591 bytes, over the limit of 1048576 bytes/,
    ],
    [
      "an absurd base-256 size",
      archive(member("dist/big", "", { sizeField: Buffer.from([0x80, ...Array(11).fill(0xff)]) })),
      /header 1 declares Infinity bytes, over the limit/,
    ],
    [
      "a negative base-256 size",
      archive(member("dist/neg", "", { sizeField: Buffer.alloc(12, 0xff) })),
      /header 1 has a size that is not a number/,
    ],
    [
      "a size that is not a number",
      archive(member("dist/x", "", { sizeField: Buffer.from("12x4\0\0\0\0\0\0\0\0") })),
      /header 1 has a size that is not a number/,
    ],
    [
      "a pax size over the limit",
      archive(pax({ size: "99999999999" }), member("dist/big", "")),
      /header 2 declares 99999999999 bytes, over the limit/,
    ],
    [
      "a malformed pax record",
      archive(member("PaxHeaders/x", "99 path=dist/x\n", { type: "x" }), member("dist/x", "")),
      /a pax record whose length does not match/,
    ],
    [
      "a global pax header that names every member",
      archive(pax({ path: ".git/config" }, "g"), member("dist/app.js", "x")),
      /a global pax header sets path for every member/,
    ],
    [
      "GNU sparse pax records",
      archive(pax({ "GNU.sparse.map": "0,10" }), member("dist/s", "x")),
      /a sparse file/,
    ],
    [
      "a directory with data",
      archive(member("dist/", "xxxx", { type: "5" })),
      /dist\/ is a directory with 4 bytes of data/,
    ],
    [
      "a symbolic link with data",
      archive(member("dist/l", "xxxx", { type: "2", linkname: "/" })),
      /dist\/l is a symbolic link with 4 bytes of data/,
    ],
    [
      "more members than the limit",
      archive(...Array.from({ length: 101 }, (_, i) => member(`dist/f${i}`, "x"))),
      /more than 100 members/,
    ],
    ["an archive of nothing", END, /the archive holds nothing of dist/],
    ["not an archive at all", Buffer.from("Permission denied\n".repeat(40)), /bad checksum|truncated/],
    ["an empty stream", Buffer.alloc(0), /truncated/],
  ] as const)("stops at %s and writes nothing", async (_what, bytes, problem) => {
    const refused = await refusedWhole(bytes, "dist", LIMITS);
    expect(refused.message).toMatch(problem);
  });

  it("stops at a pax header over 1 MiB, whatever the limit for the whole archive", async () => {
    const refused = await refusedWhole(
      archive(member("PaxHeaders/x", "", { type: "x", size: (1 << 20) + 1 })),
      "dist",
      { maxBytes: 4 << 20, maxMembers: 100 },
    );
    expect(refused.message).toMatch(/header 1 \('x'\) holds 1048577 bytes, over 1048576/);
  });

  it("counts every member's data, kept or not, against the limit", async () => {
    const refused = await refusedWhole(
      archive(member("src/a", "x".repeat(600_000)), member("dist/b", "x".repeat(600_000))),
    );
    expect(refused.message).toMatch(/header 2 declares 600000 bytes, over the limit of 1048576 bytes/);
  });
});

describe("what is already in the destination", () => {
  it("is never written through: a symbolic link where the artifact or one of its parents goes refuses the copy", async () => {
    const { repo, outside } = await destination();
    await fs.rm(path.join(repo, "dist"), { recursive: true });
    await fs.symlink(outside, path.join(repo, "dist"));
    await fs.symlink(outside, path.join(repo, "build"));
    const base = path.dirname(repo);
    const before = await listing(base);
    for (const [artifact, bytes, named] of [
      [
        "dist",
        archive(member("dist/secret.txt", "overwritten\n")),
        /dist is a symbolic link here where the sandbox sent a directory/,
      ],
      ["build/out", archive(member("build/out/x", "x")), /build is a symbolic link here/],
    ] as const) {
      const refused = await refusal(() =>
        extractArtifact(streamOf(bytes), repo, artifact, { limits: LIMITS }),
      );
      expect(refused.message).toMatch(named);
      expect(refused.code).toBe(EXIT.refused);
    }
    expect(await listing(base)).toEqual(before);
  });

  it("keeps a directory where the sandbox sent a file, and a file where it sent a directory, naming both", async () => {
    const { repo } = await destination();
    await fs.mkdir(path.join(repo, "dist", "app.js"));
    await fs.writeFile(path.join(repo, "dist", "sub"), "a file\n");
    const before = await listing(path.dirname(repo));
    const refused = await refusal(() =>
      extractArtifact(
        streamOf(archive(member("dist/app.js", "x"), member("dist/sub/y", "y"), member("dist/new", "n"))),
        repo,
        "dist",
        { limits: LIMITS },
      ),
    );
    expect(refused.message).toMatch(
      /dist\/app\.js is a directory here where the sandbox sent a file, dist\/sub is a file here where the sandbox sent a directory/,
    );
    expect(await listing(path.dirname(repo))).toEqual(before);
  });
});

describe("archives tar makes", () => {
  it.each(["gnu", "ustar", "pax", "posix"])(
    "--format=%s: files, modes, an empty directory and long names come across as they are",
    async (format) => {
      const source = await fs.mkdtemp(path.join(root, "source-"));
      const long = `${"long-directory-".repeat(4)}/${"nested-".repeat(8)}/${"file-".repeat(15)}.js`;
      const files: Record<string, [string, number]> = {
        "dist/app.js": ["built\n", 0o644],
        "dist/bin/run": ["#!/bin/sh\necho run\n", 0o755],
        "dist/with space and ü.txt": ["unicode\n", 0o644],
        [`dist/${long}`]: ["long\n", 0o644],
        "dist/setuid": ["not kept setuid\n", 0o4755],
      };
      for (const [file, [content, mode]] of Object.entries(files)) {
        await fs.mkdir(path.dirname(path.join(source, file)), { recursive: true });
        await fs.writeFile(path.join(source, file), content);
        await fs.chmod(path.join(source, file), mode);
      }
      await fs.mkdir(path.join(source, "dist", "empty"));
      const bytes = execFileSync("tar", ["-C", source, `--format=${format}`, "-cf", "-", "--", "dist"], {
        maxBuffer: 1 << 24,
      });
      const { repo } = await destination();
      const gitBefore = await listing(path.join(repo, ".git"));
      // Chunks of one byte, then of a header and one: where a chunk ends is no matter.
      for (const piece of [1, 513]) {
        const extracted = await extractArtifact(streamOf(bytes, piece), repo, "dist", { limits: LIMITS });
        expect(extracted.files).toBe(5);
        expect(extracted.bytes).toBe(
          Object.values(files).reduce((sum, [c]) => sum + Buffer.byteLength(c), 0),
        );
      }
      for (const [file, [content, mode]] of Object.entries(files)) {
        expect(await fs.readFile(path.join(repo, file), "utf8")).toBe(content);
        // Only the executable bits travel; setuid and setgid never do.
        const got = (await fs.stat(path.join(repo, file))).mode;
        expect(got & 0o7000).toBe(0);
        expect(got & 0o100).toBe(mode & 0o100);
      }
      expect((await fs.stat(path.join(repo, "dist", "empty"))).isDirectory()).toBe(true);
      // What was there and not in the archive stays; nothing else was touched.
      expect(await fs.readFile(path.join(repo, "dist", "kept.js"), "utf8")).toBe("kept\n");
      expect(await listing(path.join(repo, ".git"))).toEqual(gitBefore);
      expect((await fs.readdir(repo)).filter((e) => e.startsWith(".sbx-artifacts-"))).toEqual([]);
    },
  );

  it("takes a single file, and a path under directories that are not there yet", async () => {
    const source = await fs.mkdtemp(path.join(root, "source-"));
    await fs.mkdir(path.join(source, "a", "b"), { recursive: true });
    await fs.writeFile(path.join(source, "a", "b", "c.txt"), "c\n");
    const { repo } = await destination();
    for (const artifact of ["a/b/c.txt", "a/b"]) {
      const bytes = execFileSync("tar", ["-C", source, "-cf", "-", "--", artifact]);
      await extractArtifact(streamOf(bytes), repo, artifact, { limits: LIMITS });
      expect(await fs.readFile(path.join(repo, "a", "b", "c.txt"), "utf8")).toBe("c\n");
    }
  });
});

describe("the paths --artifacts takes", () => {
  it.each([
    ["dist", "dist"],
    ["./dist/", "dist"],
    [".worktrees/wt-a/dist", ".worktrees/wt-a/dist"],
    ["build/.gitkeep", "build/.gitkeep"],
  ])("%s is %s", (raw, canonical) => {
    expect(artifactPath(raw)).toBe(canonical);
  });

  it.each([
    ["../../etc", /must be a path inside the repository/],
    ["/etc", /must be a path inside the repository/],
    [".", /must be a path inside the repository/],
    ["dist;rm", /must be a path inside the repository/],
    [".git", /nothing in a \.git directory is copied back/],
    [".git/hooks", /nothing in a \.git directory is copied back/],
    ["sub/.GIT/config", /nothing in a \.git directory is copied back/],
    ["sub/.git./config", /nothing in a \.git directory is copied back/],
  ])("%s is refused", (raw, message) => {
    let thrown: unknown;
    try {
      artifactPath(raw);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(CliError);
    expect(thrown).toMatchObject({ code: EXIT.badInput });
    expect((thrown as Error).message).toMatch(message);
  });

  it("knows .git in its disguises and nothing else", () => {
    for (const name of [
      ".git",
      ".GIT",
      ".Git.",
      ".git ",
      ".git. .",
      "git~1",
      "GIT~1",
      ".g\u200dit",
      "\ufeff.git",
    ])
      expect(isGitName(name), name).toBe(true);
    for (const name of [".gitignore", ".gitkeep", "git", ".git-x", "x.git", ".github"])
      expect(isGitName(name), name).toBe(false);
  });
});

describe("header numbers", () => {
  it.each([
    [Buffer.from("0000644\0"), 0o644],
    [Buffer.from("   644 \0"), 0o644],
    [Buffer.from("\0\0\0\0\0\0\0\0"), 0],
    [Buffer.from([0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]), 256],
    [Buffer.from("8\0"), undefined],
    [Buffer.from("-1\0"), undefined],
    [Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]), undefined],
  ] as const)("%j is %s", (raw, value) => {
    expect(headerNumber(raw)).toBe(value);
  });
});
