// Kill -9 of the runtime in the two windows of a microVM's pause where a memory image is half made or half
// used (issue 44): while a stop writes the guest's memory to its file (memory.state.partial there), and while
// a start has qemu reading it back (`-incoming`, before the guest runs on). The runtime runs as `npm run
// local` runs it (tests/chaos/platform.ts), on TCG here; after each kill it is started again, a new
// reconciler takes the operation over once its lease expires (or its user asks again once), and then the
// project must be stopped or running as asked, its qemu not left frozen (alive with its guest paused), no
// partial image left and none beside a running guest, what the project's view says of its pause true of the
// files, the home's files kept, and nothing an orphan sweep would find.
import { existsSync, promises as fs, readdirSync, readFileSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { guestStatus, microVmFiles, readMicroVm } from "../../lib/microvm/launcher.js";
import { QEMU_BINARY } from "../../lib/microvm/probe.js";
import { waitFor } from "../../lib/process.js";
import { microVmDirs } from "../../runtime/microvm-support.js";
import type { Operation } from "../../runtime/store/operations.js";
import { tenantLeftovers } from "../helpers/host.js";
import { microVmTurn } from "../helpers/microvm-turn.js";
import { alive, chaosPlatform, type ChaosPlatform } from "./platform.js";

const BOOT_MS = 420_000;
let chaos: ChaosPlatform;
let projectId = "";
let stateDir = "";

/** Processes whose command line has every one of `parts`, from /proc. */
function processesWith(...parts: string[]): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const command = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0").join(" ");
      if (parts.every((part) => command.includes(part))) found.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** Until `ready()`, looked at every 20 ms (a window of the operation can be a second long). */
async function until(what: string, timeoutMs: number, ready: () => boolean): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ready()) {
    if (Date.now() > deadline) throw new Error(`${what}: not seen within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function ok(method: string, url: string, body?: unknown) {
  const answer = await chaos.api(method, url, body);
  if (answer.status >= 300)
    throw new Error(`${method} ${url}: ${answer.status} ${JSON.stringify(answer.body)}`);
  return answer.body;
}

/** A command in the guest through the API's exec, as the agent; a refusal says what the VM was doing. */
async function inGuest(command: string): Promise<string> {
  const answer = await chaos.api("POST", `/projects/${projectId}/exec`, { command, timeout_s: 60 });
  if (answer.status >= 300) {
    const files = microVmFiles(stateDir);
    const tail = async (file: string) =>
      (await fs.readFile(file, "utf8").catch(() => "")).split("\n").slice(-15).join("\n");
    const vm = await readMicroVm(stateDir).catch((error: Error) => error.message);
    throw new Error(
      `exec ${command}: ${answer.status} ${JSON.stringify(answer.body)}\nthe VM: ${JSON.stringify(vm)}\n` +
        `console:\n${await tail(files.console)}\nqemu:\n${await tail(files.qemuLog)}`,
    );
  }
  if (answer.body.exit_code !== 0)
    throw new Error(`${command}: exit ${answer.body.exit_code}: ${answer.body.stderr}`);
  return answer.body.stdout as string;
}

/**
 * `request` (a stop or a start), the runtime killed once `window()` says the operation is in it, started
 * again; the operation then finishes by itself (a new reconciler takes it over), or its user asks again once.
 * What the kill cut and how the operation ended.
 */
async function killedDuring(
  request: () => Promise<{ operation: { id: string } }>,
  window: () => boolean,
): Promise<{ first: Operation; final: Operation; strays: string[]; killedAfterMs: number }> {
  const asked = Date.now();
  const { operation } = await request();
  await until("the operation in the window", BOOT_MS, window);
  const killedAfterMs = Date.now() - asked;
  const before = await chaos.killRuntime();
  await chaos.restartRuntime();
  const first = await chaos.settled(operation.id, BOOT_MS);
  const final =
    first.state === "succeeded" ? first : await chaos.settled((await request()).operation.id, BOOT_MS);
  // What the killed runtime ran (its engine, its provider) is gone; the VM's own processes (qemu and its SSH
  // port's forwarder, started detached) live on by design.
  const strays = before
    .filter((p) => alive(p.pid) && !p.command.includes(stateDir))
    .map((p) => `${p.pid} ${p.command.slice(0, 160)}`);
  return { first, final, strays, killedAfterMs };
}

/** What must hold of the VM whatever the kill cut: its qemu not frozen, no partial image, the view true. */
async function consistent(running: boolean): Promise<void> {
  const files = microVmFiles(stateDir);
  const vm = await readMicroVm(stateDir);
  // A running VM's guest runs (not frozen: paused by a cut save or restore); a stopped one has no qemu.
  expect({ running: vm.running, guest: await guestStatus(stateDir) }).toEqual(
    running ? { running, guest: "running" } : { running, guest: undefined },
  );
  await expect(fs.access(`${files.memory}.partial`)).rejects.toThrow();
  const image = await fs.stat(files.memory).catch(() => undefined);
  const project = await ok("GET", `/projects/${projectId}`);
  expect(project.status).toBe(running ? "running" : "stopped");
  if (running) {
    // A running guest never has an image beside disks that move on.
    expect(image).toBeUndefined();
    expect(project.pause).toBeNull();
  } else
    expect(project.pause).toEqual(
      image
        ? { kind: "memory", memory_bytes: image.size, saved_at: expect.any(String) }
        : { kind: "files", memory_bytes: null, saved_at: null },
    );
  expect(await chaos.orphans()).toEqual([]);
}

microVmTurn();
beforeAll(async () => {
  chaos = await chaosPlatform({
    tenants: {
      subnetPool: "10.253.8.0/23",
      sshPortRange: [29320, 29325],
      backupIntervalSeconds: 3600,
      leaseSeconds: 5,
      homeBytes: 256 << 20,
      backupBytes: 320 << 20,
    },
    logDir: path.join(os.tmpdir(), `microvm-chaos-${Date.now()}`),
  });
  // The runtime probes the host for microVMs as it starts: a create before the probe ends is a 409 saying so.
  let created;
  for (const deadline = Date.now() + 120_000; ;) {
    const answer = await chaos.api("POST", "/projects", { name: "microvm-chaos", backend: "microvm" });
    if (answer.status < 300) {
      created = answer.body;
      break;
    }
    if (
      answer.status !== 409 ||
      !/probe is still running/.test(answer.body?.message) ||
      Date.now() > deadline
    )
      throw new Error(`create: ${answer.status} ${JSON.stringify(answer.body)}`);
    await new Promise((resolve) => setTimeout(resolve, 1000));
  }
  projectId = created.project_id;
  stateDir = path.join(microVmDirs(chaos.platform.config.host.dataDir).stateRoot, projectId);
  await waitFor("the microVM running", BOOT_MS, async () => {
    const project = await ok("GET", `/projects/${projectId}`);
    if (project.status === "error") throw new Error(`create failed: ${project.error}`);
    return project.status === "running" ? true : undefined;
  });
}, 900_000);

afterAll(() => chaos?.stop(), 300_000);

describe("kill -9 of the runtime while a microVM's memory image is written and read", () => {
  it(
    "cut while the stop writes the image: the stop finishes, the VM paused (not frozen), the view true of it",
    async () => {
      await inGuest("echo before-the-pause > ~/chaos-kept.txt && sync");
      await inGuest(
        "setsid -f bash -c 'i=0; while :; do i=$((i+1)); echo $i > /dev/shm/count; sleep 0.2; done' </dev/null >/dev/null 2>&1",
      );
      const partial = `${microVmFiles(stateDir).memory}.partial`;
      const cut = await killedDuring(
        () => ok("POST", `/projects/${projectId}/stop`),
        () => existsSync(partial),
      );
      console.log(
        `microVM pause cut ${cut.killedAfterMs} ms after the request (the image half written): ` +
          `${cut.first.state} at attempt ${cut.first.attempt}${cut.final === cut.first ? "" : `, asked again: ${cut.final.state}`}`,
      );
      expect(cut.final.state).toBe("succeeded");
      expect(cut.strays).toEqual([]);
      await consistent(false);
      // The save started over after the kill (the paused guest run on a moment, then saved): its memory kept.
      const { pause } = await ok("GET", `/projects/${projectId}`);
      console.log(`the pause after the cut: ${JSON.stringify(pause)}`);
      expect(pause.kind).toBe("memory");
    },
    2 * BOOT_MS,
  );

  it(
    "cut while the start reads the image back: the start finishes, the guest runs (not frozen), its home kept",
    async () => {
      const image = microVmFiles(stateDir).memory;
      const hadImage = await fs.stat(image).then(
        () => true,
        () => false,
      );
      expect(hadImage).toBe(true);
      const cut = await killedDuring(
        () => ok("POST", `/projects/${projectId}/start`),
        // qemu started, taking the image in (or booting cold, when the stop kept none).
        () => processesWith(QEMU_BINARY, stateDir, ...(hadImage ? ["-incoming"] : [])).length > 0,
      );
      expect(cut.final.state).toBe("succeeded");
      expect(cut.strays).toEqual([]);
      await consistent(true);
      expect((await inGuest("cat ~/chaos-kept.txt")).trim()).toBe("before-the-pause");
      // Resumed from the image (the kill came before the guest ran: it was whole), or booted cold: either is
      // sound; which one is printed.
      const count = await inGuest("cat /dev/shm/count 2>/dev/null || echo cold");
      console.log(
        `microVM resume cut ${cut.killedAfterMs} ms after the request (had an image: ${hadImage}): ` +
          `${cut.first.state} at attempt ${cut.first.attempt}; the guest's counter: ${count.trim()}`,
      );
    },
    2 * BOOT_MS,
  );

  it(
    "delete leaves nothing of it",
    async () => {
      const { operation } = await ok("DELETE", `/projects/${projectId}`);
      expect((await chaos.settled(operation.id, BOOT_MS)).state).toBe("succeeded");
      expect(await tenantLeftovers(chaos.platform.config.host, projectId)).toEqual([]);
      await expect(fs.access(stateDir)).rejects.toThrow();
      expect(processesWith(stateDir)).toEqual([]);
      expect(await chaos.orphans()).toEqual([]);
    },
    BOOT_MS,
  );
});
