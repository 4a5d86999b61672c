// The suite's freePort (tests/helpers/ports.ts): files run side by side, each in its own process, and a port
// one of them is handed must be no other's, stay out of the kernel's ephemeral range (where any outgoing
// connection may take it before the daemon binds it), and never be one something already listens on.
import { execFile } from "node:child_process";
import { createServer, type Server } from "node:net";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { freePort } from "../helpers/ports.js";

const exec = promisify(execFile);

/** `count` ports from freePort in a process of its own, which then lives on for `holdMs`. */
async function portsOfAProcess(count: number, holdMs: number): Promise<number[]> {
  const script = `
    import { freePort } from "./tests/helpers/ports.ts";
    const ports = [];
    for (let i = 0; i < ${count}; i++) ports.push(await freePort());
    console.log(JSON.stringify(ports));
    await new Promise((resolve) => setTimeout(resolve, ${holdMs}));
  `;
  const { stdout } = await exec(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
    cwd: REPO_ROOT,
    timeout: 60_000,
  });
  return JSON.parse(stdout.trim().split("\n").at(-1)!) as number[];
}

const listening: Server[] = [];
afterAll(async () => {
  await Promise.all(listening.map((server) => new Promise((resolve) => server.close(resolve))));
});

describe("test ports", () => {
  it("processes side by side get disjoint ports below the ephemeral range, past one block each", async () => {
    const [a, b, c] = await Promise.all([
      portsOfAProcess(70, 3_000),
      portsOfAProcess(70, 3_000),
      portsOfAProcess(70, 3_000),
    ]);
    const all = [...a!, ...b!, ...c!];
    expect(all).toHaveLength(210);
    expect(new Set(all).size, "a port handed to two processes").toBe(210);
    for (const port of all) {
      expect(port).toBeGreaterThanOrEqual(20_000);
      expect(port).toBeLessThan(27_000);
    }
  });

  it("concurrent calls in one process get different ports, and a port something listens on is skipped", async () => {
    const first = await freePort();
    // Something else on the machine takes the next one before it is handed out.
    const taken = first + 1;
    const server = createServer();
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(taken, "127.0.0.1", resolve);
    });
    listening.push(server);
    const ports = await Promise.all(Array.from({ length: 10 }, () => freePort()));
    expect(new Set([first, ...ports]).size).toBe(11);
    expect(ports).not.toContain(taken);
  });
});
