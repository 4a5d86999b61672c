import { describe, expect, it } from "vitest";
import { API_OPERATIONS, openApiDocument } from "../../runtime/api/openapi.js";
import { CreateProjectBody } from "../../runtime/api/project-routes.js";
import { SquidTenantInputs } from "../../provider/resources/squid-tenant.js";
import type { Database } from "../../runtime/db.js";
import { apiServer } from "../helpers/api.js";

// Building the server does no I/O; no request below reaches the database.
const server = () => apiServer({ db: {} as Database });

describe("/openapi.json", () => {
  it("every documented route exists on the server, and the served document is the generated one", async () => {
    const app = server();
    await app.ready();
    for (const op of API_OPERATIONS) {
      expect(
        app.hasRoute({
          method: op.method.toUpperCase() as "GET",
          url: op.path.replaceAll(/\{(\w+)\}/g, ":$1"),
        }),
        `${op.method} ${op.path}`,
      ).toBe(true);
    }
    // ...and every route the server has is documented.
    const documented = API_OPERATIONS.map(
      (op) => `${op.method.toUpperCase()} ${op.path.replaceAll(/\{(\w+)\}/g, ":$1")}`,
    );
    expect([...app.routeTable].sort()).toEqual([...documented].sort());
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
    expect(get.security).toEqual([{ bearer: [] }]);
  });

  it("lists every status a route can answer, derived from its shape, each error with the error schema", () => {
    const doc = openApiDocument("0.1.0");
    type Responses = Record<string, { content?: Record<string, { schema: unknown }>; headers?: object }>;
    const responses = (path: string, method: string) =>
      (doc.paths[path]?.[method] as { responses: Responses }).responses;
    const statuses = (path: string, method: string) => Object.keys(responses(path, method)).map(Number);
    for (const op of API_OPERATIONS) {
      const listed = statuses(op.path, op.method);
      const name = `${op.method} ${op.path}`;
      expect(listed, name).toContain(500);
      if (op.auth) expect(listed, name).toContain(401);
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
    expect(statuses("/healthz", "get").sort()).toEqual([200, 401, 500, 503]);
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

  it("lengths are counted as the document counts them: in characters, not UTF-16 units", () => {
    expect(CreateProjectBody.safeParse({ name: "😀".repeat(100) }).success).toBe(true);
    expect(CreateProjectBody.safeParse({ name: "😀".repeat(101) }).success).toBe(false);
    expect(CreateProjectBody.safeParse({ name: "  " }).success).toBe(false);
    expect(CreateProjectBody.safeParse({ name: "a\u0007b" }).success).toBe(false);
    expect(CreateProjectBody.parse({ name: "  spaced  " }).name).toBe("spaced");
  });
});
