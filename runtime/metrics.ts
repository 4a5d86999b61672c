import { POOL_OWNER, type PoolStatus } from "./tenants/pool.js";
import type { Queryable } from "./store/db.js";
import { driftCounts } from "./store/drift.js";
import { jobRunFigures } from "./store/jobs.js";
import { OPERATION_KINDS, operationCounts, pendingQueue } from "./store/operations.js";
import { tenantCountsByState } from "./store/tenants.js";
import { persistentSecret } from "./secrets.js";

/** What a bearer token may be made of (RFC 6750 §2.1, b64token). */
const BEARER_TOKEN = /^[A-Za-z0-9._~+/-]+=*$/;

/**
 * The token a scraper elsewhere sends to `/metrics` (`Authorization: Bearer <token>`; Prometheus:
 * `authorization.credentials_file`): AGENT_SANDBOX_METRICS_TOKEN, or generated root-only (0600) as
 * `metrics.token` in the data directory on first start. A token that cannot be a bearer token, or is
 * short enough to guess, stops the start.
 */
export function metricsToken(dataDir: string, env: NodeJS.ProcessEnv = process.env): string {
  const token = persistentSecret(dataDir, "metrics.token", env.AGENT_SANDBOX_METRICS_TOKEN);
  if (!BEARER_TOKEN.test(token) || token.length < 32)
    throw new Error(
      "AGENT_SANDBOX_METRICS_TOKEN must be at least 32 characters of A-Z a-z 0-9 . _ ~ + / - (a bearer token)",
    );
  return token;
}

/** Request duration buckets in seconds: the API's target is milliseconds, the engine's is seconds. */
const BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

const OPERATION_STATES = ["pending", "running", "succeeded", "failed", "cancelled"] as const;

/** Prometheus label values escape backslash, double quote and newline. */
function label(value: string): string {
  return value.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");
}

function labels(pairs: Record<string, string>): string {
  const body = Object.entries(pairs)
    .map(([k, v]) => `${k}="${label(v)}"`)
    .join(",");
  return body ? `{${body}}` : "";
}

interface Histogram {
  readonly counts: number[];
  sum: number;
  count: number;
}

/**
 * The runtime's metrics in the Prometheus text format (version 0.0.4). Request metrics are kept in
 * memory per process; operation and tenant gauges are read from the database at scrape time, so every
 * replica reports the same queue.
 */
export class Metrics {
  private readonly requests = new Map<string, { labels: Record<string, string>; value: number }>();
  private readonly durations = new Map<string, { labels: Record<string, string>; histogram: Histogram }>();
  /** The host watchdog's repairs per part: zeros from the start, so no series appears late. */
  private readonly hostRepairs = new Map<string, { repaired: number; failed: number }>();

  /** Errors nothing in the process caught (runtime/process-errors.ts), by kind: zeros from the start. */
  private readonly processErrors = { rejection: 0, exception: 0 };

  countProcessError(kind: "rejection" | "exception"): void {
    this.processErrors[kind] += 1;
  }

  /** A host part the watchdog looks after (reported with zero repairs until it has one). */
  watchHostPart(part: string): void {
    if (!this.hostRepairs.has(part)) this.hostRepairs.set(part, { repaired: 0, failed: 0 });
  }

  countHostRepair(part: string, ok: boolean): void {
    this.watchHostPart(part);
    this.hostRepairs.get(part)![ok ? "repaired" : "failed"] += 1;
  }

  /** `route` is the route's pattern (`/projects/:id`), never the raw URL: ids would explode cardinality. */
  observeRequest(method: string, route: string, status: number, seconds: number): void {
    const counterLabels = { method, route, status: String(status) };
    const counterKey = JSON.stringify(counterLabels);
    const counter = this.requests.get(counterKey) ?? { labels: counterLabels, value: 0 };
    counter.value += 1;
    this.requests.set(counterKey, counter);

    const durationKey = JSON.stringify({ method, route });
    let entry = this.durations.get(durationKey);
    if (!entry) {
      entry = {
        labels: { method, route },
        histogram: { counts: BUCKETS.map(() => 0), sum: 0, count: 0 },
      };
      this.durations.set(durationKey, entry);
    }
    BUCKETS.forEach((bound, i) => {
      if (seconds <= bound) entry.histogram.counts[i]! += 1;
    });
    entry.histogram.sum += seconds;
    entry.histogram.count += 1;
  }

  /** The whole exposition; `db` adds the operation and tenant gauges, `inFlight` this reconciler's. */
  async render(db?: Queryable, inFlight?: () => number, pool?: () => Promise<PoolStatus>): Promise<string> {
    const out: string[] = [];
    out.push("# HELP agent_sandbox_http_requests_total HTTP requests answered, by route and status.");
    out.push("# TYPE agent_sandbox_http_requests_total counter");
    for (const { labels: l, value } of this.requests.values())
      out.push(`agent_sandbox_http_requests_total${labels(l)} ${value}`);

    out.push("# HELP agent_sandbox_http_request_duration_seconds Time to answer a request.");
    out.push("# TYPE agent_sandbox_http_request_duration_seconds histogram");
    for (const { labels: l, histogram } of this.durations.values()) {
      BUCKETS.forEach((bound, i) =>
        out.push(
          `agent_sandbox_http_request_duration_seconds_bucket${labels({ ...l, le: String(bound) })} ${histogram.counts[i]}`,
        ),
      );
      out.push(
        `agent_sandbox_http_request_duration_seconds_bucket${labels({ ...l, le: "+Inf" })} ${histogram.count}`,
      );
      out.push(`agent_sandbox_http_request_duration_seconds_sum${labels(l)} ${histogram.sum}`);
      out.push(`agent_sandbox_http_request_duration_seconds_count${labels(l)} ${histogram.count}`);
    }

    out.push(
      "# HELP agent_sandbox_unhandled_errors_total Errors no handler caught (logged; the runtime served on).",
    );
    out.push("# TYPE agent_sandbox_unhandled_errors_total counter");
    for (const [kind, n] of Object.entries(this.processErrors))
      out.push(`agent_sandbox_unhandled_errors_total${labels({ kind })} ${n}`);

    if (this.hostRepairs.size > 0) {
      out.push("# HELP agent_sandbox_host_repairs_total Host daemons the watchdog found down and restarted.");
      out.push("# TYPE agent_sandbox_host_repairs_total counter");
      for (const [part, n] of this.hostRepairs)
        out.push(`agent_sandbox_host_repairs_total${labels({ part })} ${n.repaired}`);
      out.push(
        "# HELP agent_sandbox_host_repair_failures_total Watchdog repairs that did not bring the part back.",
      );
      out.push("# TYPE agent_sandbox_host_repair_failures_total counter");
      for (const [part, n] of this.hostRepairs)
        out.push(`agent_sandbox_host_repair_failures_total${labels({ part })} ${n.failed}`);
    }

    if (db) {
      const operations = await operationCounts(db);
      out.push("# HELP agent_sandbox_operations Reconciler operations, by kind and state.");
      out.push("# TYPE agent_sandbox_operations gauge");
      // Every combination is reported, zeros included, so a rate or alert never sees a series vanish.
      for (const kind of OPERATION_KINDS)
        for (const state of OPERATION_STATES) {
          const n = operations.find((r) => r.kind === kind && r.state === state)?.n ?? 0;
          out.push(`agent_sandbox_operations${labels({ kind, state })} ${n}`);
        }
      const queue = await pendingQueue(db);
      out.push("# HELP agent_sandbox_reconciler_queue_depth Operations waiting for a reconciler.");
      out.push("# TYPE agent_sandbox_reconciler_queue_depth gauge");
      out.push(`agent_sandbox_reconciler_queue_depth ${queue.depth}`);
      out.push(
        "# HELP agent_sandbox_reconciler_queue_oldest_seconds Age of the oldest waiting operation (0 when none).",
      );
      out.push("# TYPE agent_sandbox_reconciler_queue_oldest_seconds gauge");
      out.push(`agent_sandbox_reconciler_queue_oldest_seconds ${queue.oldest ?? 0}`);
      // Warm-pool members nobody has claimed are not projects (agent_sandbox_pool_* counts them).
      const tenants = await tenantCountsByState(db, POOL_OWNER);
      out.push("# HELP agent_sandbox_projects Live projects, by status.");
      out.push("# TYPE agent_sandbox_projects gauge");
      for (const { state, n } of tenants) out.push(`agent_sandbox_projects${labels({ state })} ${n}`);
      const drift = await driftCounts(db);
      out.push("# HELP agent_sandbox_projects_drift Live projects by their last drift check's finding.");
      out.push("# TYPE agent_sandbox_projects_drift gauge");
      for (const finding of ["drifted", "failed", "stalled"] as const)
        out.push(`agent_sandbox_projects_drift${labels({ finding })} ${drift[finding]}`);
      const jobs = await jobRunFigures(db);
      const jobMetric = (
        name: string,
        help: string,
        type: string,
        value: (j: (typeof jobs)[number]) => number,
      ) => {
        out.push(`# HELP agent_sandbox_job_${name} ${help}`, `# TYPE agent_sandbox_job_${name} ${type}`);
        for (const j of jobs) out.push(`agent_sandbox_job_${name}${labels({ job: j.job })} ${value(j)}`);
      };
      jobMetric(
        "last_run_timestamp_seconds",
        "When a background job's last run finished.",
        "gauge",
        (j) => j.finished ?? 0,
      );
      jobMetric(
        "last_duration_seconds",
        "How long its last run took.",
        "gauge",
        (j) => (j.duration_ms ?? 0) / 1000,
      );
      jobMetric("last_succeeded", "1 when its last run succeeded, 0 when it failed.", "gauge", (j) =>
        j.ok ? 1 : 0,
      );
      jobMetric("runs_total", "Runs of a background job, by any runtime.", "counter", (j) => j.runs);
      jobMetric("failures_total", "Failed runs of a background job.", "counter", (j) => j.failures);
    }
    if (pool) {
      const status = await pool();
      const poolMetric = (name: string, help: string, type: string, value: number) =>
        out.push(
          `# HELP agent_sandbox_pool_${name} ${help}`,
          `# TYPE agent_sandbox_pool_${name} ${type}`,
          `agent_sandbox_pool_${name} ${value}`,
        );
      poolMetric("target", "Ready members the warm pool aims at now (0: off).", "gauge", status.target);
      poolMetric("ready", "Warm-pool members running with no owner.", "gauge", status.ready);
      poolMetric("creating", "Warm-pool members being created.", "gauge", status.creating);
      poolMetric("failed", "Warm-pool members whose create failed (drained next).", "gauge", status.failed);
      poolMetric("claims_total", "Creates answered with a warm-pool member.", "counter", status.claims);
      poolMetric(
        "misses_total",
        "Creates that found no ready member (created cold).",
        "counter",
        status.misses,
      );
    }
    if (inFlight) {
      out.push("# HELP agent_sandbox_reconciler_in_flight Operations this process is running now.");
      out.push("# TYPE agent_sandbox_reconciler_in_flight gauge");
      out.push(`agent_sandbox_reconciler_in_flight ${inFlight()}`);
    }
    return `${out.join("\n")}\n`;
  }
}
