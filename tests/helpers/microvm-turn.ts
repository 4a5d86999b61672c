import { promises as fs } from "node:fs";
import * as os from "node:os";
import { afterAll, beforeAll } from "vitest";
import { hostLock, type HostLock } from "./host-lock.js";

/**
 * How long a file may wait for its turn at the microVMs: the two longest files that boot them (the attack
 * table's microVM part and microvm-tenant, 27 and 19 minutes beside other files on CI's slower machines,
 * session 43), less what the planned order starts it behind them, and room to spare.
 */
export const MICROVM_TURN_WAIT_MS = 3_600_000;

/**
 * The scheduling priority (nice) the turn's holder gives its guests' qemu threads: above the other files'
 * processes, so an emulated guest keeps its core while they wait on engines and containers.
 */
export const GUEST_NICE = -10;

/**
 * Registers, in the calling file or describe, a turn at this machine's microVMs: from before its first hook
 * to after its last, no other test file boots a microVM guest. Here they run emulated (TCG: nested KVM hangs
 * on these machines), and each busy guest is a whole core: two files' guests beside each other and the
 * container files on two cores starved everything of CPU (sshd handshakes past their timeouts, guests that
 * stopped answering; CI's run of session 21). While it holds the turn, the file's guests run at a higher
 * priority than the other files (`GUEST_NICE`): the microVM files follow one another, so their guests are
 * the run's longest chain, and beside three other files on two cores a guest's boot took minutes where it
 * takes half of one alone (CI, session 43: sshd not answering within 180 s). Call it before the file's own
 * `beforeAll`: its hooks then run inside the turn.
 */
export function microVmTurn(): void {
  let turn: HostLock | undefined;
  let raising: NodeJS.Timeout | undefined;
  beforeAll(async () => {
    turn = await hostLock("microvm-guests", MICROVM_TURN_WAIT_MS);
    raising = setInterval(() => void raiseGuests(), 1_000).unref();
  }, MICROVM_TURN_WAIT_MS + 60_000);
  // Registered before the file's own afterAll, so it runs after them (vitest runs after-hooks as a stack).
  afterAll(async () => {
    clearInterval(raising);
    await turn?.release();
  });
}

/**
 * The processes seen to be another program than qemu, by pid, with how many scans saw them so: read once
 * more after the first, since a process seen between its fork and its exec is still its parent's program.
 * A pid leaves the map as soon as a scan no longer finds it (pids are handed out in turn: none is reused
 * within a second).
 */
const otherPrograms = new Map<string, number>();

/**
 * Gives every thread of every qemu on the machine `GUEST_NICE` (only the turn's holder boots guests). Per
 * thread: Linux's nice is a thread's, and qemu starts its vCPU threads before anyone could renice it. Each
 * scan reads the program of new processes only: reading every process's every second took 30 ms of CPU
 * for 85 processes here, and a full run has ten times as many.
 */
export async function raiseGuests(): Promise<number> {
  let raised = 0;
  const pids = (await fs.readdir("/proc").catch(() => [])).filter((name) => /^\d+$/.test(name));
  const live = new Set(pids);
  for (const pid of otherPrograms.keys()) if (!live.has(pid)) otherPrograms.delete(pid);
  for (const pid of pids) {
    const seen = otherPrograms.get(pid) ?? 0;
    if (seen >= 2) continue;
    const comm = await fs.readFile(`/proc/${pid}/comm`, "utf8").catch(() => "");
    if (!comm.startsWith("qemu-system-")) {
      otherPrograms.set(pid, seen + 1);
      continue;
    }
    for (const tid of await fs.readdir(`/proc/${pid}/task`).catch(() => [])) {
      try {
        if (os.getPriority(Number(tid)) === GUEST_NICE) continue;
        os.setPriority(Number(tid), GUEST_NICE);
        raised++;
      } catch {
        // Gone since it was listed.
      }
    }
  }
  return raised;
}
