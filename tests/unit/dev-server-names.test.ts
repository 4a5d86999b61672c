// The names of the dev servers the front door finds by itself (lib/dev-server-names.ts) and what the host
// reads of a sandbox's sockets (runtime/sandbox/dev-servers.ts): table tests of the pure parts.
import { describe, expect, it } from "vitest";
import {
  bareSlugAllowed,
  devServerFor,
  devServerNames,
  devServerProjectParts,
  devServerSlug,
  parseDevServerHost,
  reachableAddress,
  worktreeHostLabel,
  type FoundDevServer,
} from "../../lib/dev-server-names.js";
import { listeningSockets, procNetAddressText, worktreeOf } from "../../runtime/sandbox/dev-servers.js";

const D = "sandbox.localhost";

describe("a project's part of the names", () => {
  it.each([
    ["web", "web"],
    ["My Shop (v2)", "my-shop-v2"],
    ["  --Ünïcödé--  ", "unicode"],
    ["日本語", "project"],
    ["a".repeat(80), "a".repeat(40)],
  ])("slug of %j is %j", (name, slug) => expect(devServerSlug(name)).toBe(slug));

  it.each([
    ["web", true],
    ["api", false], // reserved: E2B's control plane on a public domain
    ["0f3a9c2b7d41", false], // a declared route's label
    ["0f3a9c2b7d41-x", false],
    ["abcdef012345", false],
    ["p5173", false], // a port's own name
    ["shop-0f3a9c2b7d41", false], // the suffixed form
    ["9lives", false], // a digit first
    ["shop-2", true],
  ])("%j may stand alone: %j", (slug, allowed) => expect(bareSlugAllowed(slug)).toBe(allowed));

  it("gives the bare slug to the oldest project of it, and every other one its label", () => {
    const parts = devServerProjectParts([
      { id: "bbbbbbbb-0000-4000-8000-000000000002", name: "Web", createdAt: "2026-01-02T00:00:00Z" },
      { id: "aaaaaaaa-0000-4000-8000-000000000001", name: "web", createdAt: "2026-01-01T00:00:00Z" },
      { id: "cccccccc-0000-4000-8000-000000000003", name: "api", createdAt: "2026-01-03T00:00:00Z" },
      // Named like another's suffixed part: it never takes that part (a bare slug never ends in a label).
      {
        id: "dddddddd-0000-4000-8000-000000000004",
        name: "web-bbbbbbbb0000",
        createdAt: "2025-01-01T00:00:00Z",
      },
    ]);
    expect(parts.get("aaaaaaaa-0000-4000-8000-000000000001")).toBe("web");
    expect(parts.get("bbbbbbbb-0000-4000-8000-000000000002")).toBe("web-bbbbbbbb0000");
    expect(parts.get("cccccccc-0000-4000-8000-000000000003")).toBe("api-cccccccc0000");
    expect(parts.get("dddddddd-0000-4000-8000-000000000004")).toBe("web-bbbbbbbb0000-dddddddd0000");
    expect(new Set(parts.values()).size).toBe(4);
    // Deterministic: the same answer whatever order the projects come in.
    const again = devServerProjectParts(
      [...parts.keys()].reverse().map((id) => ({
        id,
        name: { a: "web", b: "Web", c: "api", d: "web-bbbbbbbb0000" }[id[0] as "a" | "b" | "c" | "d"],
        createdAt: { a: "2026-01-01", b: "2026-01-02", c: "2026-01-03", d: "2025-01-01" }[id[0] as "a"],
      })),
    );
    expect(again).toEqual(parts);
  });
});

describe("a dev server's host name", () => {
  it.each([
    [`web.${D}`, { project: "web" }],
    [`WEB.${D}.`, { project: "web" }],
    [`feat--x.web.${D}`, { project: "web", worktree: "feat--x" }],
    [`feat__x.web.${D}`, undefined], // no `_` in a host name
    [`p5173.web.${D}`, { project: "web", port: 5173 }],
    [`p99999.web.${D}`, undefined],
    [`a.b.web.${D}`, undefined],
    [`web.example.com`, undefined],
    [`we_b.${D}`, undefined],
    [`0f3a9c2b7d41.${D}`, undefined], // a declared route's name
    [`one.0f3a9c2b7d41.${D}`, { project: "0f3a9c2b7d41", worktree: "one" }],
    [`x.${"a".repeat(64)}.${D}`, undefined],
    [`-x.web.${D}`, undefined],
    [D, undefined],
  ])("%s is %j", (host, parsed) => expect(parseDevServerHost(host, D)).toEqual(parsed));
});

describe("which server a name stands for", () => {
  const servers: FoundDevServer[] = [
    { port: 5173, address: "127.0.0.1", worktree: "two" },
    { port: 5173, address: "10.0.0.2", worktree: "one" },
    { port: 8080, address: "0.0.0.0" },
    { port: 3000, address: "::" },
  ];
  it("names each as it resolves them, and the two agree", () => {
    const named = devServerNames("web", servers, D);
    expect(named.map(({ server, hosts }) => [server.port, server.address, hosts])).toEqual([
      [3000, "::", [`web.${D}`, `p3000.web.${D}`]],
      [5173, "10.0.0.2", [`one.web.${D}`, `p5173.web.${D}`]],
      [5173, "127.0.0.1", [`two.web.${D}`]],
      [8080, "0.0.0.0", [`p8080.web.${D}`]],
    ]);
    for (const { server, hosts } of named)
      for (const host of hosts) expect(devServerFor(parseDevServerHost(host, D)!, servers)).toBe(server);
  });
  it("names a worktree of a branch with '/' as its declared route is named, and finds it by any of its names", () => {
    const branch: FoundDevServer[] = [{ port: 4000, address: "0.0.0.0", worktree: "feat__x" }];
    expect(devServerNames("web", branch, D)[0]!.hosts).toContain(`feat--x.web.${D}`);
    for (const worktree of ["feat/x", "feat__x", "feat--x", "FEAT/X"])
      expect(devServerFor({ project: "web", worktree }, branch)).toBe(branch[0]);
    expect(worktreeHostLabel("feat/x")).toBe("feat--x");
  });
  it("falls back to a worktree's server for the bare name when nothing runs outside one", () => {
    const only: FoundDevServer[] = [{ port: 4000, address: "0.0.0.0", worktree: "one" }];
    expect(devServerNames("web", only, D)[0]!.hosts).toEqual([`web.${D}`, `one.web.${D}`, `p4000.web.${D}`]);
    expect(devServerFor({ project: "web", worktree: "none" }, only)).toBeUndefined();
  });
  it.each([
    ["0.0.0.0", true],
    ["::", true],
    ["10.1.2.3", true],
    ["127.0.0.1", false],
    ["127.4.5.6", false],
    ["::1", false],
    ["::ffff:127.0.0.1", false],
  ])("%s is reachable from the host: %j", (address, reachable) =>
    expect(reachableAddress(address)).toBe(reachable),
  );
});

describe("what the host reads of the sandbox's sockets", () => {
  it("reads the LISTEN lines of /proc/net/tcp and tcp6, with their owner and inode", () => {
    const tcp = [
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
      "   0: 00000000:1435 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 3427625 1 0 100 0 0 10 0",
      "   1: 0100007F:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3427626 1 0 100 0 0 10 0",
      "   2: 0200FA0A:8AE2 0100FA0A:0016 01 00000000:00000000 00:00000000 00000000  1000        0 3427627 1 0 100 0 0 10 0",
    ].join("\n");
    expect(listeningSockets(tcp)).toEqual([
      { port: 5173, address: "0.0.0.0", uid: 1000, inode: "3427625" },
      { port: 8000, address: "127.0.0.1", uid: 0, inode: "3427626" },
    ]);
    const tcp6 = [
      "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
      "   0: 00000000000000000000000000000000:0BB8 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 11 1 0 100 0 0 10 0",
      "   1: 00000000000000000000000001000000:0BB9 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 12 1 0 100 0 0 10 0",
      "   2: 0000000000000000FFFF00000100007F:0BBA 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 13 1 0 100 0 0 10 0",
    ].join("\n");
    expect(listeningSockets(tcp6).map((s) => [s.port, s.address])).toEqual([
      [3000, "::"],
      [3001, "::1"],
      [3002, "::ffff:127.0.0.1"],
    ]);
    expect(procNetAddressText("0200FA0A")).toBe("10.250.0.2");
  });
  it.each([
    ["/home/agent/workspace/app/.worktrees/feat__x", "feat__x"],
    ["/workspace/app/.worktrees/One/src", "one"],
    ["/home/agent/workspace/app", undefined],
    ["/tmp/.worktrees/x", undefined],
  ])("the worktree of %s is %j", (cwd, worktree) => expect(worktreeOf(cwd)).toBe(worktree));
});
