// Whether this host can run container sandboxes under gVisor (`isolation: gvisor`), decided once per runtime
// the way the microVM backend probes KVM: the engine offers the `runsc` runtime (lib/host/docker-engine.ts
// adds it where Debian's runsc is installed), a container of the sandbox image really runs under it and reads
// gVisor's own kernel, and a process runsc starts in a running sandbox as an unprivileged user (as the
// platform's exec, terminal and files are) holds to that user's permissions. A runsc that fails the last is
// refused with what it did: the agent would be root in its own sandbox.
import type Docker from "dockerode";
import { GVISOR_RUNTIME, RUNSC_BINARY } from "../lib/host/docker-engine.js";
import { LABELS, MANAGED_BY, SANDBOX_CAPABILITIES } from "../lib/constants.js";
import type { Check } from "../lib/host/check.js";

export type GvisorSupport =
  | {
      readonly available: true;
      /** The engine's runtime name for it. */
      readonly runtime: string;
      /** What the probe container read: gVisor's kernel release and its first boot line. */
      readonly kernel: string;
      readonly ms: number;
    }
  | { readonly available: false; readonly reason: string };

/** How long the probe's container may take to start and answer. */
const PROBE_TIMEOUT_MS = 60_000;

/**
 * The probe: the engine's runtimes, then the sandbox image's shell under runsc (no network), its `uname -r`
 * and `dmesg`'s first line, which must be gVisor's. Never throws: a host that cannot is a reason.
 */
export async function detectGvisorSupport(docker: Docker, image: string): Promise<GvisorSupport> {
  const started = Date.now();
  let runtimes: string[];
  try {
    const info = (await docker.info()) as { Runtimes?: Record<string, unknown> };
    runtimes = Object.keys(info.Runtimes ?? {});
  } catch (error) {
    return { available: false, reason: `the container engine did not answer: ${(error as Error).message}` };
  }
  if (!runtimes.includes(GVISOR_RUNTIME))
    return {
      available: false,
      reason: `the container engine offers no ${GVISOR_RUNTIME} runtime (it has ${runtimes.sort().join(", ")}): install Debian's runsc (${RUNSC_BINARY}) and restart the engine the platform starts, or add runsc to the runtimes of the host's /etc/docker/daemon.json`,
    };
  let container: Docker.Container | undefined;
  try {
    container = await docker.createContainer({
      Image: image,
      Entrypoint: ["/bin/sh", "-c"],
      Cmd: ["uname -r; dmesg | head -n 1"],
      // Root with CAP_SYSLOG alone: gVisor's own kernel log needs it.
      User: "0:0",
      // A terminal: its log is the plain text (without one, the engine frames each chunk).
      Tty: true,
      Labels: { [LABELS.managedBy]: MANAGED_BY },
      HostConfig: {
        Runtime: GVISOR_RUNTIME,
        NetworkMode: "none",
        CapDrop: ["ALL"],
        CapAdd: ["SYSLOG"],
        SecurityOpt: ["no-new-privileges"],
        Memory: 256 << 20,
      },
    });
    await container.start();
    const exited = (await Promise.race([
      container.wait(),
      new Promise((resolve) => setTimeout(() => resolve(undefined), PROBE_TIMEOUT_MS)),
    ])) as { StatusCode: number } | undefined;
    const logs = (await container.logs({ stdout: true, stderr: true })).toString("utf8");
    const text = logs.replace(/\r/g, "").trim();
    if (!exited)
      return {
        available: false,
        reason: `a container under runsc did not finish within ${PROBE_TIMEOUT_MS} ms`,
      };
    if (exited.StatusCode !== 0 || !/gVisor/.test(text))
      return {
        available: false,
        reason: `a container under runsc exited ${exited.StatusCode} without gVisor's kernel: ${text.slice(0, 300) || "(no output)"}`,
      };
    const kernel = text.split("\n").join("; ");
    const defect = await execBoundaryDefect(docker, image);
    if (defect)
      return {
        available: false,
        reason: `runsc runs the sandbox image on gVisor's kernel (${kernel}), but ${defect}: the sandbox's own boundary between the agent (whose terminal, exec and files are such processes) and root would not hold, so gVisor isolation is refused on this host (docs/security.md, "gVisor")`,
      };
    return { available: true, runtime: GVISOR_RUNTIME, kernel, ms: Date.now() - started };
  } catch (error) {
    return {
      available: false,
      reason: `a container under runsc did not run: ${(error as Error).message.split("\n")[0]}`,
    };
  } finally {
    await container?.remove({ force: true }).catch(() => undefined);
  }
}

/**
 * `/healthz`'s `gvisor` line: the kernel the probe read, or why not. Not being able to leaves the platform
 * ready (runc containers are unaffected) unless gVisor is what new projects get by default.
 */
export function gvisorCheck(support: GvisorSupport | undefined, requiredByDefault: boolean): Check {
  if (!support) return { name: "gvisor", ready: !requiredByDefault, detail: "still probing the engine" };
  if (!support.available)
    return { name: "gvisor", ready: !requiredByDefault, detail: `not available: ${support.reason}` };
  return {
    name: "gvisor",
    ready: true,
    detail: `runtime ${support.runtime}: ${support.kernel} (probed in ${support.ms} ms)`,
  };
}

/**
 * The second check: a process the runtime starts in a running sandbox as an unprivileged user (as the
 * platform's exec, terminal and files are: `docker exec`, runsc's `exec`) holds to that user's permissions.
 * Debian 12's runsc (2022-12-19) does not: such a process uses the capabilities of the container's bounding
 * set (the sandbox's seven, which only its root entrypoint should) though it shows none, and appends to
 * root's /etc/passwd and signals root's PID 1; a sandbox without capabilities, or its own first process as
 * the same user, is refused both (measured here). Returns what failed, or undefined.
 */
async function execBoundaryDefect(docker: Docker, image: string): Promise<string | undefined> {
  let container: Docker.Container | undefined;
  try {
    container = await docker.createContainer({
      Image: image,
      Entrypoint: ["/bin/sleep", "20"],
      User: "0:0",
      Labels: { [LABELS.managedBy]: MANAGED_BY },
      HostConfig: {
        Runtime: GVISOR_RUNTIME,
        NetworkMode: "none",
        // A sandbox's own: the capabilities its entrypoint keeps (root's), which no user of it may use.
        CapDrop: ["ALL"],
        CapAdd: [...SANDBOX_CAPABILITIES],
        SecurityOpt: ["no-new-privileges"],
        Memory: 256 << 20,
      },
    });
    await container.start();
    const exec = await container.exec({
      Cmd: [
        "/bin/sh",
        "-c",
        "if echo probe >> /etc/passwd 2>/dev/null; then echo wrote; fi; if kill -0 1 2>/dev/null; then echo signalled; fi; echo done",
      ],
      User: "65534:65534",
      AttachStdout: true,
      AttachStderr: true,
      Tty: true,
    });
    const stream = await exec.start({ hijack: true, stdin: false, Tty: true });
    const output = await new Promise<string>((resolve, reject) => {
      let text = "";
      const timer = setTimeout(
        () => reject(new Error(`no answer within ${PROBE_TIMEOUT_MS} ms`)),
        PROBE_TIMEOUT_MS,
      );
      stream.on("data", (chunk: Buffer) => {
        text += chunk.toString("utf8");
        // Its last line: the stream itself may stay open as long as the container runs.
        if (/done/.test(text)) {
          clearTimeout(timer);
          resolve(text);
        }
      });
      stream.on("end", () => (clearTimeout(timer), resolve(text)));
      stream.on("error", (error) => (clearTimeout(timer), reject(error)));
    });
    stream.destroy();
    if (!/done/.test(output))
      return `its exec as an unprivileged user did not answer: ${output.slice(0, 200) || "(no output)"}`;
    const broke = [
      ...(/wrote/.test(output) ? ["appended to root's /etc/passwd"] : []),
      ...(/signalled/.test(output) ? ["signalled root's PID 1"] : []),
    ];
    return broke.length > 0
      ? `a process it execs in a running sandbox as an unprivileged user (uid 65534) ${broke.join(" and ")}`
      : undefined;
  } finally {
    await container?.remove({ force: true }).catch(() => undefined);
  }
}
