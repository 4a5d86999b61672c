// Fork's pure parts: what may be forked, where a fork's copy is staged, the forks' names, the request's
// validation (API and CLI), and the spec's rule for a home made from a copy.
import { describe, expect, it } from "vitest";
import { TenantSpec } from "../../components/tenant/spec.js";
import { forkCount } from "../../cli/commands/fork.js";
import { ForkProjectBody, forkNames } from "../../runtime/api/projects/fork.js";
import { parseInput } from "../../runtime/api/validation.js";
import { forkableHome, stagedHomePath } from "../../runtime/tenants/fork.js";

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

describe("forkableHome", () => {
  it("is a container's home filesystem, at the one layout the tenant program uses", () => {
    expect(forkableHome(spec())).toEqual({
      ok: true,
      imagePath: `/srv/disks/${ID}/home.img`,
      mountpoint: `/srv/disks/${ID}/home`,
      homeBytes: 1024 * 1024 * 1024,
    });
    expect(stagedHomePath("/srv/disks", ID)).toBe(`/srv/disks/${ID}/home.img.fork`);
  });

  it.each([
    [
      "a home that is a plain volume (no homeBytes)",
      { homeBytes: undefined },
      /is not a filesystem of its own/,
    ],
    [
      "a microVM",
      {
        backend: "microvm",
        microvm: {
          kernel: "/k",
          initrd: "/i",
          accelerator: "tcg",
          stateRoot: "/s",
          platformKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA",
        },
      },
      /runs on microvm: only a container's home can be forked/,
    ],
  ])("refuses %s, naming why", (_what, extra, reason) => {
    const answer = forkableHome(spec(extra));
    expect(answer.ok).toBe(false);
    expect(answer.ok ? "" : answer.reason).toMatch(reason);
  });
});

describe("a spec's homeCopyFrom", () => {
  it("needs a home of its own filesystem", () => {
    expect(spec({ homeCopyFrom: "/srv/disks/x/home.img.fork" }).homeCopyFrom).toBe(
      "/srv/disks/x/home.img.fork",
    );
    const refused = TenantSpec.safeParse({ ...spec(), homeBytes: undefined, homeCopyFrom: "/srv/x.img" });
    expect(refused.success).toBe(false);
    expect(refused.error?.issues).toEqual([
      expect.objectContaining({ path: ["homeCopyFrom"], message: expect.stringMatching(/homeBytes/) }),
    ]);
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
