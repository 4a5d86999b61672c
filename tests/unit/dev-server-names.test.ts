// The names of the dev servers the front door finds by itself (lib/dev-server-names.ts) and what the host
// reads of a sandbox's sockets (runtime/sandbox/dev-servers.ts): table tests of the pure parts.
import { execFile } from "node:child_process";
import { createServer, type AddressInfo } from "node:net";
import { promisify } from "node:util";
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
import {
  listeningSockets,
  procNetAddressText,
  SOCKETS_INSIDE_SCRIPT,
  socketsInside,
  worktreeOf,
} from "../../runtime/sandbox/dev-servers.js";

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

describe("what one command inside reads of a sandbox's sockets (a microVM's guest, a Pod)", () => {
  const HEADER =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode";
  const line = (address: string, uid: number, inode: number, state = "0A") =>
    `   0: ${address} 00000000:0000 ${state} 00000000:00000000 00:00000000 00000000  ${uid}        0 ${inode} 1 0 100 0 0 10 0`;
  const output = [
    "@tcp",
    HEADER,
    line("00000000:1435", 1000, 501), // 0.0.0.0:5173, in worktree feat__x
    line("00000000:0BB8", 1000, 502), // 0.0.0.0:3000, the repository's root
    line("0100007F:1F40", 1000, 503), // 127.0.0.1:8000, no owner readable
    line("00000000:0016", 0, 504), // root's sshd on 22
    line("00000000:08AE", 1000, 505), // 2222, the sandbox's own sshd port
    line("00000000:03E7", 1000, 506), // 999: below 1024
    line("0200FA0A:8AE2", 1000, 507, "01"), // an established connection
    "@tcp6",
    HEADER,
    line("00000000000000000000000000000000:0BB9", 1000, 508), // [::]:3001
    "@fd",
    "/proc/41/fd socket:[501]",
    "/proc/41/fd socket:[999]",
    "/proc/42/fd socket:[502]",
    "/proc/43/fd socket:[508]",
    "/proc/44/fd socket:[501]", // a second holder of 501 (a forked worker): the first one found counts
    "@cwd",
    "/proc/41 /home/agent/workspace/app/.worktrees/feat__x/web",
    "/proc/42 /home/agent/workspace/app",
    "/proc/43 /workspace/app/.worktrees/Two",
    "/proc/44 /tmp",
    "",
  ].join("\n");

  it("lists the agent's listening sockets from 1024 up but its sshd's, each with its owner's worktree", () => {
    expect(socketsInside(output)).toEqual([
      { port: 5173, address: "0.0.0.0", worktree: "feat__x" },
      { port: 3000, address: "0.0.0.0" },
      { port: 8000, address: "127.0.0.1" },
      { port: 3001, address: "::", worktree: "two" },
    ]);
  });

  it("carries the address the front door reaches them at (a Pod's, from the cluster) when one is given", () => {
    expect(socketsInside(output, "10.196.0.7").map((server) => server.host)).toEqual(
      Array(4).fill("10.196.0.7"),
    );
  });

  it("finds nothing in output that is not the script's (no sections, a failed read)", () => {
    expect(socketsInside("")).toEqual([]);
    expect(socketsInside(`${HEADER}\n${line("00000000:1435", 1000, 501)}`)).toEqual([]);
  });

  it("the script prints this host's sockets and their owners as the parser reads them", async () => {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    try {
      const { port } = server.address() as AddressInfo;
      const { stdout } = await promisify(execFile)("sh", ["-c", SOCKETS_INSIDE_SCRIPT]);
      const sections = stdout.split(/^@(tcp6?|fd|cwd)$/m);
      expect(sections.filter((_, i) => i % 2 === 1)).toEqual(["tcp", "tcp6", "fd", "cwd"]);
      const tcp = sections[2]!;
      const ours = listeningSockets(`header\n${tcp.trim()}`).find((s) => s.port === port);
      expect(ours).toMatchObject({ address: "127.0.0.1", uid: process.getuid!() });
      expect(sections[6]).toContain(`/proc/${process.pid}/fd socket:[${ours!.inode}]`);
      expect(sections[8]).toContain(`/proc/${process.pid} ${process.cwd()}\n`);
    } finally {
      server.close();
    }
  });
});
