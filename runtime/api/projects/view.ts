import type { FastifyRequest } from "fastify";
import { frontDoorRoutes } from "../../../lib/front-door.js";
import { HttpError } from "../../errors.js";
import type { TicketIssuer } from "../../terminal/tickets.js";
import type { SandboxNotRunningError } from "../../sandbox/exec.js";
import type { TenantState } from "../../store/tenants.js";
import { TenantRequestError, type TenantDefaults } from "../../tenants/service.js";
import type { ProjectBody } from "../responses.js";
import type { ProjectRow } from "../../store/project-view.js";
import { projectStatus } from "./schemas.js";

export interface ProjectViewOptions {
  /** The address clients use for SSH (the host's public name or IP). */
  readonly publicHost: string;
  /** Where `terminal_url` points (`ws://host:9000/terminal`) and who signs its tickets. */
  readonly terminal?: { readonly urlBase: string; readonly tickets: TicketIssuer };
  /** The front door, where the host has one: each forwarded port's URL. */
  readonly frontDoor?: NonNullable<TenantDefaults["host"]>["frontDoor"];
}

/** A project as its owner sees it (`ProjectBody`); the SSH private key only in a create's answer. */
export type ProjectView = (
  row: ProjectRow,
  request: FastifyRequest,
  userId: string,
  privateKey?: string,
) => ProjectBody;

export function projectView(options: ProjectViewOptions): ProjectView {
  /**
   * A running project's `terminal_url` carries a fresh single-use ticket (≤ 60 s) bound to the caller,
   * the project and the request's Origin; fetch the project again to reconnect. An asleep one's too: the
   * terminal wakes it.
   */
  const terminalUrl = (row: ProjectRow, userId: string, origin: string | undefined) =>
    options.terminal && (row.state === "running" || row.asleep)
      ? `${options.terminal.urlBase}/${row.id}?token=${options.terminal.tickets.issue(userId, row.id, origin)}`
      : null;

  const frontDoor = options.frontDoor;
  const frontDoorUrls = (row: ProjectRow) =>
    frontDoor
      ? frontDoorRoutes(row.id, row.ports ?? [], frontDoor.port, frontDoor.domain, frontDoor.tls).map(
          ({ port, name, url }) => ({ name: name ?? null, port, url }),
        )
      : [];

  return (row, request, userId, privateKey) => ({
    project_id: row.id,
    name: row.name,
    status: projectStatus(row.state, row),
    error: row.state === "error" ? row.last_error : null,
    created_at: row.created_at.toISOString(),
    backend: row.backend,
    accelerator: row.accelerator,
    isolation: row.isolation,
    bandwidth: row.bandwidth
      ? { download_kbps: row.bandwidth.downloadKbps ?? null, upload_kbps: row.bandwidth.uploadKbps ?? null }
      : null,
    ssh: {
      host: options.publicHost,
      port: row.ssh_port,
      user: "agent",
      ...(privateKey === undefined ? {} : { private_key: privateKey }),
      ...(row.ssh_host_key ? { host_key: row.ssh_host_key } : {}),
    },
    terminal_url: terminalUrl(
      row,
      userId,
      typeof request.headers.origin === "string" ? request.headers.origin : undefined,
    ),
    operation:
      row.op_id && row.op_kind && row.op_state
        ? {
            id: row.op_id,
            kind: row.op_kind,
            state: row.op_state,
            error: row.op_error,
            progress: { events: row.op_events ?? 0, last: row.op_last },
          }
        : null,
    last_snapshot:
      row.snapshot_tag && row.snapshot_at
        ? { tag: row.snapshot_tag, created_at: row.snapshot_at.toISOString() }
        : null,
    last_backup_at: row.last_backup_at,
    idle: row.idle,
    idle_shutdown: row.idle !== "none",
    pause:
      row.pause && (row.state === "stopped" || (row.state === "updating" && !row.running))
        ? row.pause.kind === "memory"
          ? { kind: "memory", memory_bytes: row.pause.bytes, saved_at: row.pause.saved_at }
          : { kind: "files", memory_bytes: null, saved_at: null }
        : null,
    last_start: row.last_start,
    drift:
      row.drift_status && row.drift_checked_at
        ? {
            status: row.drift_status,
            checked_at: row.drift_checked_at.toISOString(),
            resources: row.drift_resources ?? 0,
            stalled: row.drift_stalled ?? false,
          }
        : null,
    front_door: frontDoorUrls(row),
    forked_from:
      row.forked_from && row.forked_at
        ? { project_id: row.forked_from, at: row.forked_at.toISOString() }
        : null,
  });
}

/** How long a client is told to wait before it asks again for room the host ran out of (503). */
export const CAPACITY_RETRY_SECONDS = 30;

/**
 * A refusal of the tenant service as the API's error: 404, 409 or 400, in its words; 503 naming what the
 * host ran out of (its config key), with a Retry-After.
 */
export const tenantError = (error: unknown): never => {
  if (error instanceof TenantRequestError && error.status === 503)
    throw new HttpError(503, "capacity_exhausted", error.message, {
      capacity: error.capacity,
      retry_after: CAPACITY_RETRY_SECONDS,
    });
  if (error instanceof TenantRequestError) {
    throw new HttpError(
      error.status,
      error.status === 404 ? "not_found" : error.status === 409 ? "conflict" : "validation_failed",
      error.message,
    );
  }
  throw error;
};

/** A 409 naming the project's status, for a sandbox the engine says is not running. */
export function sandboxNotRunning(
  id: string,
  project: { state: TenantState; running: boolean },
  error?: SandboxNotRunningError,
): HttpError {
  const status = projectStatus(project.state, { running: project.running });
  if (status === "running" && error?.reason)
    return new HttpError(
      409,
      "sandbox_not_running",
      `project ${id}'s sandbox cannot be reached: ${error.reason}`,
      {
        status,
      },
    );
  return new HttpError(
    409,
    "sandbox_not_running",
    `project ${id}'s sandbox is ${status === "running" ? `not running (its ${error?.sandboxNoun ?? "sandbox"} is down)` : status}; start it first`,
    { status },
  );
}
