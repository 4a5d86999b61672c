import type { Queryable } from "../store/db.js";

/** One request the credential gateway forwarded (or refused) for a project: never the key. */
export interface GatewayRequest {
  readonly at: string;
  readonly provider: string;
  readonly host: string;
  readonly method: string;
  /** The path, without its query string (a Gemini client may put a key there). */
  readonly path: string;
  /** The upstream's status, the gateway's own refusal's, or null when the upstream never answered. */
  readonly status: number | null;
  readonly request_bytes: number;
  readonly response_bytes: number;
  readonly duration_ms: number;
  readonly error: string | null;
}

export async function recordGatewayRequest(
  db: Queryable,
  projectId: string,
  request: GatewayRequest,
): Promise<void> {
  await db.query(
    `insert into gateway_requests
       (project_id, at, provider, host, method, path, status, request_bytes, response_bytes, duration_ms, error)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
    [
      projectId,
      request.at,
      request.provider,
      request.host,
      request.method,
      request.path,
      request.status,
      request.request_bytes,
      request.response_bytes,
      request.duration_ms,
      request.error,
    ],
  );
}

/** The project's newest requests first. */
export async function gatewayRequests(
  db: Queryable,
  projectId: string,
  limit = 100,
): Promise<GatewayRequest[]> {
  const { rows } = await db.query<GatewayRequest & { at: Date | string; request_bytes: string | number }>(
    `select at, provider, host, method, path, status, request_bytes, response_bytes, duration_ms, error
       from gateway_requests where project_id = $1 order by id desc limit $2`,
    [projectId, limit],
  );
  return rows.map((row) => ({
    ...row,
    at: new Date(row.at).toISOString(),
    request_bytes: Number(row.request_bytes),
    response_bytes: Number(row.response_bytes),
  }));
}
