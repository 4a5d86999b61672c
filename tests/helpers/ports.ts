import { mkdirSync } from "node:fs";
import { createServer } from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { holdFileForLife } from "./host-lock.js";

/**
 * The test ports' range: below the kernel's ephemeral range (32768-60999 by default, where every outgoing
 * connection takes its local port and `listen(0)` picks), so a port handed out stays free until the
 * daemon it is for binds it, however long its set-up takes and whatever runs beside it; and below the
 * 27000-29999 band the suite's sandboxes publish their SSH ports in (tests/unit/test-isolation.test.ts).
 */
const FIRST_PORT = 20_000;
const BLOCK_SIZE = 64;
const BLOCKS = Math.floor((27_000 - FIRST_PORT) / BLOCK_SIZE);
const CLAIM_DIR = path.join(os.tmpdir(), "agent-sandbox-test-ports");

/** This process's claimed blocks' ports not yet handed out; one claim at a time. */
const unused: number[] = [];
let claiming: Promise<void> = Promise.resolve();

/**
 * A port nothing listens on, for a daemon a test starts, and no other test process's. Each process claims
 * a block of 64 ports from the range with a flock held for its life (released by the kernel when it
 * ends, even killed), so files running side by side never get the same port, and a port the kernel picked
 * for something else meanwhile (the old way: a kernel-picked port closed and handed on) cannot be taken
 * before the daemon binds it. A port something on the machine already listens on is skipped.
 */
export async function freePort(): Promise<number> {
  const next = claiming.then(async () => {
    for (;;) {
      while (unused.length > 0) {
        const port = unused.shift()!;
        if (await bindable(port)) return port;
      }
      await claimBlock();
    }
  });
  claiming = next.then(
    () => undefined,
    () => undefined,
  );
  return next;
}

async function claimBlock(): Promise<void> {
  mkdirSync(CLAIM_DIR, { recursive: true });
  const start = Math.floor(Math.random() * BLOCKS);
  for (let i = 0; i < BLOCKS; i++) {
    const block = (start + i) % BLOCKS;
    if (!(await holdFileForLife(path.join(CLAIM_DIR, `block-${block}.lock`)))) continue;
    const first = FIRST_PORT + block * BLOCK_SIZE;
    for (let port = first; port < first + BLOCK_SIZE; port++) unused.push(port);
    return;
  }
  throw new Error(
    `every block of test ports in ${FIRST_PORT}-${FIRST_PORT + BLOCKS * BLOCK_SIZE - 1} is claimed`,
  );
}

/** Whether a listener can bind 127.0.0.1:`port` right now. */
function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}
