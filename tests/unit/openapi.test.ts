import { describe, expect, it } from "vitest";
import { Auth, DEFAULT_AUTH } from "../../runtime/api/auth.js";
import { API_OPERATIONS, openApiDocument } from "../../runtime/api/openapi.js";
import type { Database } from "../../runtime/db.js";
import { SecretBox } from "../../runtime/secrets.js";
import { buildServer } from "../../runtime/server.js";

// Building the server does no I/O; no request below reaches the database.
const unusedDatabase = {} as Database;

function server() {
  return buildServer({
    prerequisites: [],
    logger: false,
    auth: new Auth(unusedDatabase, { ...DEFAULT_AUTH, secret: new Uint8Array(32) }),
    projects: {
      db: unusedDatabase,
      defaults: {} as never,
      secrets: new SecretBox(Buffer.alloc(32)),
      publicHost: "127.0.0.1",
      docker: {} as never,
    },
  });
}

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
});
