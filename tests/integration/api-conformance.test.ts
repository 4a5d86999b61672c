// The API answers what GET /openapi.json says, on PGlite and on Postgres: requests generated from the
// document's own JSON Schemas (valid values and their mutations) go to every documented operation of a
// real server with a real token, and every answer's status must be documented for that operation, its
// body must match the schema documented for that status, a request valid by the document must not be
// refused as invalid, an invalid one must be, and nothing may fail with a 5xx but the documented 503 while
// the database is down. No reconciler runs: a create is only recorded (tenant and operation rows), in a
// database of the test's own that is dropped afterwards.
import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { writeFileSync } from "node:fs";
import * as path from "node:path";
import type { FastifyInstance, InjectOptions } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InviteCodes } from "../../runtime/api/invites.js";
import { dockerClient } from "../../lib/docker-client.js";
import type { Database } from "../../runtime/store/db.js";
import { databasePrerequisite } from "../../runtime/health.js";
import { driftSweepJob } from "../../runtime/jobs/drift.js";
import { JobScheduler } from "../../runtime/jobs/scheduler.js";
import { StackConfig } from "../../stacks/config.js";
import { tenantNames } from "../../components/tenant/names.js";
import { docker as dockerCli } from "../helpers/containers.js";
import {
  apiHarness,
  apiServer,
  emailOf,
  PASSWORD as password,
  TEST_SECRET as secret,
  type ApiHarness,
} from "../helpers/api.js";
import { mutations, schemaErrors, validValues, type Schema } from "../helpers/json-schema.js";
import { MCP_ACCEPT, mcpInitialize } from "../helpers/mcp.js";
import { DATABASE_KINDS, testDatabase } from "../helpers/postgres.js";

const METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] as const;
/** Statuses that say "your request is wrong", as opposed to an answer about the resource. */
/** The initialize that opens each MCP session the generated requests use. */
const initialize = mcpInitialize("conformance");

const refusals = (op: DocumentedOperation) => new Set([400, 413, 415, ...(op.security ? [401] : [])]);

interface Parameter {
  readonly name: string;
  readonly in: "path" | "query" | "header";
  readonly required: boolean;
  readonly schema: Schema;
}
interface DocumentedOperation {
  readonly security?: unknown[];
  readonly parameters?: Parameter[];
  readonly requestBody?: { required: boolean; content: Record<string, { schema: Schema }> };
  readonly responses: Record<
    string,
    { content?: Record<string, { schema: Schema }>; headers?: Record<string, unknown> }
  >;
}
type Document = Schema & { paths: Record<string, Record<string, DocumentedOperation>> };

/** One generated request, and whether the document allows it. */
interface Case {
  readonly operation: string;
  readonly method: string;
  readonly path: Record<string, string>;
  readonly query: Record<string, string>;
  readonly headers: Record<string, string>;
  /** The raw body and its content type; absent: no body at all. */
  readonly body?: { readonly type: string; readonly text: string };
  readonly what: string;
}

describe.each(DATABASE_KINDS)("the API against its OpenAPI document, on %s", (kind) => {
  let h: ApiHarness<"conformance">;
  let dir: string;
  let db: Database;
  let app: FastifyInstance;
  let config: StackConfig;
  let doc: Document;
  const run = `${kind}-${Date.now()}`;
  const email = emailOf("conformance");
  /** Real resources the generated requests may name, so that valid requests reach success paths. */
  const known = {
    token: "",
    refreshTokens: [] as string[],
    id: "",
    sessionId: "",
    operationId: "",
    execId: "",
    turnId: "",
    keyId: "",
    /** An API key's secret, for the routes that take API keys only. */
    apiKey: "",
    /** MCP sessions of that key: one that POSTs use, one that DELETE ends. */
    mcpSessions: { post: "", delete: "" },
    /** A valid body of each raw (non-JSON) request content type: any bytes, and a real tar stream. */
    rawBodies: { "application/octet-stream": "hello" } as Record<string, string>,
  };
  let sequence = 0;

  /** Every request comes from its own address: the per-address throttles are tested elsewhere. */
  const send = (c: Case) => {
    const url = `${Object.entries(c.path).reduce(
      (p, [name, value]) => p.replace(`{${name}}`, encodeURIComponent(value)),
      c.operation.split(" ")[1]!,
    )}${Object.keys(c.query).length ? `?${new URLSearchParams(c.query)}` : ""}`;
    const n = ++sequence;
    const options: InjectOptions = {
      method: c.method as "GET",
      url,
      headers: { ...c.headers, ...(c.body ? { "content-type": c.body.type } : {}) },
      remoteAddress: `10.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`,
      ...(c.body ? { payload: c.body.text } : {}),
    };
    return app.inject(options);
  };

  beforeAll(async () => {
    const database = await testDatabase(kind);
    ({ dir, db } = database);
    config = StackConfig.parse({
      target: "local",
      host: { dataDir: dir, configDir: dir },
      tenants: { subnetPool: "10.239.0.0/22", sshPortRange: [28700, 28740] },
    });
    h = await apiHarness({
      database,
      config,
      users: ["conformance"],
      server: {
        prerequisites: [databasePrerequisite(db)],
        invites: new InviteCodes(secret),
        // The test's user is an operator, so that /admin/* reaches its success paths too; its jobs find no
        // running sandbox, and the checks the sweep enqueues wait for a reconciler this test does not run.
        admins: [email],
        jobs: new JobScheduler(db, [driftSweepJob(db, 3_600_000)]),
        // The quota is small so that generated creates reach it; the rates are wide so that they do not
        // hide every other answer (their 429 is tested in api-limits).
        limits: {
          registration: "open",
          projectQuota: 4,
          rateLimits: {
            register: { burst: 10_000, perHour: 10_000 },
            createProject: { burst: 10_000, perHour: 10_000 },
          },
        },
        // backup-status asks the engine; no sandbox exists, so it answers "recorded"
        projects: { docker: dockerClient() },
      },
    });
    app = h.app;
    const user = h.users.conformance;
    known.token = user.token;
    known.refreshTokens = [user.refreshToken, (await h.login("conformance")).refresh_token];
    // An API key to revoke (the generated creates make more; this one exists before DELETE is sent).
    known.keyId = (await h.as("conformance", "POST", "/auth/api-keys", { name: "conformance" })).json().id;
    known.apiKey = (
      await h.as("conformance", "POST", "/auth/api-keys", { name: "key-only routes" })
    ).json().key;
    for (const use of ["post", "delete"] as const) {
      const opened = await app.inject({
        method: "POST",
        url: "/mcp",
        headers: { "x-api-key": known.apiKey, ...MCP_ACCEPT, "content-type": "application/json" },
        payload: JSON.stringify(initialize),
      });
      expect(opened.statusCode, opened.body).toBe(200);
      known.mcpSessions[use] = String(opened.headers["mcp-session-id"]);
    }
    const created = await h.as("conformance", "POST", "/projects", { name: "conformance" });
    expect(created.statusCode, created.body).toBe(202);
    known.id = created.json().project_id;
    known.operationId = created.json().operation.id;
    // A recorded terminal session, so that the recording's own content type is answered too.
    known.sessionId = randomUUID();
    const cast = path.join(dir, `${known.sessionId}.cast`);
    writeFileSync(cast, `${JSON.stringify({ version: 2, width: 80, height: 24 })}\n[0.1, "o", "hello"]\n`);
    await db.query(
      "insert into terminal_sessions (id, project_id, user_id, cast_path) values ($1, $2, $3, $4)",
      [known.sessionId, known.id, user.id, cast],
    );
    // The exec routes run commands in the project's sandbox: a container of the sandbox image under its
    // name stands in for the one no reconciler made here, and a background process of it is known.
    await dockerCli("rm", "-f", tenantNames(known.id).container).catch(() => undefined);
    await dockerCli(
      ...["run", "-d", "--name", tenantNames(known.id).container, "--network", "none"],
      ...["--entrypoint", "sleep", config.tenants.image, "infinity"],
    );
    const started = await h.as("conformance", "POST", `/projects/${known.id}/exec`, {
      command: ["sleep", "3600"],
      background: true,
    });
    expect(started.statusCode, started.body).toBe(202);
    known.execId = started.json().exec_id;
    // A dev server the front door finds (on loopback: the stand-in has no network), for the session of one.
    const serving = await h.as("conformance", "POST", `/projects/${known.id}/exec`, {
      command: ["python3", "-m", "http.server", "5173", "--bind", "127.0.0.1"],
      background: true,
    });
    expect(serving.statusCode, serving.body).toBe(202);
    // An agent turn, ended: the stand-in has no model key and no network, so the agent fails at once.
    const turn = await h.as("conformance", "POST", `/projects/${known.id}/agent/turns`, { prompt: "hello" });
    expect(turn.statusCode, turn.body).toBe(200);
    known.turnId = JSON.parse(turn.body.split("\n")[0]!).turn_id;
    // A tar of ASCII text is ASCII throughout (headers and NUL padding): it survives as a string body.
    writeFileSync(path.join(dir, "hello.txt"), "hello\n");
    known.rawBodies["application/x-tar"] = execFileSync("tar", ["-c", "-C", dir, "hello.txt"]).toString(
      "latin1",
    );
    doc = (await app.inject({ method: "GET", url: "/openapi.json" })).json() as Document;
  });

  afterAll(async () => {
    if (known.id) await dockerCli("rm", "-f", tenantNames(known.id).container).catch(() => undefined);
    await h?.close();
  });

  const operations = () =>
    Object.entries(doc.paths).flatMap(([p, methods]) =>
      Object.entries(methods).map(([method, op]) => ({ key: `${method.toUpperCase()} ${p}`, method, op })),
    );

  /** Whether an operation takes an API key only (the schemes it documents), not a session's token. */
  const keyOnly = (op: DocumentedOperation) =>
    (op.security ?? []).every((scheme) => Object.keys(scheme as object).join() === "apiKey");

  /** The credential headers of a valid request to `op`. */
  const credentials = (op: DocumentedOperation): Record<string, string> =>
    !op.security
      ? {}
      : keyOnly(op)
        ? { "x-api-key": known.apiKey }
        : { authorization: `Bearer ${known.token}` };

  /**
   * The MCP transport's rule the document states in words (POST /mcp's summary): an initialize opens a
   * session, so it comes alone and without Mcp-Session-Id; every other message names its session.
   */
  function mcpViolations(c: Case): string[] {
    if (c.operation !== "POST /mcp" || !c.body || c.body.type !== "application/json") return [];
    let messages: unknown[];
    try {
      messages = [JSON.parse(c.body.text) as unknown].flat();
    } catch {
      return [];
    }
    const initializes = messages.some(
      (m) => (m as { method?: unknown } | null)?.method === "initialize" && "id" in (m as object),
    );
    const session = c.headers["mcp-session-id"] !== undefined;
    if (initializes && (session || messages.length > 1)) return ["an initialize in a session or a batch"];
    if (!initializes && !session) return ["no Mcp-Session-Id outside an initialize"];
    return [];
  }

  /** Why `c` breaks the document (empty: it is valid), read from the document alone. */
  function violations(op: DocumentedOperation, c: Case): string[] {
    const problems: string[] = [];
    if (op.security && keyOnly(op)) {
      if (!c.headers["x-api-key"]) problems.push("no API key");
      else if (c.headers["x-api-key"] !== known.apiKey) problems.push("an API key the server never issued");
    } else if (op.security) {
      if (!/^Bearer [A-Za-z0-9._~+/-]+=*$/.test(c.headers.authorization ?? ""))
        problems.push("no bearer token");
      else if (c.headers.authorization !== `Bearer ${known.token}`)
        problems.push("a token the server never issued");
    }
    for (const parameter of op.parameters ?? []) {
      const given =
        parameter.in === "path"
          ? c.path[parameter.name]
          : parameter.in === "query"
            ? c.query[parameter.name]
            : c.headers[parameter.name.toLowerCase()];
      if (given === undefined) {
        if (parameter.required) problems.push(`${parameter.name} missing`);
        continue;
      }
      // A number in a URL is its decimal text (style: form / simple).
      const numeric = ["integer", "number"].includes(String(parameter.schema.type));
      const value = numeric && /^-?\d+(\.\d+)?$/.test(given) ? Number(given) : given;
      problems.push(...schemaErrors(parameter.schema, value, doc, parameter.name));
    }
    const documented = new Set((op.parameters ?? []).filter((p) => p.in === "query").map((p) => p.name));
    for (const name of Object.keys(c.query))
      if (!documented.has(name)) problems.push(`unknown query ${name}`);
    const empty = !c.body || c.body.text === "";
    if (empty) {
      if (op.requestBody?.required) problems.push("body missing");
      if (c.body && !op.requestBody) problems.push("a body where none is documented");
    } else if (!op.requestBody) problems.push("a body where none is documented");
    else {
      const media = op.requestBody.content[c.body!.type.split(";")[0]!];
      if (!media) problems.push(`content type ${c.body!.type}`);
      else if (c.body!.type.split(";")[0] !== "application/json") {
        // Raw bytes: any are valid.
      } else {
        let parsed: unknown;
        try {
          parsed = JSON.parse(c.body!.text);
          problems.push(...schemaErrors(media.schema, parsed, doc, "body"));
        } catch {
          problems.push("malformed JSON");
        }
      }
    }
    problems.push(...mcpViolations(c));
    return problems;
  }

  /** The generated requests of one operation: valid variations of each part, then mutations of each. */
  function casesOf(key: string, op: DocumentedOperation): Case[] {
    const [method] = key.split(" ");
    const emails = { email: () => `generated-${++sequence}-${run}@example.test` };
    const parameters = op.parameters ?? [];
    const realPath: Record<string, string[]> = {
      id: [known.id],
      sessionId: [known.sessionId],
      operationId: [known.operationId],
      execId: [known.execId],
      turnId: [known.turnId],
      keyId: [known.keyId],
    };
    // Header parameters naming real things (path parameters are in realPath).
    const realHeader: Record<string, string[]> = {
      "Mcp-Session-Id":
        key === "POST /mcp"
          ? [known.mcpSessions.post]
          : key === "DELETE /mcp"
            ? [known.mcpSessions.delete]
            : [],
    };
    const pathValues = (p: Parameter) => [
      ...(realPath[p.name] ?? []),
      ...(validValues(p.schema, doc, { formats: emails }) as string[]),
    ];
    const base: Case = {
      operation: key,
      method: method!,
      path: Object.fromEntries(
        parameters.filter((p) => p.in === "path").map((p) => [p.name, pathValues(p)[0]!]),
      ),
      query: {},
      // The MCP transport's Accept (the document cannot name an Accept header: OpenAPI ignores one).
      headers: { ...credentials(op), ...(key.endsWith(" /mcp") ? MCP_ACCEPT : {}) },
      what: "valid",
    };
    const json = (value: unknown) => ({ type: "application/json", text: JSON.stringify(value) });
    const bodySchema = op.requestBody?.content["application/json"]?.schema;
    const contextBodies: Record<string, unknown[]> = {
      "POST /auth/login": [{ email, password }],
      "POST /auth/refresh": [{ refresh_token: known.refreshTokens[0] }],
      "POST /auth/logout": [{ refresh_token: known.refreshTokens[1] }],
      "POST /mcp": [initialize],
      // A login's content must be the agent's JSON object (a 409 otherwise), which no generated string is.
      "PUT /auth/agent-logins/{agent}": [{ content: '{"tokens":{"access_token":"conformance"}}' }],
    };
    // An image must exist on the engine (state, like a project id): PATCH's generated bodies go without
    // one (project-settings.test.ts sends real and missing images).
    const stateless = (body: unknown) => {
      if (key !== "PATCH /projects/{id}") return [body];
      const rest = Object.fromEntries(
        Object.entries(body as Record<string, unknown>).filter(
          ([name]) => !["image", "restart"].includes(name),
        ),
      );
      return Object.keys(rest).length > 0 ? [rest] : [];
    };
    const validBodies = bodySchema
      ? [...(contextBodies[key] ?? []), ...validValues(bodySchema, doc, { formats: emails })].flatMap(
          stateless,
        )
      : [];
    const rawType = Object.keys(op.requestBody?.content ?? {}).find((type) => type !== "application/json");
    const rawBody = rawType ? { type: rawType, text: known.rawBodies[rawType]! } : undefined;
    const withBody = (c: Case): Case =>
      op.requestBody?.required ? { ...c, body: rawBody ?? json(validBodies[0]) } : c;
    const cases: Case[] = [];
    const add = (c: Case) => cases.push(c);

    // Valid: each part through its values, the others at their base.
    add(withBody(base));
    for (const p of parameters) {
      const values =
        p.in === "path"
          ? pathValues(p)
          : [
              ...(p.in === "header" ? (realHeader[p.name] ?? []) : []),
              ...(validValues(p.schema, doc) as unknown[]),
            ];
      for (const value of values) {
        const text = String(value);
        if (p.in === "path")
          add(withBody({ ...base, path: { ...base.path, [p.name]: text }, what: `${p.name}=${text}` }));
        if (p.in === "query")
          add(withBody({ ...base, query: { [p.name]: text }, what: `?${p.name}=${text}` }));
        if (p.in === "header")
          add(
            withBody({
              ...base,
              headers: { ...base.headers, [p.name.toLowerCase()]: text },
              what: `${p.name}`,
            }),
          );
      }
    }
    for (const body of validBodies) add({ ...base, body: json(body), what: "valid body" });
    if (op.requestBody && !op.requestBody.required) {
      add({ ...base, what: "no body, no content type" });
      add({ ...base, body: { type: "application/json", text: "" }, what: "empty JSON body" });
    }
    if (!op.requestBody && method !== "GET") add({ ...base, body: json({}), what: "undocumented body" });

    // Invalid: authentication, each parameter, the body, the content type, the size.
    if (op.security) {
      add(withBody({ ...base, headers: {}, what: "no token" }));
      add(withBody({ ...base, headers: { authorization: "Bearer not.a.token" }, what: "forged token" }));
      add(withBody({ ...base, headers: { authorization: "Basic YTpi" }, what: "basic auth" }));
      if (keyOnly(op)) {
        add(withBody({ ...base, headers: { "x-api-key": `sbx_${"A".repeat(43)}` }, what: "forged API key" }));
        add(
          withBody({
            ...base,
            headers: { authorization: `Bearer ${known.token}` },
            what: "a session's token",
          }),
        );
      }
    }
    for (const p of parameters) {
      const valid = p.in === "path" ? base.path[p.name]! : (validValues(p.schema, doc)[0] as unknown);
      const bad = [
        ...mutations(p.schema, valid, doc).filter((v) => typeof v !== "object" && v !== ""),
        "not-a-uuid",
        `${String(valid)}0`,
        "%00",
      ].map(String);
      for (const text of bad) {
        if (p.in === "path")
          add(
            withBody({
              ...base,
              path: { ...base.path, [p.name]: text },
              what: `${p.name}=${text.slice(0, 40)}`,
            }),
          );
        if (p.in === "query")
          add(withBody({ ...base, query: { [p.name]: text }, what: `?${p.name}=${text.slice(0, 40)}` }));
        if (p.in === "header")
          add(
            withBody({
              ...base,
              headers: { ...base.headers, [p.name.toLowerCase()]: text },
              what: `${p.name}: ${text.slice(0, 40)}`,
            }),
          );
      }
    }
    if (parameters.some((p) => p.in === "query"))
      add(withBody({ ...base, query: { unknown: "1" }, what: "unknown query" }));
    if (bodySchema) {
      for (const bad of mutations(bodySchema, validBodies.at(-1), doc))
        add({ ...base, body: json(bad), what: `body ${JSON.stringify(bad).slice(0, 60)}` });
      add({ ...base, body: { type: "application/json", text: "{nope" }, what: "malformed JSON" });
      if (op.requestBody?.required) add({ ...base, what: "no body" });
    }
    if (method !== "GET") {
      add({ ...base, body: { type: "text/plain", text: "hello" }, what: "text/plain body" });
      add({ ...base, body: { type: "application/xml", text: "<a/>" }, what: "XML body" });
      add({ ...base, body: json({ padding: "x".repeat(70_000) }), what: "oversize body" });
    }
    return cases;
  }

  /** What is wrong with one answer, by the document. */
  function answerProblems(
    op: DocumentedOperation,
    c: Case,
    response: Awaited<ReturnType<FastifyInstance["inject"]>>,
    allowServerErrors: ReadonlySet<number> = new Set(),
  ): string[] {
    const label = `${c.operation} [${c.what}] → ${response.statusCode}`;
    const documented = op.responses[String(response.statusCode)];
    if (!documented) return [`${label}: status not documented (${response.body.slice(0, 160)})`];
    const problems: string[] = [];
    if (response.statusCode >= 500 && !allowServerErrors.has(response.statusCode))
      problems.push(`${label}: server error ${response.body.slice(0, 200)}`);
    const valid = violations(op, c);
    const refused = refusals(op).has(response.statusCode);
    if (valid.length === 0 && refused)
      problems.push(`${label}: valid by the document, refused: ${response.body.slice(0, 200)}`);
    if (valid.length > 0 && !refused && allowServerErrors.size === 0)
      problems.push(`${label}: invalid by the document (${valid.join("; ")}), accepted`);
    if (response.statusCode === 429 && !/^\d+$/.test(String(response.headers["retry-after"])))
      problems.push(`${label}: 429 without Retry-After`);
    if (!documented.content) {
      if (response.body !== "") problems.push(`${label}: a body where none is documented`);
      return problems;
    }
    const type = String(response.headers["content-type"] ?? "").split(";")[0]!;
    const media = documented.content[type];
    if (!media)
      return [...problems, `${label}: content type ${type}, documented ${Object.keys(documented.content)}`];
    const body = type === "application/json" ? (JSON.parse(response.body) as unknown) : response.body;
    for (const error of schemaErrors(media.schema, body, doc)) problems.push(`${label}: ${error}`);
    return problems;
  }

  it("every documented operation, sent generated valid and invalid requests, answers as documented", async () => {
    const problems: string[] = [];
    const seen = new Map<string, Set<number>>();
    let sent = 0;
    for (const { key, op } of operations()) {
      for (const c of casesOf(key, op)) {
        const response = await send(c);
        sent++;
        const statuses = seen.get(key) ?? new Set();
        seen.set(key, statuses.add(response.statusCode));
        problems.push(...answerProblems(op, c, response));
      }
    }
    expect(problems).toEqual([]);
    // Each operation's success path was reached, and where it validates input, its refusal too.
    for (const { key, op } of operations()) {
      const statuses = [...seen.get(key)!];
      // Caddy's two (the front door's ticket redeem and forward-auth) succeed only with a ticket or cookie
      // the runtime signed, which no generated request holds, and the session needs declared ports, which
      // a generated PATCH (`ports: []`) may have removed: tests/integration/front-door.test.ts covers them.
      if (key.startsWith("GET /front-door/") || key === "POST /projects/{id}/front-door/session") continue;
      // GET /mcp's success is an event stream open for as long as its session, which inject would wait on:
      // the SDK's client opens one after its initialize in tests/integration/mcp.test.ts.
      if (key === "GET /mcp") continue;
      // A fork copies its source's home filesystem, which only a reconciler makes (none runs here), of a
      // project running or stopped with no delete queued (the generated DELETE queues one): its answers here
      // are its refusals (409, 404, 400, 401, 415, 413); tests/integration/fork.test.ts and e2b-fork.test.ts
      // reach its success on real sandboxes (E2B's fork too).
      // A project's opt-in to a login needs the caller's stored login of that very agent (the generated {agent}
      // is any of three, each stored or not as the generated PUTs and DELETEs of /auth/agent-logins left it),
      // and its opt-out one made: their answers here may all be refusals (409 naming the missing login, 404 for
      // no opt-in, 400, 401, 415, 413); tests/integration/agent-config.test.ts reaches both on real sandboxes.
      const optIn = {
        "PUT /projects/{id}/agent-logins/{agent}": 409,
        "DELETE /projects/{id}/agent-logins/{agent}": 404,
      };
      if (key in optIn) {
        expect(statuses, key).toContain(optIn[key as keyof typeof optIn]);
        continue;
      }
      if (key === "POST /projects/{id}/fork") {
        expect(statuses, key).toContain(409);
        continue;
      }
      expect(
        statuses.some((s) => s < 300),
        `${key} answered ${statuses}`,
      ).toBe(true);
      if (op.responses["400"]) expect(statuses, key).toContain(400);
      if (op.security) expect(statuses, key).toContain(401);
    }
    expect(seen.get("POST /projects")).toContain(403); // the quota, reached by generated creates
    expect(sent).toBeGreaterThan(400);
  });

  it("a documented path asked with another method is 405 with Allow; an unknown path is 404", async () => {
    const problems: string[] = [];
    for (const [template, methods] of Object.entries(doc.paths)) {
      const url = template.replace("{id}", known.id).replace("{sessionId}", known.sessionId);
      const served = Object.keys(methods).map((m) => m.toUpperCase());
      const allow = [...served, ...(served.includes("GET") ? ["HEAD"] : [])].sort().join(", ");
      for (const method of METHODS.filter((m) => !served.includes(m))) {
        const response = await app.inject({ method, url });
        if (response.statusCode !== 405 || response.headers.allow !== allow)
          problems.push(
            `${method} ${template}: ${response.statusCode}, Allow ${response.headers.allow} (want ${allow})`,
          );
        problems.push(
          ...schemaErrors(
            { $ref: "#/components/schemas/Error" },
            response.json(),
            doc,
            `${method} ${template}`,
          ),
        );
      }
    }
    // Not routable at all: a bad percent-encoding.
    const badUrl = await app.inject({
      method: "GET",
      url: "/projects/%zz",
      headers: { authorization: `Bearer ${known.token}` },
    });
    if (badUrl.statusCode !== 400) problems.push(`GET /projects/%zz: ${badUrl.statusCode}`);
    problems.push(
      ...schemaErrors({ $ref: "#/components/schemas/Error" }, badUrl.json(), doc, "/projects/%zz"),
    );
    for (const unknown of ["/nope", "/projects/x/y/z", "/auth", "/projects/a/b/c/d"]) {
      const response = await app.inject({ method: "GET", url: unknown });
      if (response.statusCode !== 404) problems.push(`GET ${unknown}: ${response.statusCode}`);
      problems.push(...schemaErrors({ $ref: "#/components/schemas/Error" }, response.json(), doc, unknown));
    }
    expect(problems).toEqual([]);
  });

  it("backup-status of a sandbox that cannot be asked (engine error, a tenant's broken daemon) is the recorded status, not a 500", async () => {
    const failing = apiServer({
      db,
      config,
      projects: {
        docker: {
          getContainer: () => ({
            exec: () => Promise.reject(Object.assign(new Error("engine failure"), { statusCode: 500 })),
          }),
        } as never,
      },
    });
    const response = await failing.inject({
      method: "GET",
      url: `/projects/${known.id}/backup-status`,
      headers: { authorization: `Bearer ${known.token}` },
    });
    await failing.close();
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toMatchObject({ project_id: known.id, source: "recorded", state: "never-run" });
  });

  // A fuzzer's PUT /sync {"mode":"manual","interval_seconds":60} answered 500: the setting's write failed in
  // the sandbox (a home the agent may not write there, as a protected path over ~/.config makes it) and the
  // failure was an internal error. The setting is taken as the document says, and such a home is a 403.
  it("PUT sync takes manual with an interval as documented; a home the agent may not write there is a 403 naming the path, never a 500", async () => {
    const sync = `/projects/${known.id}/sync`;
    const taken = await h.as("conformance", "PUT", sync, { mode: "manual", interval_seconds: 60 });
    expect([taken.statusCode, taken.json()], taken.body).toEqual([
      200,
      { mode: "manual", interval_seconds: 60 },
    ]);
    const container = tenantNames(known.id).container;
    // Root's, as a read-only bind of a protected path is to the agent.
    await dockerCli(
      "exec",
      "-u",
      "root",
      container,
      "chown",
      "root:root",
      "/home/agent/.config/agent-sandbox",
    );
    try {
      const refused = await h.as("conformance", "PUT", sync, { mode: "auto-commit", interval_seconds: 30 });
      expect(refused.statusCode, refused.body).toBe(403);
      expect(refused.json()).toMatchObject({
        error: "permission_denied",
        details: { path: "/home/agent/.config/agent-sandbox/sync" },
      });
      const unchanged = await h.as("conformance", "GET", sync);
      expect(unchanged.json()).toEqual({ mode: "manual", interval_seconds: 60 });
    } finally {
      await dockerCli(
        "exec",
        "-u",
        "root",
        container,
        "chown",
        "agent:agent",
        "/home/agent/.config/agent-sandbox",
      );
    }
  });

  // A fuzzer's path of unusual Unicode (C1 controls, private-use planes) to PUT /files/content answered 500
  // where the same request had answered 200. A path with a control character is refused, naming it; any
  // other character is a name like another: written, listed under that name, read, written again, deleted.
  it("file paths: a control character is a 400 naming path; private-use, astral and other names round-trip, again and again", async () => {
    const files = `/projects/${known.id}/files`;
    const put = (name: string, bytes: string) =>
      app.inject({
        method: "PUT",
        url: `${files}/content?path=${encodeURIComponent(name)}`,
        headers: { authorization: `Bearer ${known.token}`, "content-type": "application/octet-stream" },
        payload: bytes,
      });
    const refused: string[] = [];
    for (const name of [
      "\u008e\u00d7\u00b7",
      "a\u0085b",
      "line\nbreak",
      "carriage\rreturn",
      "\u0011x",
      "del\u007f",
    ]) {
      for (const answer of [
        await put(name, "x"),
        await h.as("conformance", "GET", `${files}/content?path=${encodeURIComponent(name)}`),
        await h.as("conformance", "GET", `${files}?path=${encodeURIComponent(name)}`),
        await h.as("conformance", "DELETE", `${files}?path=${encodeURIComponent(name)}`),
      ])
        if (answer.statusCode !== 400 || answer.json().details?.[0]?.field !== "path")
          refused.push(`${JSON.stringify(name)}: ${answer.statusCode} ${answer.body.slice(0, 120)}`);
    }
    expect(refused).toEqual([]);
    const dir = `unicode-${Date.now()}`;
    const names = [
      "\u{F0000}\u{100000}\u{E000}",
      "\u00d7\u00b7\u00ac\u00fd\u00cf",
      "\u{1F600} \u4e2d\u6587 \u0645\u0631\u062d\u0628\u0627",
      "\ufeff\u200b\u2028",
      "\u00e9".repeat(63),
      "a".repeat(255),
    ];
    for (const round of [1, 2]) {
      for (const name of names) {
        const path = `${dir}/${name}`;
        const content = `${round}:${name}`;
        const written = await put(path, content);
        expect(written.statusCode, `${round} ${JSON.stringify(name)}: ${written.body}`).toBe(200);
        expect(written.json().path).toMatch(new RegExp(`^/(home/agent|workspace)/${dir}/`));
        expect(written.json().path.endsWith(`/${path}`), written.body).toBe(true);
        const read = await h.as("conformance", "GET", `${files}/content?path=${encodeURIComponent(path)}`);
        expect([read.statusCode, read.body]).toEqual([200, content]);
      }
      const listed = await h.as("conformance", "GET", `${files}?path=${encodeURIComponent(dir)}`);
      expect(listed.statusCode, listed.body).toBe(200);
      expect(
        listed
          .json()
          .entries.map((e: { name: string }) => e.name)
          .sort(),
      ).toEqual([...names].sort());
    }
    for (const name of names) {
      const deleted = await h.as(
        "conformance",
        "DELETE",
        `${files}?path=${encodeURIComponent(`${dir}/${name}`)}`,
      );
      expect(deleted.statusCode, deleted.body).toBe(200);
    }
    // Past the byte limits stated in characters: a name of 64 non-ASCII characters, 256 ASCII.
    for (const name of ["\u00e9".repeat(64), "a".repeat(256)]) {
      const answer = await put(`${dir}/${name}`, "x");
      expect([answer.statusCode, answer.json().details?.[0]?.field]).toEqual([400, "path"]);
    }
  });

  it("with the database down, every operation answers 503 or what it documents, never another 5xx", async () => {
    await db.close();
    const problems: string[] = [];
    for (const { key, op } of operations()) {
      const [c] = casesOf(key, op);
      const response = await send(c!);
      problems.push(...answerProblems(op, c!, response, new Set([503])));
      if (response.statusCode !== 503 && op.responses["503"])
        problems.push(`${key}: ${response.statusCode} with the database down`);
    }
    expect(problems).toEqual([]);
  });
});
