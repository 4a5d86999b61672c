import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { localCommandHandler, LocalCommandInputs, runCommand } from "../../provider/command/local-command.js";
import { changedKeys, createProvider, resourceTypeOfUrn } from "../../provider/handler.js";
import { cidrContains, formatIPv4, parseCidr, parseIPv4 } from "../../lib/ipv4.js";
import { DockerNetworkInputs } from "../../provider/resources/docker-network.js";
import { hostFileHandler, HostFileInputs } from "../../provider/resources/host-file.js";

const urn = (type: string) => `urn:pulumi:dev::agent-sandbox::${type}::name`;

describe("provider dispatch", () => {
  it.each([
    [urn("sandbox:host:File"), "sandbox:host:File"],
    [urn("sandbox:tenant:Sandbox$sandbox:docker:Network"), "sandbox:docker:Network"],
  ])("resourceTypeOfUrn(%s)", (input, type) => expect(resourceTypeOfUrn(input)).toBe(type));

  it("rejects malformed URNs and unknown types by name", async () => {
    expect(() => resourceTypeOfUrn("urn:pulumi:dev")).toThrow(/malformed URN/);
    const provider = createProvider("0.0.0", { "sandbox:host:File": hostFileHandler });
    await expect(provider.check!(urn("sandbox:nope:Thing"), {}, {})).rejects.toThrow(
      /unknown resource type sandbox:nope:Thing; this plugin serves sandbox:host:File/,
    );
  });

  it("check returns failures naming each bad property", async () => {
    const provider = createProvider("0.0.0", {
      "sandbox:docker:Network": { inputs: DockerNetworkInputs } as never,
    });
    const result = await provider.check!(
      urn("sandbox:docker:Network"),
      {},
      {
        name: "-bad",
        subnet: "10.0.0.1/24",
        gateway: "10.0.1.1",
        bridgeName: "a-name-longer-than-15",
      },
    );
    expect(result.failures?.map((f) => f.property).sort()).toEqual(["bridgeName", "name", "subnet"]);
  });

  it("check names a gateway outside its subnet", async () => {
    const parsed = DockerNetworkInputs.safeParse({
      name: "n",
      subnet: "10.0.0.0/24",
      gateway: "10.0.1.1",
      bridgeName: "b",
    });
    expect(parsed.success).toBe(false);
    expect(parsed.error?.issues[0]?.path).toEqual(["gateway"]);
  });

  it("changedKeys compares values deeply and ignores key order", () => {
    const olds = { a: { x: 1, y: [1, 2] }, b: "same" };
    expect(changedKeys(olds, { a: { y: [1, 2], x: 1 }, b: "same" }, ["a", "b"])).toEqual([]);
    expect(changedKeys(olds, { a: { x: 1, y: [2, 1] }, b: "other" }, ["a", "b"])).toEqual(["a", "b"]);
  });
});

describe("ipv4", () => {
  it.each([
    ["10.100.0.0/24", { network: parseIPv4("10.100.0.0"), prefix: 24 }],
    ["0.0.0.0/0", { network: 0, prefix: 0 }],
    ["10.100.0.1/24", undefined],
    ["10.100.0.0/33", undefined],
    ["10.100.0/24", undefined],
    ["10.100.0.256/32", undefined],
    ["010.1.1.1/32", undefined],
  ])("parseCidr(%s)", (text, expected) => expect(parseCidr(text)).toEqual(expected));

  it("formats what it parses and bounds a subnet exactly", () => {
    expect(formatIPv4(parseIPv4("192.168.255.1")!)).toBe("192.168.255.1");
    const cidr = parseCidr("10.1.2.0/24")!;
    expect(cidrContains(cidr, parseIPv4("10.1.2.255")!)).toBe(true);
    expect(cidrContains(cidr, parseIPv4("10.1.3.0")!)).toBe(false);
  });
});

describe("sandbox:host:File", () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "host-file-"));
  const inputs = (content: string, mode = "640") =>
    HostFileInputs.parse({ path: path.join(dir, "a", "f.conf"), content, mode });

  it("validates paths and modes", () => {
    expect(HostFileInputs.safeParse({ path: "relative", content: "" }).success).toBe(false);
    expect(HostFileInputs.safeParse({ path: "/a/../b", content: "" }).success).toBe(false);
    expect(HostFileInputs.safeParse({ path: "/a", content: "", mode: "999" }).success).toBe(false);
    expect(HostFileInputs.parse({ path: "/a", content: "" }).mode).toBe("0644");
  });

  it("creates, reads back, detects drift, updates and deletes", async () => {
    const { id, outs } = await hostFileHandler.create(inputs("one\n"));
    expect(await fs.readFile(id, "utf8")).toBe("one\n");
    expect((await fs.stat(id)).mode & 0o777).toBe(0o640);
    expect(await hostFileHandler.read(id, outs)).toEqual(outs);
    expect(await hostFileHandler.diff(id, outs, inputs("one\n"))).toMatchObject({ changes: false });

    await fs.writeFile(id, "tampered\n");
    const observed = await hostFileHandler.read(id, outs);
    expect(observed?.content).toBe("tampered\n");
    expect(await hostFileHandler.diff(id, observed!, inputs("one\n"))).toMatchObject({
      changes: true,
      replaces: [],
    });

    const updated = await hostFileHandler.update(id, observed!, inputs("two\n", "600"));
    expect(await fs.readFile(id, "utf8")).toBe("two\n");
    expect((await fs.stat(id)).mode & 0o777).toBe(0o600);
    expect((await fs.readdir(path.dirname(id))).filter((f) => f.endsWith(".tmp"))).toEqual([]);

    await hostFileHandler.delete(id, updated);
    expect(existsSync(id)).toBe(false);
    expect(await hostFileHandler.read(id, updated)).toBeUndefined();
    await hostFileHandler.delete(id, updated); // already gone: no error
  });

  it("moving the file is a replacement", async () => {
    const olds = { ...inputs("x"), sha256: "" };
    const diff = await hostFileHandler.diff("", olds, { ...inputs("x"), path: path.join(dir, "other") });
    expect(diff.replaces).toEqual(["path"]);
  });

  it("never overwrites a foreign file on create, but adopts an identical one", async () => {
    const target = path.join(dir, "foreign.conf");
    await fs.writeFile(target, "theirs\n");
    await expect(
      hostFileHandler.create(HostFileInputs.parse({ path: target, content: "ours\n" })),
    ).rejects.toThrow(/foreign\.conf already exists with other content/);
    expect(await fs.readFile(target, "utf8")).toBe("theirs\n");
    await expect(
      hostFileHandler.create(HostFileInputs.parse({ path: target, content: "theirs\n" })),
    ).resolves.toMatchObject({ id: target });
  });
});

describe("command:local:Command", () => {
  it("captures output without the trailing newline, with environment, stdin and dir", async () => {
    const result = await runCommand('printf "%s %s\\n" "$GREETING" "$(pwd)"; cat; echo oops >&2', {
      environment: { GREETING: "hi" },
      stdin: "piped",
      dir: os.tmpdir(),
    });
    expect(result).toEqual({ stdout: `hi ${os.tmpdir()}\npiped`.replace(/\n$/, ""), stderr: "oops" });
  });

  it("fails naming the exit code and stderr", async () => {
    await expect(runCommand("echo broken >&2; exit 3", {})).rejects.toThrow(
      /exited with code 3.*\n.*\nstderr: broken/,
    );
  });

  it("a command that exits without reading its stdin reports its own result, not EPIPE (issue 22)", async () => {
    // In a process of its own: an unhandled stream error would crash it (vitest would only report it
    // beside passing tests). 8 MiB is more than a pipe holds, so the write outlives the child.
    const script = `
      import { runCommand } from "./provider/command/local-command.ts";
      const stdin = "x".repeat(8 << 20);
      const ok = await runCommand("exit 0", { stdin });
      const failed = await runCommand("echo gone >&2; exit 3", { stdin }).catch((e) => e.message);
      console.log(JSON.stringify({ ok, failed }));`;
    const { stdout } = await promisify(execFile)(
      process.execPath,
      ["--import", "tsx", "--input-type=module", "-e", script],
      {
        cwd: path.resolve(import.meta.dirname, "../.."),
      },
    );
    const result = JSON.parse(stdout) as { ok: unknown; failed: string };
    expect(result.ok).toEqual({ stdout: "", stderr: "" });
    expect(result.failed).toMatch(/exited with code 3.*\n.*\nstderr: gone/);
  });

  it("update runs `update` (else `create`) with the previous output in the environment; triggers replace", async () => {
    const first = await localCommandHandler.create(LocalCommandInputs.parse({ create: "echo v1" }));
    expect(first.outs.stdout).toBe("v1");
    const news = LocalCommandInputs.parse({ create: "echo v1", update: 'echo "was $PULUMI_COMMAND_STDOUT"' });
    expect(await localCommandHandler.diff(first.id, first.outs, news)).toMatchObject({
      changes: true,
      replaces: [],
    });
    expect((await localCommandHandler.update(first.id, first.outs, news)).stdout).toBe("was v1");
    const retriggered = LocalCommandInputs.parse({ create: "echo v1", triggers: [2] });
    expect((await localCommandHandler.diff(first.id, first.outs, retriggered)).replaces).toEqual([
      "triggers",
    ]);
  });

  it("runs `delete` on delete and refuses asset capture it does not implement", async () => {
    const marker = path.join(mkdtempSync(path.join(os.tmpdir(), "cmd-")), "deleted");
    const created = await localCommandHandler.create(LocalCommandInputs.parse({ delete: `touch ${marker}` }));
    await localCommandHandler.delete(created.id, created.outs);
    expect(existsSync(marker)).toBe(true);
    expect(LocalCommandInputs.safeParse({ assetPaths: ["*.txt"] }).error?.issues[0]?.message).toMatch(
      /not supported/,
    );
  });
});
