// The tests' own daemons (a cluster's etcd and kube-apiserver, a real node's kubelet and containerd): what each
// last wrote, for the error that says why it did not come up, and a stop that waits for the exit.
import type { ChildProcess } from "node:child_process";

/** The last `max` characters a process wrote, for the error that says why it did not start. */
export function tailLog(child: ChildProcess, max = 8_000): () => string {
  let log = "";
  for (const stream of [child.stdout!, child.stderr!])
    stream.on("data", (chunk: Buffer) => (log = (log + chunk.toString()).slice(-max)));
  return () => log.trim();
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves once the process has exited. */
export async function stopProcess(child: ChildProcess, graceMs = 10_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
  await exited;
  clearTimeout(timer);
}
