// Whether this host can run microVM sandboxes, decided once per runtime: the
// guest kernel (scripts/microvm-kernel.sh's cache), the accelerator probe (lib/microvm/probe.ts, bounded,
// cached per host boot), and the platform's own SSH key the terminal and exec log in with.
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { writeFileAtomic } from "../lib/files.js";
import { decideNested, readNestedHostFacts, type NestedSupport } from "../lib/microvm/nested.js";
import { probeAccelerator, type AcceleratorDecision } from "../lib/microvm/probe.js";
import { run } from "../lib/process.js";
import { generateSshKeyPair } from "../lib/ssh-keygen.js";
import type { Check } from "../lib/host/check.js";

/** What a microVM tenant's spec needs from the host (TenantSpec `microvm`), and the key's private half. */
export interface MicroVmHost {
  readonly kernel: string;
  readonly initrd: string;
  readonly accelerator: "kvm" | "tcg";
  readonly stateRoot: string;
  readonly platformKey: string;
  readonly platformPrivateKey: string;
  readonly decision: AcceleratorDecision;
  /**
   * Whether a project may ask for nested virtualisation here (lib/microvm/nested.ts), and why (absent: not
   * asked, as none is offered); with it, its guest boots `nestedInitrd` (the initramfs with KVM's modules) in
   * place of `initrd`.
   */
  readonly nested?: NestedSupport;
  readonly nestedInitrd?: string;
}

export type MicroVmSupport =
  | { readonly available: true; readonly host: MicroVmHost }
  | { readonly available: false; readonly reason: string };

/** The platform's key to its guests' sshd, beside the microVMs' state root (`<dataDir>/microvm/`). */
export const platformKeyFile = (stateRoot: string) => path.join(path.dirname(stateRoot), "platform-key");
const stateRootOf = (dataDir: string) => path.join(dataDir, "microvm", "vms");

/** Where this host's microVMs keep their state (one directory per project) and their snapshots. */
export const microVmDirs = (dataDir: string) => ({
  stateRoot: stateRootOf(dataDir),
  snapshotsRoot: path.join(dataDir, "microvm", "snapshots"),
});

/** The platform's key for logging in to microVM guests: made once, root-only, under the data directory. */
export async function platformSshKey(dataDir: string): Promise<{ publicKey: string; privateKey: string }> {
  const file = platformKeyFile(stateRootOf(dataDir));
  const existing = await fs.readFile(file, "utf8").catch(() => undefined);
  const pub = await fs.readFile(`${file}.pub`, "utf8").catch(() => undefined);
  if (existing && pub) return { publicKey: pub.trim(), privateKey: existing };
  const keys = await generateSshKeyPair("agent-sandbox-platform");
  await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
  await writeFileAtomic(file, keys.privateKey, "0600");
  await writeFileAtomic(`${file}.pub`, `${keys.publicKey}\n`, "0644");
  return { publicKey: keys.publicKey.trim(), privateKey: keys.privateKey };
}

/**
 * Decides whether microVMs run here and with what, never hanging: the kernel script only reads its cache
 * when `npm test`/`npm run local`'s set-up built it (else it fetches from the package archive, bounded), and
 * the probe kills a guest that does not finish. Any failure is the reason the backend is refused.
 */
export async function detectMicroVmSupport(options: {
  readonly repoRoot: string;
  readonly dataDir: string;
  readonly kvmTimeoutMs?: number;
  /** Where the host's /proc, /sys and /dev are read for nested virtualisation ("/"). */
  readonly hostRoot?: string;
}): Promise<MicroVmSupport> {
  let kernelDir: string;
  try {
    const { stdout } = await run("bash", [path.join(options.repoRoot, "scripts/microvm-kernel.sh")], 300_000);
    kernelDir = stdout.trim().split("\n").at(-1) ?? "";
  } catch (error) {
    return { available: false, reason: `no guest kernel: ${(error as Error).message.split("\n")[0]}` };
  }
  const kernel = path.join(kernelDir, "vmlinuz");
  const decision = await probeAccelerator({
    kernel,
    ...(options.kvmTimeoutMs === undefined ? {} : { kvmTimeoutMs: options.kvmTimeoutMs }),
  }).catch((error: Error) => error);
  if (decision instanceof Error) return { available: false, reason: decision.message };
  if (decision.accelerator === "none") return { available: false, reason: decision.reason };
  const keys = await platformSshKey(options.dataDir);
  const nestedInitrd = path.join(kernelDir, "initrd-nested.img");
  const nestedBuilt = await fs.access(nestedInitrd).then(
    () => true,
    () => false,
  );
  const nested: NestedSupport = nestedBuilt
    ? decideNested(await readNestedHostFacts(options.hostRoot), decision)
    : { available: false, reason: `no nested initramfs ${nestedInitrd} (run scripts/microvm-kernel.sh)` };
  return {
    available: true,
    host: {
      kernel,
      initrd: path.join(kernelDir, "initrd.img"),
      accelerator: decision.accelerator,
      stateRoot: stateRootOf(options.dataDir),
      platformKey: keys.publicKey,
      platformPrivateKey: keys.privateKey,
      decision,
      nested,
      nestedInitrd,
    },
  };
}

/** `/healthz`'s words for nested virtualisation: offered with which CPU flag, or not and why. */
export function describeNested(nested: NestedSupport): string {
  return nested.available
    ? `nested virtualisation offered (${nested.cpuFlag}: ${nested.reason})`
    : `nested virtualisation not offered (${nested.reason})`;
}

/**
 * `/healthz`'s `microvm` line: which accelerator and why, and whether projects may have nested
 * virtualisation and why (never a matter of readiness: a host without it runs microVMs all the same). Not
 * being able to run microVMs leaves the platform ready (containers are unaffected) unless microVMs are what
 * new projects get by default.
 */
export function microVmCheck(support: MicroVmSupport | undefined, requiredByDefault: boolean): Check {
  if (!support) return { name: "microvm", ready: !requiredByDefault, detail: "still probing the host" };
  if (!support.available)
    return { name: "microvm", ready: !requiredByDefault, detail: `not available: ${support.reason}` };
  const { decision, nested } = support.host;
  return {
    name: "microvm",
    ready: true,
    detail: [
      `accelerator ${decision.accelerator} (${decision.reason})`,
      decision.qemuVersion ?? "qemu",
      ...(nested ? [describeNested(nested)] : []),
    ].join("; "),
  };
}
