// A fetch that hands the SDK client's requests to this runtime's own server in-process (Fastify's inject):
// the MCP endpoint's tools call the API as their caller, through every route's own checks (credential,
// owner, input, limits, audit), with no second connection to the API's port. Loopback HTTP would need the
// address the server listens on (a wildcard, a single interface, behind a TLS front door), count against the
// per-address connection cap, and make every caller 127.0.0.1 to the rate limits and the log; inject keeps
// the caller's own address.
import type { FastifyInstance } from "fastify";

/** Statuses whose answer has no body (a Response with one cannot be made). */
const NO_BODY = new Set([101, 204, 205, 304]);

/** A request body as inject takes it: text or bytes, the only kinds the SDK's client sends. */
function payloadOf(body: RequestInit["body"]): string | Buffer | undefined {
  if (body === undefined || body === null || typeof body === "string") return body ?? undefined;
  if (body instanceof Uint8Array) return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  if (body instanceof ArrayBuffer) return Buffer.from(body);
  throw new TypeError("an in-process request's body must be text or bytes");
}

/** A `fetch` over `app.inject`, the requests coming from `remoteAddress` (the MCP caller's). */
export function inProcessFetch(app: FastifyInstance, remoteAddress: string): typeof fetch {
  return async (input, init = {}) => {
    init.signal?.throwIfAborted();
    const url = new URL(
      typeof input === "string" ? input : input instanceof URL ? input.href : input.url,
      "http://in-process",
    );
    const answered = await app.inject({
      method: (init.method ?? "GET") as "GET",
      url: `${url.pathname}${url.search}`,
      headers: Object.fromEntries(new Headers(init.headers).entries()),
      payload: payloadOf(init.body),
      remoteAddress,
    });
    const headers = new Headers();
    for (const [name, value] of Object.entries(answered.headers))
      for (const one of [value ?? []].flat()) headers.append(name, String(one));
    return new Response(NO_BODY.has(answered.statusCode) ? null : answered.rawPayload, {
      status: answered.statusCode,
      headers,
    });
  };
}
