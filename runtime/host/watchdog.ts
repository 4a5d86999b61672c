import { existsSync } from "node:fs";
import type { HostConfig } from "../../stacks/config.js";
import { probeWithin, type Check, type HostPart } from "../../lib/host/check.js";
import { imageRegistry, registryInstance, runRegistry } from "../../lib/host/registry.js";
import { runSquid, squidPaths, squidProxy } from "../../lib/host/squid.js";
import { livePid } from "../../lib/process.js";

/**
 * A host daemon the watchdog keeps running: `probe` observes it, `repair` starts it again. `repair` answers
 * undefined when the daemon's process is alive (only slow to answer): a live process is never started twice.
 */
export interface WatchedPart {
  readonly name: string;
  probe(): Promise<Check>;
  repair(log: (line: string) => void): Promise<Check | undefined>;
}

/** One repair the watchdog made or tried. */
export interface HostRepair {
  readonly part: string;
  /** Why it was repaired: the failed probe's detail. */
  readonly cause: string;
  readonly ok: boolean;
  /** The check after the repair, or why the repair failed. */
  readonly detail: string;
  readonly seconds: number;
}

export interface HostWatchdogOptions {
  readonly parts: readonly WatchedPart[];
  readonly intervalMs: number;
  /** A probe that does not answer within this is a failed probe (default 2 s). */
  readonly probeTimeoutMs?: number;
  readonly log: (message: string, fields: Record<string, unknown>) => void;
  /** Called with each repair's outcome (the runtime counts them in /metrics). */
  readonly onRepair?: (repair: HostRepair) => void;
}

/**
 * The sandbox host's daemons that die without taking the host down, restarted without an operator:
 * Squid (while it is down, egress fails closed: the tenants' only way out is the proxy) and
 * the image registry (snapshots fail while it is down). A part is watched only once it has been seen
 * ready: bringing a part up the first time is the bring-up's, and a runtime on a host without a registry
 * must not start one. The Docker engine is deliberately not watched: an engine that is only slow to answer
 * must never get a second dockerd, and several runtimes may share one engine.
 */
export class HostWatchdog {
  private timer: NodeJS.Timeout | undefined;
  private sweeping: Promise<HostRepair[]> | undefined;
  private readonly seenReady = new Set<string>();

  constructor(private readonly options: HostWatchdogOptions) {}

  start(): void {
    this.timer = setInterval(() => void this.sweep(), this.options.intervalMs);
    this.timer.unref();
    void this.sweep();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    await this.sweeping;
  }

  /** One look at every part, repairing the ones that fail; a sweep already running is joined, not doubled. */
  sweep(): Promise<HostRepair[]> {
    this.sweeping ??= this.sweepOnce().finally(() => (this.sweeping = undefined));
    return this.sweeping;
  }

  private async sweepOnce(): Promise<HostRepair[]> {
    const repairs: HostRepair[] = [];
    for (const part of this.options.parts) {
      const check = await probeWithin(part, this.options.probeTimeoutMs ?? 2_000);
      if (check.ready) {
        this.seenReady.add(part.name);
        continue;
      }
      if (!this.seenReady.has(part.name)) continue;
      const repair = await this.repair(part, check.detail);
      if (repair) repairs.push(repair);
    }
    return repairs;
  }

  private async repair(part: WatchedPart, cause: string): Promise<HostRepair | undefined> {
    const started = Date.now();
    const log = (line: string) => this.options.log(line, { part: part.name });
    let repair: HostRepair;
    try {
      const check = await part.repair(log);
      if (!check) {
        this.options.log("host part slow to answer, its process alive: left alone", {
          part: part.name,
          cause,
        });
        return undefined;
      }
      repair = { part: part.name, cause, ok: check.ready, detail: check.detail, seconds: 0 };
    } catch (error) {
      repair = { part: part.name, cause, ok: false, detail: (error as Error).message, seconds: 0 };
    }
    repair = { ...repair, seconds: (Date.now() - started) / 1000 };
    this.options.log(repair.ok ? "host part repaired" : "host part repair failed", { ...repair });
    this.options.onRepair?.(repair);
    return repair;
  }
}

/**
 * Squid and the registry of `host`, restarted from the config their bring-up wrote: the watchdog restores
 * a dead process, it does not rewrite what the platform stack owns (the tenants' Squid fragments are read
 * again from disk on start). Without a config there is nothing to restart from: the part's full `ensure`.
 */
export function watchedHostParts(host: HostConfig): WatchedPart[] {
  const dirs = { configDir: host.configDir, dataDir: host.dataDir, logDir: host.logDir, runDir: host.runDir };
  const squidAt = { port: host.squidPort, ...squidPaths(dirs) };
  const registryAt = registryInstance({ port: host.registryPort, ...dirs });
  return [
    restartable(squidProxy({ port: host.squidPort, ...dirs }), squidAt, "squid", (log) =>
      runSquid(squidAt, false, log),
    ),
    restartable(imageRegistry({ port: host.registryPort, ...dirs }), registryAt, "docker-registry", (log) =>
      runRegistry(registryAt, false, log),
    ),
  ];
}

/** A host part started again by `start` from the config its bring-up wrote, unless its process lives. */
function restartable(
  part: HostPart,
  instance: { readonly pidFile: string; readonly config: string },
  processName: string,
  start: (log: (line: string) => void) => Promise<unknown>,
): WatchedPart {
  return {
    name: part.name,
    probe: () => part.probe(),
    async repair(log) {
      if ((await livePid(instance.pidFile, processName)) !== undefined) return undefined;
      if (!existsSync(instance.config)) return part.ensure(log);
      log(`${part.name} is not running: starting it again`);
      await start(log);
      return part.probe();
    },
  };
}
