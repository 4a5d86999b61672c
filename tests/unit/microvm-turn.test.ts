// The microVM turn's priority for its guests (tests/helpers/microvm-turn.ts): every thread of a qemu is
// raised, other processes are not.
import { spawn } from "node:child_process";
import { promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterEach, describe, expect, it } from "vitest";
import { GUEST_NICE, raiseGuests } from "../helpers/microvm-turn.js";

const children: ReturnType<typeof spawn>[] = [];
afterEach(() => {
  for (const child of children.splice(0)) child.kill("SIGKILL");
});

/** `sleep` copied under `name` (a process's comm is its file's name), started. */
async function sleeper(dir: string, name: string): Promise<number> {
  const file = path.join(dir, name);
  await fs.copyFile("/bin/sleep", file);
  await fs.chmod(file, 0o755);
  const child = spawn(file, ["60"], { stdio: "ignore" });
  children.push(child);
  await new Promise((resolve) => child.once("spawn", resolve));
  return child.pid!;
}

describe("the microVM turn's guest priority", () => {
  it("raises a qemu's threads to GUEST_NICE and leaves another process at its own", async () => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), "microvm-turn-"));
    try {
      const qemu = await sleeper(dir, "qemu-system-x86_64");
      const other = await sleeper(dir, "not-a-guest");
      expect(os.getPriority(qemu)).toBe(0);
      expect(await raiseGuests()).toBeGreaterThanOrEqual(1);
      expect(os.getPriority(qemu)).toBe(GUEST_NICE);
      expect(os.getPriority(other)).toBe(0);
      await raiseGuests();
      expect(os.getPriority(qemu)).toBe(GUEST_NICE);
    } finally {
      await fs.rm(dir, { recursive: true, force: true });
    }
  });

  it("raises a process seen by a scan before its exec into qemu (between fork and exec, its parent's program)", async () => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), "microvm-turn-"));
    try {
      const file = path.join(dir, "qemu-system-x86_64");
      await fs.copyFile("/bin/sleep", file);
      await fs.chmod(file, 0o755);
      // A shell that becomes the qemu once told to.
      const child = spawn("sh", ["-c", `read go; exec ${file} 60`], { stdio: ["pipe", "ignore", "ignore"] });
      children.push(child);
      await new Promise((resolve) => child.once("spawn", resolve));
      const comm = () => fs.readFile(`/proc/${child.pid}/comm`, "utf8");
      await raiseGuests();
      expect((await comm()).trim()).toBe("sh");
      expect(os.getPriority(child.pid)).toBe(0);
      child.stdin!.write("go\n");
      while (!(await comm()).startsWith("qemu-system-"))
        await new Promise((resolve) => setTimeout(resolve, 20));
      await raiseGuests();
      expect(os.getPriority(child.pid)).toBe(GUEST_NICE);
    } finally {
      await fs.rm(dir, { recursive: true, force: true });
    }
  });
});
