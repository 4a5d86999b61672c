// envd, the in-sandbox API E2B's SDKs call, served on the API's port under /e2b (the SDK's E2B_SANDBOX_URL):
// the Process and Filesystem services over Connect (JSON or binary, unary and streaming), /health and /files.
// Each call names its sandbox in E2b-Sandbox-Id and carries its envd access token (gate.ts); what it does
// runs in that sandbox through the runner the exec and files API use, for every backend.
import { Code, ConnectError, createContextKey, type Interceptor } from "@connectrpc/connect";
import { fastifyConnectPlugin } from "@connectrpc/connect-fastify";
import type { FastifyInstance } from "fastify";
import { filesystemService } from "./filesystem.js";
import { basicUser, checkUser, openSandbox, type EnvdOptions, type EnvdSandbox } from "./gate.js";
import { Filesystem } from "./gen/filesystem/filesystem_pb.js";
import { Process } from "./gen/process/process_pb.js";
import { registerEnvdHttp } from "./http.js";
import { processService, type SandboxOf } from "./processes.js";

export type { EnvdOptions } from "./gate.js";

/** Where envd is served: what the SDK is given as its sandbox URL. */
export const ENVD_PREFIX = "/e2b";

/** The largest Connect message envd reads (a stdin chunk, a request): more is refused as too large. */
const READ_MAX_BYTES = 8 * 1024 * 1024;

const SANDBOX = createContextKey<EnvdSandbox | undefined>(undefined);

export function registerEnvd(app: FastifyInstance, options: EnvdOptions): void {
  // The gate runs before every procedure: its refusal is a Connect error the SDK maps to its own errors.
  const gate: Interceptor = (next) => async (request) => {
    const sandbox = await openSandbox(options, (name) => request.header.get(name) ?? undefined);
    checkUser(basicUser(request.header.get("authorization")));
    request.contextValues.set(SANDBOX, sandbox);
    return next(request);
  };
  const sandboxOf: SandboxOf = (context) => {
    const sandbox = context.values.get(SANDBOX);
    if (!sandbox) throw new ConnectError("the call reached no sandbox", Code.Internal);
    return sandbox;
  };
  const processes = processService(options, sandboxOf);
  const filesystem = filesystemService(options, sandboxOf);

  void app.register(
    async (scope) => {
      // Connect reads its own bodies (JSON among them): the API's JSON parser stays outside this scope.
      scope.removeContentTypeParser("application/json");
      await scope.register(fastifyConnectPlugin, {
        interceptors: [gate],
        jsonOptions: { ignoreUnknownFields: true },
        readMaxBytes: READ_MAX_BYTES,
        routes: (router) => {
          router.service(Process, processes);
          router.service(Filesystem, filesystem);
        },
      });
      // A procedure envd does not have: the Connect error for it, as a client of any service reads it (its
      // body, whatever its type, is not read further).
      scope.addContentTypeParser("*", (_request, _payload, done) => done(null));
      scope.post("/:service(^[A-Za-z_][A-Za-z0-9_]*\\.[A-Za-z0-9_.]+$)/:method", async (request, reply) => {
        const { service, method } = request.params as { service: string; method: string };
        return reply
          .status(404)
          .type("application/json")
          .send({
            code: "unimplemented",
            message: `envd has no procedure ${service.slice(0, 100)}/${method.slice(0, 100)}`,
          });
      });
    },
    { prefix: ENVD_PREFIX },
  );
  void app.register(async (scope) => registerEnvdHttp(scope, options), { prefix: ENVD_PREFIX });
}
