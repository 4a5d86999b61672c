// The idle job's SSH sessions of a microVM (issue 19): the host's own TCP table, connections established to
// the guest's sshd on the tenant's bridge (the SSH port's forwarder and the terminal connect from the host).
import { describe, expect, it } from "vitest";
import { establishedTo, procNetAddress } from "../../runtime/sandbox/ssh-sessions.js";

// As /proc/net/tcp prints it: a header, then one socket per line (addresses as host-order hex words, ports hex).
const TABLE = [
  "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode",
  // 10.231.0.1:40000 → 10.231.0.2:2222, established: a session.
  "   0: 0100E70A:9C40 0200E70A:08AE 01 00000000:00000000 00:00000000 00000000     0        0 1 1 0 20 4 30 10 -1",
  // the same peer, in TIME_WAIT (06): over.
  "   1: 0100E70A:9C41 0200E70A:08AE 06 00000000:00000000 00:00000000 00000000     0        0 2 1 0 20 4 30 10 -1",
  // another tenant's guest (10.231.1.2), established: not this one's.
  "   2: 0101E70A:9C42 0201E70A:08AE 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0 20 4 30 10 -1",
  // this guest's other port: not its sshd.
  "   3: 0100E70A:9C43 0200E70A:0050 01 00000000:00000000 00:00000000 00000000     0        0 4 1 0 20 4 30 10 -1",
  // the forwarder's listening socket on 0.0.0.0:10000 (0A: LISTEN).
  "   4: 00000000:2710 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5 1 0 20 4 30 10 -1",
  "",
].join("\n");

describe("a microVM's SSH sessions for the idle job", () => {
  it("writes an address as /proc/net does", () => {
    expect(procNetAddress("10.231.0.2")).toBe("0200E70A");
    expect(procNetAddress("127.0.0.1")).toBe("0100007F");
  });

  it("counts established connections to the guest's sshd only", () => {
    expect(establishedTo(TABLE, "10.231.0.2", 2222)).toBe(1);
    expect(establishedTo(TABLE, "10.231.1.2", 2222)).toBe(1);
    expect(establishedTo(TABLE, "10.231.2.2", 2222)).toBe(0);
    expect(establishedTo(TABLE, "10.231.0.2", 80)).toBe(1);
    expect(establishedTo("", "10.231.0.2", 2222)).toBe(0);
  });
});
