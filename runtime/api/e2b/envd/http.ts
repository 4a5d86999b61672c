// envd's plain HTTP endpoints: GET /health, and /files, a file's bytes down (GET) and up (POST: one file as
// application/octet-stream, or files as multipart/form-data, each part's filename its path when no path is
// asked), through the files API's script (runtime/sandbox/files.ts) as the agent, bounded by
// agent-sandbox:runtime.files.maxBytes. Refusals are `{code, message}` with envd's HTTP status.
import { randomUUID } from "node:crypto";
import { gunzipSync } from "node:zlib";
import { Code, ConnectError } from "@connectrpc/connect";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { FILES_SCRIPT } from "../../../sandbox/files.js";
import { StatusLine } from "../../files/streams.js";
import { checkStatus } from "./fs-script.js";
import { checkUser, envdHttpStatus, notRunning, openSandbox, sandboxPath, type EnvdOptions } from "./gate.js";
import { multipartFiles } from "./multipart.js";

/** Room for a multipart body's boundaries and part headers beyond the files' bytes. */
const MULTIPART_OVERHEAD = 64 * 1024;

/** A refusal as envd answers it: its status, `{code, message}`. */
function refuse(reply: FastifyReply, error: unknown, request: FastifyRequest) {
  const refusal = error instanceof ConnectError ? error : undefined;
  if (!refusal) request.log.error({ err: error }, "envd files request failed");
  const status = refusal ? envdHttpStatus(refusal.code) : 500;
  return reply.status(status).send({ code: status, message: refusal?.rawMessage ?? "internal error" });
}

const query = (request: FastifyRequest) => request.query as Record<string, string | undefined>;

export function registerEnvdHttp(scope: FastifyInstance, options: EnvdOptions): void {
  const { maxBytes } = options.limits.files;
  const header = (request: FastifyRequest) => (name: string) => {
    const value = request.headers[name];
    return Array.isArray(value) ? value[0] : value;
  };

  scope.get("/health", async (_request, reply) => reply.status(204).send());

  scope.get("/files", async (request, reply) => {
    try {
      const sandbox = await openSandbox(options, header(request));
      checkUser(query(request).username);
      const path = sandboxPath(query(request).path ?? "");
      const id = randomUUID();
      const statusLine = new StatusLine();
      let settle!: (line: string) => void;
      const status = new Promise<string>((resolve) => (settle = resolve));
      const chunks: Buffer[] = [];
      const started = await sandbox.runner
        .start(
          id,
          { argv: ["/bin/sh", "-c", FILES_SCRIPT, "envd-files", "read", path, String(maxBytes)] },
          (stream, chunk) => {
            if (stream === "stdout") return void chunks.push(chunk);
            const line = statusLine.push(chunk);
            if (line !== undefined) settle(line);
          },
        )
        .catch((error: unknown) => {
          throw notRunning(sandbox.projectId, error);
        });
      void started.exited.then(
        (code) => settle(`err exit the read ended (exit code ${code}) without a status`),
        () => settle("err exit the read's stream failed"),
      );
      checkStatus(await status, path);
      await started.exited;
      const body = Buffer.concat(chunks);
      return reply.type("application/octet-stream").header("cache-control", "no-store").send(body);
    } catch (error) {
      return refuse(reply, error, request);
    }
  });

  // Bodies are taken as bytes here (bounded below), whatever the API's JSON limit.
  scope.addContentTypeParser(
    "*",
    { parseAs: "buffer", bodyLimit: maxBytes + MULTIPART_OVERHEAD },
    (_r, body, done) => done(null, body),
  );
  scope.post("/files", { bodyLimit: maxBytes + MULTIPART_OVERHEAD }, async (request, reply) => {
    try {
      const sandbox = await openSandbox(options, header(request));
      checkUser(query(request).username);
      const asked = query(request).path;
      const files = uploadedFiles(request, asked, maxBytes);
      const written = [];
      for (const file of files) {
        const path = sandboxPath(file.path);
        const argv = ["/bin/sh", "-c", FILES_SCRIPT, "envd-files", "write", path, "644"];
        const result = await sandbox.runner
          .run(argv, { stdin: file.data, timeoutMs: 300_000 })
          .catch((error: unknown) => {
            throw notRunning(sandbox.projectId, error);
          });
        checkStatus(result.stderr.split("\n")[0], path);
        written.push({ name: path.slice(path.lastIndexOf("/") + 1), type: "file", path });
      }
      return reply.send(written);
    } catch (error) {
      return refuse(reply, error, request);
    }
  });
}

/** The files a POST /files body carries, each with the path it goes to. */
function uploadedFiles(request: FastifyRequest, asked: string | undefined, maxBytes: number) {
  const type = request.headers["content-type"] ?? "";
  let body = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
  if (/^multipart\/form-data/i.test(type)) {
    const files = multipartFiles(body, type).map((part) => ({
      path: asked ?? part.filename ?? "",
      data: part.data,
    }));
    if (files.length === 0)
      throw new ConnectError("the multipart body has no file part", Code.InvalidArgument);
    return files;
  }
  if (!asked) throw new ConnectError("path: the query must name the file to write", Code.InvalidArgument);
  if (/gzip/i.test(String(request.headers["content-encoding"] ?? ""))) {
    try {
      body = gunzipSync(body, { maxOutputLength: maxBytes });
    } catch (error) {
      throw new ConnectError(
        `the gzip body could not be read: ${(error as Error).message}`,
        Code.InvalidArgument,
      );
    }
  }
  if (body.length > maxBytes)
    throw new ConnectError(
      `the file is ${body.length} bytes, more than agent-sandbox:runtime.files.maxBytes (${maxBytes})`,
      Code.ResourceExhausted,
    );
  return [{ path: asked, data: body }];
}
