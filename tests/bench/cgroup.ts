// What a container's cgroup has used (cgroup v1 or v2), for the benchmarks that measure a sandbox's own cost.
import { promises as fs } from "node:fs";

/** CPU nanoseconds a container's cgroup has used so far (cgroup v1 cpuacct, or v2 cpu.stat); undefined if unknown. */
export async function containerCpuNs(id: string): Promise<number | undefined> {
  const v1 = await fs
    .readFile(`/sys/fs/cgroup/cpuacct/docker/${id}/cpuacct.usage`, "utf8")
    .catch(() => undefined);
  if (v1 !== undefined) return Number(v1);
  for (const file of [
    `/sys/fs/cgroup/system.slice/docker-${id}.scope/cpu.stat`,
    `/sys/fs/cgroup/docker/${id}/cpu.stat`,
  ]) {
    const stat = await fs.readFile(file, "utf8").catch(() => undefined);
    const usec = stat && /^usage_usec (\d+)$/m.exec(stat)?.[1];
    if (usec) return Number(usec) * 1000;
  }
  return undefined;
}

/** A container's anonymous memory in bytes (its processes' resident memory, not the page cache); undefined if unknown. */
export async function containerAnonBytes(id: string): Promise<number | undefined> {
  for (const [file, key] of [
    [`/sys/fs/cgroup/memory/docker/${id}/memory.stat`, "total_rss"],
    [`/sys/fs/cgroup/system.slice/docker-${id}.scope/memory.stat`, "anon"],
    [`/sys/fs/cgroup/docker/${id}/memory.stat`, "anon"],
  ] as const) {
    const stat = await fs.readFile(file, "utf8").catch(() => undefined);
    const bytes = stat && new RegExp(`^${key} (\\d+)$`, "m").exec(stat)?.[1];
    if (bytes) return Number(bytes);
  }
  return undefined;
}
