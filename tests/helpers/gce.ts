// What a GCE VM reaches besides its own disk, for the GCP host test (tests/gcp-host/): the metadata server
// (instance attributes, the service account's tokens) and Google's API hosts, each served on this machine. The
// VM's container resolves metadata.google.internal, storage.googleapis.com and <region>-docker.pkg.dev to the
// address these listen on.
import { randomBytes } from "node:crypto";
import { createServer, request as httpRequest, type Server } from "node:http";
import { createServer as createTlsServer } from "node:https";
import type { TestCertificates } from "./tls.js";

export interface MetadataRequest {
  readonly path: string;
  /** The `Metadata-Flavor` header it carried (GCE refuses a request without `Google`). */
  readonly flavor: string | undefined;
}

export interface MetadataServer {
  readonly requests: MetadataRequest[];
  /** The access tokens handed out, in order. */
  readonly tokens: string[];
  close(): Promise<void>;
}

export interface MetadataOptions {
  readonly address: string;
  readonly port: number;
  readonly projectId: string;
  readonly serviceAccountEmail: string;
  /** Instance attributes (`startup-script`, ...). */
  readonly attributes: Record<string, string>;
}

const listen = (server: Server, port: number, address: string) =>
  new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, address, () => resolve());
  });

const close = (server: Server) =>
  new Promise<void>((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  });

/** GCE's metadata server, as much of it as a host and Google's client libraries ask of it. */
export async function startMetadataServer(options: MetadataOptions): Promise<MetadataServer> {
  const requests: MetadataRequest[] = [];
  const tokens: string[] = [];
  const v1 = "/computeMetadata/v1";
  const answers: Record<string, () => { type: string; body: string }> = {
    [`${v1}/project/project-id`]: () => ({ type: "application/text", body: options.projectId }),
    [`${v1}/instance/service-accounts/default/email`]: () => ({
      type: "application/text",
      body: options.serviceAccountEmail,
    }),
    [`${v1}/instance/service-accounts/default/token`]: () => {
      const token = `ya29.test-${randomBytes(12).toString("hex")}`;
      tokens.push(token);
      return {
        type: "application/json",
        body: JSON.stringify({ access_token: token, expires_in: 3599, token_type: "Bearer" }),
      };
    },
    ...Object.fromEntries(
      Object.entries(options.attributes).map(([name, value]) => [
        `${v1}/instance/attributes/${name}`,
        () => ({ type: "application/text", body: value }),
      ]),
    ),
  };
  const server = createServer((request, response) => {
    const url = new URL(request.url ?? "/", "http://metadata.google.internal");
    const flavor = request.headers["metadata-flavor"] as string | undefined;
    requests.push({ path: url.pathname, flavor });
    response.setHeader("Metadata-Flavor", "Google");
    const answer = answers[url.pathname];
    if (url.pathname === "/" || url.pathname === `${v1}/`) {
      response.end("computeMetadata/\n");
    } else if (flavor !== "Google") {
      response.writeHead(403, { "content-type": "text/plain" });
      response.end("Missing required header: Metadata-Flavor: Google\n");
    } else if (!answer) {
      response.writeHead(404, { "content-type": "text/plain" });
      response.end(`${url.pathname} not found\n`);
    } else {
      const { type, body } = answer();
      response.writeHead(200, { "content-type": type });
      response.end(body);
    }
  });
  await listen(server, options.port, options.address);
  return { requests, tokens, close: () => close(server) };
}

export interface HostRoute {
  /** `127.0.0.1:<port>` of the plain-HTTP server behind the name. */
  readonly target: string;
  /** Send the target's own host:port as Host (fake-gcs serves path-style downloads only on its public host). */
  readonly rewriteHost?: boolean;
}

export interface TlsRouter {
  /** Each request's Host and path, in order. */
  readonly requests: { host: string; method: string; path: string; authorization: string | undefined }[];
  close(): Promise<void>;
}

/** HTTPS on `address:port` for several names, each proxied to its plain-HTTP server on loopback. */
export async function startTlsRouter(
  address: string,
  port: number,
  ca: Pick<TestCertificates, "cert" | "key">,
  routes: Record<string, HostRoute>,
): Promise<TlsRouter> {
  const requests: TlsRouter["requests"] = [];
  const server = createTlsServer({ cert: ca.cert, key: ca.key }, (request, response) => {
    const host = (request.headers.host ?? "").replace(/:443$/, "");
    requests.push({
      host,
      method: request.method ?? "",
      path: request.url ?? "",
      authorization: request.headers.authorization,
    });
    const route = routes[host];
    if (!route) {
      response.writeHead(421, { "content-type": "text/plain" });
      response.end(`no route for ${host}\n`);
      return;
    }
    const [targetHost, targetPort] = route.target.split(":");
    const upstream = httpRequest(
      {
        host: targetHost,
        port: Number(targetPort),
        method: request.method,
        path: request.url,
        headers: {
          ...request.headers,
          ...(route.rewriteHost ? { host: route.target } : {}),
          "x-forwarded-proto": "https",
        },
      },
      (answer) => {
        response.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(response);
      },
    );
    upstream.on("error", (error) => {
      if (!response.headersSent) response.writeHead(502, { "content-type": "text/plain" });
      response.end(`${host}: ${error.message}\n`);
    });
    request.pipe(upstream);
  });
  await listen(server, port, address);
  return { requests, close: () => close(server) };
}
