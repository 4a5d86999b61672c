import { afterAll, beforeAll } from "vitest";
import { hostLock, type HostLock } from "./host-lock.js";

/**
 * How long a file may wait for its turn at the microVMs: the longest file that boots them (the attack
 * table's microVM part, about 25 minutes beside other files) and room to spare.
 */
export const MICROVM_TURN_WAIT_MS = 2_700_000;

/**
 * Registers, in the calling file or describe, a turn at this machine's microVMs: from before its first hook
 * to after its last, no other test file boots a microVM guest. Here they run emulated (TCG: nested KVM hangs
 * on these machines), and each busy guest is a whole core: two files' guests beside each other and the
 * container files on two cores starved everything of CPU (sshd handshakes past their timeouts, guests that
 * stopped answering; CI's run of session 21). Call it before the file's own `beforeAll`: its hooks then run
 * inside the turn.
 */
export function microVmTurn(): void {
  let turn: HostLock | undefined;
  beforeAll(async () => {
    turn = await hostLock("microvm-guests", MICROVM_TURN_WAIT_MS);
  }, MICROVM_TURN_WAIT_MS + 60_000);
  // Registered before the file's own afterAll, so it runs after them (vitest runs after-hooks as a stack).
  afterAll(async () => {
    await turn?.release();
  });
}
