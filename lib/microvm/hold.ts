// A running microVM's home disk held still for one copy (a fork's, runtime/tenants/fork.ts): its guest paused
// by QMP `stop` (its vCPUs stopped, qemu's in-flight disk requests drained and flushed), the copy taken from
// the host, then `cont`. What the guest's page cache still held is not on the disk: the caller has the guest
// `sync` first, and the copy is then as a power cut would leave it (ext4's journal makes it whole: the copy's
// `e2fsck` replays it before a VM boots from it).
import type { WriteHold } from "../host/filesystem-copy.js";
import { microVmFiles } from "./launcher.js";
import { qmpExecute } from "./qmp.js";

/**
 * The watchdog's `cont`, should the holder die with the guest paused: a QMP client in node (no socat here),
 * given the socket; it exits 0 on qemu's answer and 1 on anything else.
 */
const QMP_CONT = `
const net = require("node:net");
const conn = net.createConnection(process.argv[1]);
let buffer = "", step = 0;
conn.setTimeout(5000, () => process.exit(1));
conn.on("error", () => process.exit(1));
conn.on("data", (chunk) => {
  buffer += chunk;
  const lines = buffer.split("\\n");
  buffer = lines.pop();
  for (const line of lines.filter((l) => l.trim())) {
    const message = JSON.parse(line);
    if (message.error) process.exit(1);
    if (step === 0 && message.QMP) { conn.write('{"execute":"qmp_capabilities"}\\n'); step = 1; }
    else if (step === 1 && "return" in message) { conn.write('{"execute":"cont"}\\n'); step = 2; }
    else if (step === 2 && "return" in message) process.exit(0);
  }
});
`;

/** What a guest's run state must be for a hold to pause it: anything else is another operation's pause. */
const RUNNING = "running";

/**
 * The hold of a running microVM's disks: its guest paused for the copy, let go by `cont` (by this process,
 * or by the watchdog should it die). A guest paused by something else (a suspend under way, a cut one) is
 * refused: its `cont` is not this hold's to give.
 */
export function guestPauseHold(stateDir: string): WriteHold {
  const socket = microVmFiles(stateDir).qmp;
  return {
    what: `the microVM ${stateDir}`,
    async hold() {
      const status = ((await qmpExecute(socket, "query-status")) as { status?: string }).status;
      if (status !== RUNNING)
        throw new Error(
          `the microVM ${stateDir} is ${status ?? "in an unknown state"}, not running: another operation holds it (a pause under way); try again when it is done`,
        );
      await qmpExecute(socket, "stop", undefined, 30_000);
    },
    async release() {
      await qmpExecute(socket, "cont");
    },
    watchdogRelease: [process.execPath, "-e", QMP_CONT, socket],
  };
}
