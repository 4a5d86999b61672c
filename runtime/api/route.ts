import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { z } from "zod";
import { HttpError } from "../errors.js";
import { inSpan } from "../../lib/telemetry.js";
import type { Queryable } from "../store/db.js";
import { ownProject, type ProjectRow } from "../store/project-view.js";
import { credentialsOf, type Auth } from "./auth.js";
import { parseInput } from "./validation.js";

/** One answer: an error (`{error, message, details?}`) when only a description is given. */
export type Answer =
  string | { readonly description: string; readonly body?: z.ZodType; readonly contentType?: string };

/**
 * Who may call a route, checked before its handler runs: `anyone`; a signed-in `user`; the `owner` of the
 * project its `id` parameter names (another user's project answers 404, as none does); an `operator`
 * (`runtime.admins`: to anyone else the route answers 404, as an unknown path does).
 */
export type Access = "anyone" | "user" | "owner" | "operator";

/**
 * One endpoint, declared once: what registers it on the server, validates its input, types its handler and
 * writes its entry in the OpenAPI document.
 */
export interface RouteDeclaration {
  readonly method: "get" | "post" | "put" | "patch" | "delete";
  /** The document's form: `/projects/{id}`. */
  readonly path: string;
  readonly summary: string;
  readonly access: Access;
  readonly params?: z.ZodType;
  readonly query?: z.ZodType;
  readonly body?: z.ZodType;
  /** A body of raw bytes of this content type instead of JSON, up to agent-sandbox:runtime.files.maxBytes. */
  readonly rawBody?: string;
  /** The route's own JSON body limit in bytes, where it is not the API's 64 KiB. */
  readonly bodyLimit?: number;
  /** The body may be left out (its schema has a default, or takes nothing). */
  readonly bodyOptional?: boolean;
  /** Header parameters, by the name clients send. */
  readonly headers?: Readonly<Record<string, z.ZodType>>;
  /** Where signing in is not the bearer JWT alone: the schemes that open it, any one of them. */
  readonly security?: readonly Readonly<Record<string, readonly string[]>>[];
  /** Documented as signed in although `access` is `anyone`: the handler tells its callers apart itself. */
  readonly documentedAuth?: boolean;
  /**
   * `false`: a signed-in session's access token only, never an API key (what makes keys: a leaked key must
   * not be able to mint others that outlive its revocation).
   */
  readonly apiKeys?: false;
  /**
   * `false`: an API key only, never a session's access token (a long-lived client's endpoint, whose sessions
   * are per key: a 15-minute token would end them mid-use).
   */
  readonly sessions?: false;
  /** Answers from the database (503 while it is unavailable); all but the two that never ask it. */
  readonly database?: false;
  /**
   * What this route answers on its own. What every route of its kind answers (401, 400, 413, 415, 503,
   * 500) is added by the document, from the route's shape.
   */
  readonly responses: Readonly<Record<number, Answer>>;
}

/** A declaration, its literal types kept (so that its handler is typed from its schemas). */
export const route = <const D extends RouteDeclaration>(declaration: D): D => declaration;

type Parsed<S> = S extends z.ZodType ? z.output<S> : undefined;
/** Header values by their lower-case names, as Fastify keys them and as a refusal names them. */
type HeaderValues<H> =
  H extends Readonly<Record<string, z.ZodType>>
    ? { [K in keyof H as Lowercase<K & string>]: z.output<H[K]> }
    : undefined;

/** What a handler is given: its input parsed, and who asks. */
export interface RouteInput<D extends RouteDeclaration, Body = Parsed<D["body"]>> {
  readonly request: FastifyRequest;
  readonly reply: FastifyReply;
  readonly params: Parsed<D["params"]>;
  readonly query: Parsed<D["query"]>;
  /** The query parsed now, for a route whose options defer it (`deferQuery`). */
  readonly readQuery: () => Parsed<D["query"]>;
  readonly body: Body;
  readonly headers: HeaderValues<D["headers"]>;
  /** The caller (every access but `anyone`). */
  readonly userId: D["access"] extends "anyone" ? undefined : string;
  /** The caller's project that `params.id` names (`owner` access). */
  readonly project: D["access"] extends "owner" ? ProjectRow : undefined;
  /** The same project read again, after the handler changed it (`owner` access). */
  readonly reloadProject: () => Promise<ProjectRow>;
}

/** Checks a raw part before its schema does, to answer in words of its own (a file path's problems). */
export type InputCheck = (raw: unknown) => void;

export interface RouteOptions<Body> {
  /** The schema that validates the body here, where the runtime's configuration narrows the declared one. */
  readonly body?: z.ZodType<Body>;
  /** Run on the raw query before it is parsed. */
  readonly checkQuery?: InputCheck;
  /**
   * The handler parses the query itself (`readQuery`), after what must come first: a route that answers 503
   * while the database is down whatever its query says.
   */
  readonly deferQuery?: boolean;
}

/** What the routes' guards ask: the access token's verifier (and its database) and the operators' emails. */
export interface RouteGuards {
  /** Absent on a runtime without accounts: only routes anyone may call can be registered. */
  readonly auth?: Auth;
  readonly operators: ReadonlySet<string>;
}

/** The answer for a project that is not the caller's, or not there: the same 404 for both. */
export const projectNotFound = () => new HttpError(404, "not_found", "project not found");

/** One of the caller's live projects; another user's project is indistinguishable from none (404). */
async function requireOwnProject(db: Queryable, userId: string, id: string): Promise<ProjectRow> {
  const project = await ownProject(db, userId, id);
  if (!project) throw projectNotFound();
  return project;
}

/** `/projects/{id}` as Fastify writes it: `/projects/:id`. */
export const fastifyPath = (path: string) => path.replace(/\{(\w+)\}/g, ":$1");

/** The declared headers' schema, keyed by lower-case name. */
const headersSchema = (headers: Readonly<Record<string, z.ZodType>>) =>
  z.object(Object.fromEntries(Object.entries(headers).map(([name, schema]) => [name.toLowerCase(), schema])));

/**
 * Registers declared routes on one server: each request is checked in one order whatever the route (the
 * caller, then its parameters, query, body and headers, then the project's owner) before its handler runs.
 */
export class Routes {
  constructor(
    readonly app: FastifyInstance,
    private readonly guards: RouteGuards,
  ) {}

  /** The same guards over an encapsulated scope of the server (a content-type parser of its own). */
  in(scope: FastifyInstance): Routes {
    return new Routes(scope, this.guards);
  }

  /** Nothing, when the caller is an operator; a 404 otherwise. */
  private async operator(auth: Auth, userId: string): Promise<void> {
    if (!(await auth.isOperator(userId, this.guards.operators)))
      throw new HttpError(404, "not_found", "not found");
  }

  /**
   * The caller's user id; a 401 for no valid credential or a session's token where only a key will do, a 403
   * for an API key where only a session will do.
   */
  private async caller(auth: Auth, declaration: RouteDeclaration, request: FastifyRequest): Promise<string> {
    const caller = await auth.caller(credentialsOf(request.headers));
    if (caller.via === "api-key" && declaration.apiKeys === false)
      throw new HttpError(
        403,
        "session_required",
        `${declaration.method.toUpperCase()} ${declaration.path} takes a signed-in session's access token, not an API key`,
      );
    if (caller.via === "session" && declaration.sessions === false)
      throw new HttpError(
        401,
        "api_key_required",
        `${declaration.method.toUpperCase()} ${declaration.path} takes an API key (X-API-Key: sbx_..., or Authorization: Bearer sbx_...), not a session's access token: make one with POST /auth/api-keys or \`sbx api-key create\``,
      );
    return caller.userId;
  }

  handle<const D extends RouteDeclaration, Body = Parsed<D["body"]>>(
    declaration: D,
    handler: (input: RouteInput<D, Body>) => unknown,
    options: RouteOptions<Body> = {},
  ): void {
    const { auth } = this.guards;
    if (declaration.access !== "anyone" && !auth)
      throw new Error(
        `${declaration.method.toUpperCase()} ${declaration.path} needs accounts, and this runtime has none`,
      );
    const schemas = {
      body: options.body ?? declaration.body,
      headers: declaration.headers && headersSchema(declaration.headers),
    };
    this.app.route({
      method: declaration.method.toUpperCase() as Uppercase<D["method"]>,
      url: fastifyPath(declaration.path),
      ...(declaration.bodyLimit ? { bodyLimit: declaration.bodyLimit } : {}),
      // Each request is a span (runtime/telemetry.ts): its route, its answer's status; the queries and the
      // work it does inside are its children.
      handler: (request, reply) =>
        inSpan(
          `${declaration.method.toUpperCase()} ${declaration.path}`,
          { "http.request.method": declaration.method.toUpperCase(), "http.route": declaration.path },
          async (span) => {
            try {
              const answer = await this.answer(declaration, handler, options, schemas, request, reply);
              span.setAttribute("http.response.status_code", reply.statusCode);
              return answer;
            } catch (error) {
              if (error instanceof HttpError) span.setAttribute("http.response.status_code", error.status);
              throw error;
            }
          },
        ),
    });
  }

  /** A request of a route {@link handle} declared: its caller, its input checked, then its handler. */
  private async answer<const D extends RouteDeclaration, Body>(
    declaration: D,
    handler: (input: RouteInput<D, Body>) => unknown,
    options: RouteOptions<Body>,
    { body: bodySchema, headers: headerSchema }: { body?: z.ZodType; headers?: z.ZodObject },
    request: FastifyRequest,
    reply: FastifyReply,
  ): Promise<unknown> {
    const { auth } = this.guards;
    const userId =
      declaration.access === "anyone" ? undefined : await this.caller(auth!, declaration, request);
    if (declaration.access === "operator") await this.operator(auth!, userId!);
    const params = declaration.params && parseInput(declaration.params, request.params, "params");
    const readQuery = () => {
      options.checkQuery?.(request.query);
      return declaration.query && parseInput(declaration.query, request.query, "query");
    };
    const query = options.deferQuery ? undefined : readQuery();
    const body = bodySchema && parseInput(bodySchema, request.body, "body");
    const headers =
      headerSchema &&
      parseInput(
        headerSchema,
        // A header sent more than once is one list, comma-separated (RFC 9110 §5.3).
        Object.fromEntries(
          Object.keys(headerSchema.shape).map((name) => {
            const value = request.headers[name];
            return [name, Array.isArray(value) ? value.join(", ") : value];
          }),
        ),
        "headers",
      );
    const reloadProject = () => requireOwnProject(auth!.db, userId!, (params as { id: string }).id);
    const project = declaration.access === "owner" ? await reloadProject() : undefined;
    return handler({
      request,
      reply,
      params,
      query,
      readQuery,
      body,
      headers,
      userId,
      project,
      reloadProject,
    } as RouteInput<D, Body>);
  }
}
