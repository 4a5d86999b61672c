// The host watchdog's rules (runtime/host/watchdog.ts), on a real TCP service the test starts and stops:
// a part never seen up is the bring-up's, not repaired; one seen up and then down is repaired once per
// sweep and counted; one whose process is alive (only slow) is left alone and not counted; a repair that
// fails is reported as failed; two sweeps at once run as one.
import { createServer, type Server } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { tcpReachable } from "../../lib/host/net.js";
import { HostWatchdog, type HostRepair, type WatchedPart } from "../../runtime/host/watchdog.js";
import { freePort } from "../helpers/host.js";

const servers: Server[] = [];
afterEach(() => {
  for (const server of servers.splice(0)) server.close();
});

async function listen(port: number): Promise<Server> {
  const server = createServer((socket) => socket.end());
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  servers.push(server);
  return server;
}

/** A part that is a TCP service on `port`; `repair` starts it (or throws `failWith`). */
function servicePart(port: number, state: { repairs: number; failWith?: string }): WatchedPart {
  const probe = async () =>
    tcpReachable("127.0.0.1", port, 300).then(
      () => ({ name: "service", ready: true, detail: `port ${port}` }),
      (error: Error) => ({ name: "service", ready: false, detail: error.message }),
    );
  return {
    name: "service",
    probe,
    async repair() {
      state.repairs++;
      if (state.failWith) throw new Error(state.failWith);
      await listen(port);
      return probe();
    },
  };
}

function watchdog(part: WatchedPart, repairs: HostRepair[]) {
  return new HostWatchdog({
    parts: [part],
    intervalMs: 3_600_000,
    log: () => undefined,
    onRepair: (repair) => repairs.push(repair),
  });
}

describe("HostWatchdog", () => {
  it("leaves a part it has never seen up to the bring-up", async () => {
    const state = { repairs: 0 };
    const repairs: HostRepair[] = [];
    const dog = watchdog(servicePart(await freePort(), state), repairs);
    expect(await dog.sweep()).toEqual([]);
    expect(await dog.sweep()).toEqual([]);
    expect(state.repairs).toBe(0);
  });

  it("repairs a part seen up that went down, once, and reports it", async () => {
    const port = await freePort();
    const server = await listen(port);
    const state = { repairs: 0 };
    const repairs: HostRepair[] = [];
    const dog = watchdog(servicePart(port, state), repairs);
    expect(await dog.sweep()).toEqual([]);
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const [first, second] = await Promise.all([dog.sweep(), dog.sweep()]);
    expect(first).toBe(second); // one sweep, joined
    expect(first).toEqual([expect.objectContaining({ part: "service", ok: true, detail: `port ${port}` })]);
    expect(first[0]!.cause).toMatch(/ECONNREFUSED|refused/i);
    expect(state.repairs).toBe(1);
    expect(repairs).toHaveLength(1);
    expect(await dog.sweep()).toEqual([]);
    expect(state.repairs).toBe(1);
  });

  it("leaves a part whose process is alive but slow alone, and does not count it", async () => {
    const port = await freePort();
    const server = await listen(port);
    const state = { repairs: 0 };
    const repairs: HostRepair[] = [];
    const part = servicePart(port, state);
    const dog = watchdog({ ...part, repair: async () => (state.repairs++, undefined) }, repairs);
    await dog.sweep();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    expect(await dog.sweep()).toEqual([]);
    expect([state.repairs, repairs.length]).toEqual([1, 0]);
  });

  it("reports a repair that fails as failed, with why", async () => {
    const port = await freePort();
    const server = await listen(port);
    const state = { repairs: 0, failWith: "the config is gone" };
    const repairs: HostRepair[] = [];
    const dog = watchdog(servicePart(port, state), repairs);
    await dog.sweep();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    expect(await dog.sweep()).toEqual([
      expect.objectContaining({ part: "service", ok: false, detail: "the config is gone" }),
    ]);
    // Still down: tried again on the next sweep.
    expect(await dog.sweep()).toHaveLength(1);
    expect(repairs.map((r) => r.ok)).toEqual([false, false]);
  });
});
