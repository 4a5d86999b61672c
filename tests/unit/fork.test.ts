// Fork's pure parts: what may be forked, where a fork's copy is staged, the forks' names, the request's
// validation (API and CLI), and the spec's rule for a home made from a copy.
import { promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { TenantSpec } from "../../components/tenant/spec.js";
import { forkCount } from "../../cli/commands/fork.js";
import { ForkProjectBody, forkNames } from "../../runtime/api/projects/fork.js";
import { parseInput } from "../../runtime/api/validation.js";
import { platformBackends } from "../../runtime/backends/registry.js";
import {
  filesystemHome,
  microVmHome,
  stagedHomePath,
  stagedMicroVmHomePath,
} from "../../runtime/tenants/fork.js";

const ID = "4f0c1d2e-3a4b-4c5d-8e6f-7a8b9c0d1e2f";
const spec = (extra: Record<string, unknown> = {}) =>
  TenantSpec.parse({
    projectId: ID,
    ownerId: "owner",
    mode: "local",
    image: "agent-sandbox:latest",
    subnet: "10.1.2.0/24",
    sshHostPort: 2200,
    homeBytes: 1024 * 1024 * 1024,
    host: {
      squidConfigFile: "/srv/squid.conf",
      squidFragmentsDir: "/srv/squid.d",
      backupRoot: "/srv/backups",
      disksRoot: "/srv/disks",
    },
    ...extra,
  });

const microvm = (stateRoot: string) => ({
  backend: "microvm",
  microvm: {
    kernel: "/k",
    initrd: "/i",
    accelerator: "tcg",
    stateRoot,
    platformKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA",
  },
});

describe("what a fork copies", () => {
  it("is a container's home filesystem, at the one layout the tenant program uses", async () => {
    const home = filesystemHome(spec());
    expect(home).toMatchObject({ ok: true, imagePath: `/srv/disks/${ID}/home.img`, homeBytes: 1024 ** 3 });
    expect(home.ok && home.stagedPath("other")).toBe("/srv/disks/other/home.img.fork");
    expect(stagedHomePath("/srv/disks", ID)).toBe(`/srv/disks/${ID}/home.img.fork`);
    // Nothing mounted there: nothing to freeze.
    expect(home.ok && (await home.hold())).toBeUndefined();
  });

  it("refuses a container's home that is a plain volume (no homeBytes), naming why", () => {
    const answer = filesystemHome(spec({ homeBytes: undefined }));
    expect(answer.ok ? "" : answer.reason).toMatch(/is not a filesystem of its own/);
  });

  it("is a microVM's home disk in its state directory; a stopped one's is copied without a pause", async () => {
    const stateRoot = await fs.mkdtemp(path.join(os.tmpdir(), "fork-unit-"));
    try {
      const sync = () => Promise.reject(new Error("a stopped guest is never asked to sync"));
      const missing = await microVmHome(spec(microvm(stateRoot)), sync);
      expect(missing.ok ? "" : missing.reason).toMatch(
        /home disk \(.*home\.ext4\) is not there: nothing to copy/,
      );
      await fs.mkdir(path.join(stateRoot, ID));
      await fs.writeFile(path.join(stateRoot, ID, "home.ext4"), Buffer.alloc(4096));
      // Its size where the spec records none (a microVM made with the default).
      const home = await microVmHome(spec({ ...microvm(stateRoot), homeBytes: undefined }), sync);
      expect(home).toMatchObject({ ok: true, imagePath: `${stateRoot}/${ID}/home.ext4`, homeBytes: 4096 });
      expect(home.ok && home.stagedPath("other")).toBe(`${stateRoot}/other/home.ext4.fork`);
      expect(stagedMicroVmHomePath(stateRoot, "other")).toBe(`${stateRoot}/other/home.ext4.fork`);
      expect(home.ok && (await home.hold())).toBeUndefined();
    } finally {
      await fs.rm(stateRoot, { recursive: true, force: true });
    }
  });

  it("is each backend's: a Pod's home is not an image of this host", () => {
    const backends = platformBackends({
      docker: () => {
        throw new Error("no engine here");
      },
    });
    expect(backends.get("container").forkableHome).toBeDefined();
    expect(backends.get("microvm").forkableHome).toBeDefined();
    expect(backends.get("kubernetes").forkableHome).toBeUndefined();
  });
});

describe("a spec's homeCopyFrom", () => {
  it("needs a home of its own disk (its size), a container's or a microVM's", () => {
    expect(spec({ homeCopyFrom: "/srv/disks/x/home.img.fork" }).homeCopyFrom).toBe(
      "/srv/disks/x/home.img.fork",
    );
    const refused = TenantSpec.safeParse({ ...spec(), homeBytes: undefined, homeCopyFrom: "/srv/x.img" });
    expect(refused.success).toBe(false);
    expect(refused.error?.issues).toEqual([
      expect.objectContaining({ path: ["homeCopyFrom"], message: expect.stringMatching(/homeBytes/) }),
    ]);
    const vm = spec({ ...microvm("/s"), homeCopyFrom: `/s/${ID}/home.ext4.fork` });
    expect(vm.homeCopyFrom).toBe(`/s/${ID}/home.ext4.fork`);
  });
});

describe("forkNames", () => {
  it("numbers the source's name, within a name's 100 characters; takes the names given", () => {
    expect(forkNames("api", 3)).toEqual(["api-fork-1", "api-fork-2", "api-fork-3"]);
    const long = forkNames("x".repeat(100), 10);
    expect(long.map((n) => [...n].length)).toEqual(Array(10).fill(100));
    expect(long[9]!.endsWith("-fork-10")).toBe(true);
    // Counted in characters, as the document counts a name: an emoji is one.
    expect([...forkNames("😀".repeat(100), 1)[0]!]).toHaveLength(100);
    expect(forkNames("api", 2, ["a", "b"])).toEqual(["a", "b"]);
  });
});

describe("the fork's body", () => {
  const parse = (body: unknown) => parseInput(ForkProjectBody, body, "body");
  it.each([
    [{}, {}],
    [{ count: 10 }, { count: 10 }],
    [{ names: ["a", "b"] }, { names: ["a", "b"] }],
    [
      { count: 2, names: [" a ", "b"] },
      { count: 2, names: ["a", "b"] },
    ],
  ])("takes %j", (body, parsed) => {
    expect(parse(body)).toEqual(parsed);
  });

  it.each([
    [{ count: 0 }, "count"],
    [{ count: 11 }, "count"],
    [{ count: 1.5 }, "count"],
    [{ names: [] }, "names"],
    [{ names: Array(11).fill("a") }, "names"],
    [{ names: ["a", " "] }, "names.1"],
    [{ count: 3, names: ["a", "b"] }, "names"],
    [{ count: 1, memory: true }, "memory"],
  ])("refuses %j, naming %s", (body, field) => {
    expect(() => parse(body)).toThrow(expect.objectContaining({ status: 400 }));
    try {
      parse(body);
    } catch (error) {
      expect((error as { details: { field: string }[] }).details.map((d) => d.field)).toContain(field);
    }
  });
});

describe("sbx fork --count", () => {
  it("takes 1 to 10 and refuses anything else as a usage error naming the option", () => {
    expect(forkCount("1")).toBe(1);
    expect(forkCount("10")).toBe(10);
    for (const bad of ["0", "11", "2.5", "-1", "three", ""])
      expect(() => forkCount(bad)).toThrow(/--count must be a whole number from 1 to 10/);
  });
});
