import { describe, expect, it } from "vitest";
import { createHash } from "node:crypto";
import { e2bControlRoutes } from "../../runtime/api/e2b/schemas.js";
import { API_ROUTES, openApiDocument } from "../../runtime/api/openapi.js";
import { fastifyPath } from "../../runtime/api/route.js";
import type { z } from "zod";
import { RegisterRequest } from "../../runtime/api/auth/routes.js";
import { CreateProjectBody, RestoreBody } from "../../runtime/api/projects/schemas.js";
import { PatchProjectBody } from "../../runtime/api/projects/settings.js";
import { PutSecretBody } from "../../runtime/api/secrets/routes.js";
import { SquidTenantInputs } from "../../provider/resources/squid-tenant.js";
import type { Database } from "../../runtime/store/db.js";
import { apiServer } from "../helpers/api.js";
import { schemaErrors, type Schema } from "../helpers/json-schema.js";

// Building the server does no I/O; no request below reaches the database.
const server = () => apiServer({ db: {} as Database });

describe("/openapi.json", () => {
  it("every documented route exists on the server, and the served document is the generated one", async () => {
    const app = server();
    await app.ready();
    for (const op of API_ROUTES) {
      expect(
        app.hasRoute({
          method: op.method.toUpperCase() as "GET",
          url: op.path.replaceAll(/\{(\w+)\}/g, ":$1"),
        }),
        `${op.method} ${op.path}`,
      ).toBe(true);
    }
    // ...and every route the server has is documented.
    const documented = API_ROUTES.map(
      (op) => `${op.method.toUpperCase()} ${op.path.replaceAll(/\{(\w+)\}/g, ":$1")}`,
    );
    // E2B's API under /e2b follows E2B's published API, not ours: declared through the route layer (the
    // caller and the input checked first), documented in docs/e2b.md, and never in this document.
    const e2b = (route: string) => route.split(" ")[1]!.startsWith("/e2b/");
    expect(app.routeTable.filter(e2b)).toEqual(
      expect.arrayContaining(
        e2bControlRoutes.map((op) => `${op.method.toUpperCase()} ${fastifyPath(op.path)}`),
      ),
    );
    expect(documented.filter(e2b)).toEqual([]);
    expect(app.routeTable.filter((route) => !e2b(route)).sort()).toEqual([...documented].sort());
    const served = await app.inject({ method: "GET", url: "/openapi.json" });
    expect(served.statusCode).toBe(200);
    expect(served.json()).toEqual(JSON.parse(JSON.stringify(openApiDocument("0.1.0"))));
    await app.close();
  });

  it("is OpenAPI 3.1 with request schemas that refuse unknown fields", () => {
    const doc = openApiDocument("0.1.0");
    expect(doc.openapi).toBe("3.1.0");
    const register = doc.paths["/auth/register"]?.post as {
      requestBody: { content: { "application/json": { schema: Record<string, unknown> } } };
    };
    expect(register.requestBody.content["application/json"].schema).toMatchObject({
      type: "object",
      required: ["email", "password"],
      additionalProperties: false,
      properties: { password: { type: "string", minLength: 12, maxLength: 1024 } },
    });
    const get = doc.paths["/projects/{id}"]?.get as { parameters: unknown[]; security: unknown[] };
    expect(get.parameters).toEqual([
      {
        name: "id",
        in: "path",
        required: true,
        schema: expect.objectContaining({ type: "string", format: "uuid" }),
      },
    ]);
    // A session's access token or an API key; making keys takes a session only.
    expect(get.security).toEqual([{ bearer: [] }, { apiKey: [] }]);
    expect((doc.paths["/auth/api-keys"]?.post as { security: unknown[] }).security).toEqual([{ bearer: [] }]);
  });

  it("lists every status a route can answer, derived from its shape, each error with the error schema", () => {
    const doc = openApiDocument("0.1.0");
    type Responses = Record<string, { content?: Record<string, { schema: unknown }>; headers?: object }>;
    const responses = (path: string, method: string) =>
      (doc.paths[path]?.[method] as { responses: Responses }).responses;
    const statuses = (path: string, method: string) => Object.keys(responses(path, method)).map(Number);
    for (const op of API_ROUTES) {
      const listed = statuses(op.path, op.method);
      const name = `${op.method} ${op.path}`;
      expect(listed, name).toContain(500);
      expect(listed, name).toContain(431);
      if (op.access !== "anyone" || op.documentedAuth) expect(listed, name).toContain(401);
      if (op.params || op.query || op.body) expect(listed, name).toContain(400);
      if (op.method !== "get") expect(listed, name).toEqual(expect.arrayContaining([400, 413, 415]));
      if (op.database !== false) expect(listed, name).toContain(503);
      for (const [status, answer] of Object.entries(responses(op.path, op.method)))
        // The front door's pages (404, "not running") go to a browser through Caddy, as HTML.
        if (Number(status) >= 400 && op.path !== "/healthz" && !answer.content?.["text/html"])
          expect(answer.content?.["application/json"]?.schema, `${name} ${status}`).toEqual({
            $ref: "#/components/schemas/Error",
          });
    }
    expect(statuses("/healthz", "get").sort()).toEqual([200, 401, 431, 500, 503]);
    expect(statuses("/projects", "post")).toEqual(expect.arrayContaining([201, 202, 200, 403, 409, 429]));
    expect(statuses("/metrics", "get")).toEqual(expect.arrayContaining([200, 401, 403]));
    expect(statuses("/auth/register", "post")).toEqual(expect.arrayContaining([201, 403, 409, 429]));
    expect(responses("/projects", "post")["429"]?.headers).toHaveProperty("Retry-After");
    expect(doc.components.schemas.Error).toMatchObject({
      required: ["error", "message"],
      properties: { error: { type: "string" }, message: { type: "string" } },
    });
  });

  it("a documented path asked with another method is 405 naming the methods it serves; an unknown path 404", async () => {
    const app = server();
    const put = await app.inject({ method: "PUT", url: "/projects/3f2504e0-4f89-41d3-9a0c-0305e82c3301" });
    expect(put.statusCode).toBe(405);
    expect(put.headers.allow).toBe("DELETE, GET, HEAD, PATCH");
    expect(put.json()).toEqual({
      error: "method_not_allowed",
      message:
        "PUT is not served at /projects/3f2504e0-4f89-41d3-9a0c-0305e82c3301; use DELETE, GET, HEAD, PATCH",
    });
    const getLogin = await app.inject({ method: "GET", url: "/auth/login" });
    expect([getLogin.statusCode, getLogin.headers.allow]).toEqual([405, "POST"]);
    const unknown = await app.inject({ method: "GET", url: "/projects/a/b/c" });
    expect([unknown.statusCode, unknown.json().error]).toEqual([404, "not_found"]);
    await app.close();
  });

  // What a path serves is decided before anything else about the request: no token (an operator's path is
  // no exception), no content type, a body that is not JSON, a method with a body by definition (QUERY).
  it("every documented path answers 405 with Allow to every method it does not serve, before its body and before authentication", async () => {
    const app = server();
    const doc = openApiDocument("0.1.0");
    const wrong: string[] = [];
    for (const [template, methods] of Object.entries(doc.paths)) {
      const url = template.replaceAll(/\{\w+\}/g, "3f2504e0-4f89-41d3-9a0c-0305e82c3301");
      const served = new Set(Object.keys(methods).map((m) => m.toUpperCase()));
      if (served.has("GET")) served.add("HEAD");
      const allow = [...served].sort().join(", ");
      for (const method of ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "QUERY"]) {
        if (served.has(method)) continue;
        const variants = [
          {},
          { headers: { authorization: "Bearer not.a.token" } },
          { headers: { "content-type": "application/json" }, payload: "{nope" },
          { headers: { "content-type": "text/plain" }, payload: "hello" },
        ];
        for (const variant of variants) {
          const answer = await app.inject({ method: method as "GET", url, ...variant });
          const got = `${answer.statusCode} ${answer.headers.allow ?? "-"}`;
          if (got !== `405 ${allow}`)
            wrong.push(
              `${method} ${template} ${JSON.stringify(variant)}: ${got} ${answer.body.slice(0, 80)}`,
            );
        }
      }
    }
    expect(wrong).toEqual([]);
    await app.close();
  });

  // The document's allowlist pattern and the tenant's Squid rules (trim, lower-case, host name or
  // .domain, never an IP literal) must take exactly the same entries.
  it.each([
    ["api.example.com", true],
    [" GitHub.COM ", true],
    [".example.com", true],
    ["registry.npmjs.org", true],
    [`${"a".repeat(63)}.com`, true],
    [`${"a".repeat(64)}.com`, false],
    [`${"abcdefghi.".repeat(25)}com`, true],
    [`${"abcdefghi.".repeat(25)}comm`, false],
    ["1.2.3.4", false],
    ["localhost", false],
    ["*.example.com", false],
    ["", false],
    ["exa mple.com", false],
    ["example.com.", false],
    ["-bad.example.com", false],
    ["example.c0m", true],
    ["example.0com", false],
    ["\u212Aelvin.example.com", false],
  ])("allowlist entry %j: %s by the document and by the validator alike", (entry, accepted) => {
    const doc = openApiDocument("0.1.0");
    const schema = (
      doc.paths["/projects"]?.post as {
        requestBody: {
          content: {
            "application/json": { schema: { properties: { allowlist: { items: { pattern: string } } } } };
          };
        };
      }
    ).requestBody.content["application/json"].schema.properties.allowlist.items;
    expect(new RegExp(schema.pattern).test(entry)).toBe(accepted);
    expect(CreateProjectBody.safeParse({ name: "p", allowlist: [entry] }).success).toBe(accepted);
    if (accepted)
      expect(SquidTenantInputs.shape.domains.element.safeParse(entry).success, "the tenant's own rule").toBe(
        true,
      );
  });

  // The document is read by validators and generators in other languages (Schemathesis: Python's re and
  // Rust's regex; an SDK's client), whose `\s`, `\d`, `\w`, `\b` and `.` take other characters than
  // JavaScript's (U+0085 is whitespace to Python and Rust, Arabic digits are digits), and some of which read
  // `\0` as an octal escape or not at all. A request pattern written only in constructs every dialect reads
  // alike means one thing to the validator and to every reader of the document.
  it("every request pattern means the same in every regex dialect, and every request format is one the validator enforces", () => {
    const doc = openApiDocument("0.1.0");
    const dialectDependent = (pattern: string): string[] => {
      const found: string[] = [];
      let inClass = false;
      for (let i = 0; i < pattern.length; i++) {
        const c = pattern[i]!;
        if (c === "\\") {
          const next = pattern[++i] ?? "";
          if ("dDwWsSbB0".includes(next)) found.push(`\\${next}`);
        } else if (c === "[") inClass = true;
        else if (c === "]") inClass = false;
        else if (c === "." && !inClass) found.push(".");
      }
      return found;
    };
    // uuid: the pattern beside it is narrower; email: its pattern and lengths imply it (EmailAddress);
    // binary: a raw body, any bytes.
    const enforcedFormats = new Set(["uuid", "email", "binary"]);
    const problems: string[] = [];
    const walk = (schema: unknown, where: string) => {
      if (Array.isArray(schema)) return schema.forEach((item, i) => walk(item, `${where}[${i}]`));
      if (typeof schema !== "object" || schema === null) return;
      const node = schema as Record<string, unknown>;
      if (typeof node.pattern === "string")
        for (const construct of dialectDependent(node.pattern))
          problems.push(`${where}: pattern ${node.pattern} uses ${construct}`);
      if (typeof node.format === "string" && !enforcedFormats.has(node.format))
        problems.push(`${where}: format ${node.format} is not one the validator enforces`);
      for (const [key, value] of Object.entries(node)) walk(value, `${where}.${key}`);
    };
    for (const [path, methods] of Object.entries(doc.paths))
      for (const [method, op] of Object.entries(methods as Record<string, Record<string, unknown>>)) {
        walk(op.parameters, `${method} ${path} parameters`);
        walk(op.requestBody, `${method} ${path} requestBody`);
      }
    expect(problems).toEqual([]);
  });

  // A body the document allows must pass the validator, and one it refuses must be refused: the table holds
  // the edges where the two were written apart (a fuzzer's finds among them).
  it.each([
    ["PATCH /projects/{id}", { ports: [{ port: 2222 }] }],
    ["PATCH /projects/{id}", { ports: [{ port: 2223, name: "web" }] }],
    ["PATCH /projects/{id}", { ports: [{ port: 3000 }, { port: 3000 }] }],
    ["PATCH /projects/{id}", { image: "registry.local:5000/team/app:v1" }],
    ["PATCH /projects/{id}", { image: "a:b:c" }],
    ["PATCH /projects/{id}", { image: "app:b/c" }],
    ["PATCH /projects/{id}", { protected_paths: ["a/../b"] }],
    ["PATCH /projects/{id}", { protected_paths: [".config/..x"] }],
    ["POST /projects", { name: "\ufeff" }],
    ["POST /projects", { name: "\u3000x" }],
    ["POST /projects/{id}/restore", { snapshot: "20261122-031502-123" }],
    ["PUT /projects/{id}/secrets/{name}", { value: "a\u0000b" }],
    ["PUT /projects/{id}/secrets/{name}", { value: "😀".repeat(8192) }],
    ["PUT /projects/{id}/secrets/{name}", { value: "x".repeat(8193) }],
    ["POST /auth/register", { email: `${"a".repeat(64)}@example.test`, password: "p".repeat(12) }],
  ] as const)("%s %j: the document and the validator agree", (operation, body) => {
    const validator: z.ZodType = {
      "PATCH /projects/{id}": PatchProjectBody,
      "POST /projects": CreateProjectBody,
      "POST /projects/{id}/restore": RestoreBody,
      "PUT /projects/{id}/secrets/{name}": PutSecretBody,
      "POST /auth/register": RegisterRequest,
    }[operation];
    const doc = openApiDocument("0.1.0") as unknown as Schema & {
      paths: Record<string, Record<string, { requestBody: { content: Record<string, { schema: Schema }> } }>>;
    };
    const [method, template] = operation.split(" ") as [string, string];
    const schema =
      doc.paths[template]![method.toLowerCase()]!.requestBody.content["application/json"]!.schema;
    const byDocument = schemaErrors(schema, body, doc).length === 0;
    const byValidator = validator.safeParse(body).success;
    expect({ byValidator }).toEqual({ byValidator: byDocument });
  });

  it("lengths are counted as the document counts them: in characters, not UTF-16 units", () => {
    expect(CreateProjectBody.safeParse({ name: "😀".repeat(100) }).success).toBe(true);
    expect(CreateProjectBody.safeParse({ name: "😀".repeat(101) }).success).toBe(false);
    expect(CreateProjectBody.safeParse({ name: "  " }).success).toBe(false);
    expect(CreateProjectBody.safeParse({ name: "a\u0007b" }).success).toBe(false);
    expect(CreateProjectBody.parse({ name: "  spaced  " }).name).toBe("spaced");
  });
});

/** JSON with every object's keys sorted: the document's content, whatever order its paths were declared in. */
const canonical = (value: unknown): string =>
  Array.isArray(value)
    ? `[${value.map(canonical).join(",")}]`
    : value !== null && typeof value === "object"
      ? `{${Object.keys(value)
          .sort()
          .map((key) => `${JSON.stringify(key)}:${canonical((value as Record<string, unknown>)[key])}`)
          .join(",")}}`
      : JSON.stringify(value);

describe("the document's content, recorded", () => {
  // The digest of the document as the routes declare it. A change to any route's schema, status or wording
  // changes it: record the new digest here with a line in the commit saying what the API changed and why.
  // Declaring each endpoint beside its handler (runtime/api/route.ts) reordered the paths by resource and
  // changed nothing else: the same digest as the 854-line table it replaced. API keys added the three
  // /auth/api-keys routes, the apiKey scheme (X-API-Key) beside bearer on every signed-in route but the one
  // that makes keys, and the bearer scheme's description (a session's JWT or an API key); a key's name is a
  // display name as a project's is (no control characters), and its revoke takes no body, as DELETE's do. The MCP server added
  // POST, GET and DELETE /mcp (API keys only; a JSON-RPC body, the session and protocol-version headers);
  // their security is the apiKey scheme alone (it said bearer too, which a session's token is refused by).
  // E2B's SDKs on a domain added GET /front-door/tls-ask (Caddy's on-demand TLS question: served or 404) and
  // GET /front-door/auth/{id}/ports/{port} (the forward-auth of an E2B sandbox's getHost(port) names).
  // A create the host has no room for (no subnet or SSH port left) is 503 with Retry-After on POST /projects
  // and E2B's create (it was 409, which says the request conflicts, not that the host is full).
  // Waking a sleeping sandbox (issue 44) added 500 `wake_failed` and 504 `wake_timeout` to POST
  // /projects/{id}/exec, /exec/stream and the files routes: a request that finds the sandbox stopped by the
  // platform starts it. The front door's forward-auth says it wakes a sleeping sandbox for its owner.
  // Fork (issue 44) added POST /projects/{id}/fork (1-10 new projects from one point of the home: 202 with
  // them and the copy's figures; 403 quota, 409 not forkable, 429, 503) and GET /projects/{id}/forks (the
  // tree), and `forked_from` (source and point, or null) to every project's view. The fork's body states
  // its one cross-field rule (with both, as many names as the count) as an anyOf.
  // The idle action (issue 44) added `idle` (pause, stop or none) to the create and PATCH bodies beside the
  // older `idle_shutdown`, `idle` and `pause` (how a stopped sandbox sleeps: its memory and its size, or its
  // files) to every project's view, and a stop's optional body `{keep_memory}` (false drops the memory).
  // `last_start` (a microVM's latest start: from its memory or its disks, and why it booted cold) joined it,
  // and operators may run the memory-retention job now (POST /admin/jobs/{job}/run).
  // gVisor (issue 48) added `isolation` (runc or gvisor) to the create's body, with its rule (not with a
  // `backend` other than container) as a `not`, and to every project's view (null for other backends); the
  // create's and PATCH's `idle`/`idle_shutdown` agreement is stated too (two `not`s: Schemathesis found a
  // contradiction answered 400 as schema-valid).
  // The agent pane (issue 46) added POST and GET /projects/{id}/agent/turns (a prompt to the project's agent,
  // its events streamed as NDJSON; the turns kept), GET .../turns/{turnId}/events (a lost stream resumed after
  // a `seq`) and DELETE .../turns/{turnId} (a stop); the audit's entries take two kinds more (`agent_prompt`,
  // `agent_command`) and each session says its `kind` (terminal or agent). A turn's body may be 192 KiB (the
  // longest prompt, every character escaped); its DELETE takes no body, as DELETE's do.
  // Nested virtualisation (issue 45) added `nested_virtualization` (a boolean) to the create's body.
  // The dev servers found by themselves (issue 45) added GET /projects/{id}/dev-servers, POST
  // /projects/{id}/dev-servers/session, Caddy's GET /front-door/dev/auth?host= and /front-door/dev/session?host=,
  // and `private_ports` to PATCH /projects/{id}.
  // Agent configuration and logins (issue 45) added GET/PUT/DELETE /auth/agent-config, GET /auth/agent-logins,
  // PUT/DELETE /auth/agent-logins/{agent} and PUT/DELETE /projects/{id}/agent-logins/{agent}.
  // Bandwidth caps (issue 45) added `bandwidth` ({download_kbps, upload_kbps}, kbit/s; PATCH's nullable) to the
  // create's body (not with a `backend` other than container, as a `not`), to PATCH and to every project's view.
  // A microVM's and a Pod's dev servers found too (issue 48): the dev-server routes' 409 says when a kubernetes
  // Pod admits no front door, where it said a backend's ports were declared.
  const RECORDED = "ff4a587e971e015148013346f8d1637305aea3c617d3088a8aca88798e9f1119";

  it("is the recorded one", () => {
    const digest = createHash("sha256")
      .update(canonical(openApiDocument("0.0.0")))
      .digest("hex");
    expect(digest, "the API's document changed: record the new digest and say why").toBe(RECORDED);
  });
});
