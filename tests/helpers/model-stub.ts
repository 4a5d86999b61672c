// A stub of a model provider's API for the agents in a sandbox to talk to (issues 45 and 46): TLS with a test CA,
// reached only through the credential gateway (`tenants.credentialGateway.resolve` points the provider's host at
// it). It speaks Anthropic's Messages API as Claude Code uses it: streamed (server-sent events) or not, text
// and tool use, and count_tokens. Its model is a script, so a test knows what the agent will do:
//
//   - a request whose tools include `Bash`, and whose last user message asks to "run `CMD`" with no tool result
//     yet: a sentence, then a tool use of Bash with that command;
//   - the same conversation once the tool's result is in: "The command printed: <its first line>.";
//   - anything else (a title, a summary, a prompt without a command): "Stub model: nothing to run."
//
// Every request is kept (path, headers, body) for the test to read; `holdNext` keeps the next answer's stream
// open after its first words until released (a turn cut in the middle).
import { promises as fs } from "node:fs";
import type * as http from "node:http";
import * as https from "node:https";
import * as os from "node:os";
import * as path from "node:path";
import { makeTestCertificates } from "./tls.js";

export interface StubRequest {
  readonly method: string;
  readonly url: string;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: unknown;
}

interface ContentBlock {
  readonly type: string;
  readonly text?: string;
  readonly content?: unknown;
}
interface Message {
  readonly role: string;
  readonly content: string | ContentBlock[];
}

/** What the stub's model says to one request: text, then perhaps a tool use. */
export interface StubAnswer {
  readonly text: string;
  readonly toolUse?: { readonly name: string; readonly input: Record<string, unknown> };
}

const blocksOf = (message: Message | undefined): ContentBlock[] =>
  message === undefined
    ? []
    : typeof message.content === "string"
      ? [{ type: "text", text: message.content }]
      : message.content;

/** A message content's text: the string, or its parts' `text` joined. */
export const textOf = (content: unknown): string =>
  typeof content === "string"
    ? content
    : Array.isArray(content)
      ? content.map((part: { text?: unknown }) => (typeof part?.text === "string" ? part.text : "")).join("")
      : "";

/** The script (above) for one Messages API request body. */
export function stubAnswer(body: { messages?: Message[]; tools?: { name?: string }[] }): StubAnswer {
  const messages = body.messages ?? [];
  const lastUser = [...messages].reverse().find((m) => m.role === "user");
  const blocks = blocksOf(lastUser);
  const result = blocks.find((b) => b.type === "tool_result");
  if (result) {
    const first = textOf(result.content).trim().split("\n")[0] ?? "";
    return { text: `The command printed: ${first}.` };
  }
  const hasBash = (body.tools ?? []).some((tool) => tool.name === "Bash");
  const asked = blocks
    .filter((b) => b.type === "text")
    .map((b) => b.text ?? "")
    .join("\n")
    .match(/run `([^`]+)`/);
  if (hasBash && asked)
    return {
      text: "I will run it.",
      toolUse: { name: "Bash", input: { command: asked[1]!, description: "Run the command asked for" } },
    };
  return { text: "Stub model: nothing to run." };
}

let ids = 0;
const id = (prefix: string) => `${prefix}_stub${(++ids).toString().padStart(6, "0")}`;

/** The answer as the Messages API's non-streamed JSON. */
function messageJson(model: string, answer: StubAnswer) {
  const content: unknown[] = [{ type: "text", text: answer.text }];
  if (answer.toolUse) content.push({ type: "tool_use", id: id("toolu"), ...answer.toolUse });
  return {
    id: id("msg"),
    type: "message",
    role: "assistant",
    model,
    content,
    stop_reason: answer.toolUse ? "tool_use" : "end_turn",
    stop_sequence: null,
    usage: { input_tokens: 10, output_tokens: 10 },
  };
}

/** The answer as the Messages API's server-sent events, the text in a few deltas. */
function* messageEvents(model: string, answer: StubAnswer): Generator<[string, unknown]> {
  yield [
    "message_start",
    {
      type: "message_start",
      message: {
        id: id("msg"),
        type: "message",
        role: "assistant",
        model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: 10, output_tokens: 1 },
      },
    },
  ];
  yield [
    "content_block_start",
    { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
  ];
  yield ["ping", { type: "ping" }];
  for (const part of answer.text.match(/.{1,12}/gs) ?? [])
    yield [
      "content_block_delta",
      { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: part } },
    ];
  yield ["content_block_stop", { type: "content_block_stop", index: 0 }];
  if (answer.toolUse) {
    yield [
      "content_block_start",
      {
        type: "content_block_start",
        index: 1,
        content_block: { type: "tool_use", id: id("toolu"), name: answer.toolUse.name, input: {} },
      },
    ];
    yield [
      "content_block_delta",
      {
        type: "content_block_delta",
        index: 1,
        delta: { type: "input_json_delta", partial_json: JSON.stringify(answer.toolUse.input) },
      },
    ];
    yield ["content_block_stop", { type: "content_block_stop", index: 1 }];
  }
  yield [
    "message_delta",
    {
      type: "message_delta",
      delta: { stop_reason: answer.toolUse ? "tool_use" : "end_turn", stop_sequence: null },
      usage: { output_tokens: 10 },
    },
  ];
  yield ["message_stop", { type: "message_stop" }];
}

/** What every model stub shares: where the gateway reaches it and the CA it trusts for it. */
export interface TlsStub {
  /** The host the gateway is told to reach here (`credentialGateway.resolve`). */
  readonly host: string;
  /** `127.0.0.1:<port>`. */
  readonly address: string;
  /** The CA that signed the stub's certificate (`credentialGateway.caFile`). */
  readonly caFile: string;
  close(): Promise<void>;
}

/**
 * An HTTPS server on loopback for `host`, its certificate signed by a CA of its own (`caName`), that hands
 * `answer` each request with its body read whole (the model stubs of Anthropic's, OpenAI's and Google's APIs).
 */
export async function serveTlsStub(
  host: string,
  caName: string,
  answer: (request: http.IncomingMessage, response: http.ServerResponse, body: string) => unknown,
): Promise<TlsStub> {
  const certs = await fs.mkdtemp(path.join(os.tmpdir(), "model-stub-"));
  await makeTestCertificates(certs, caName, [`DNS:${host}`]);
  const server = https.createServer(
    {
      key: await fs.readFile(path.join(certs, "server.key")),
      cert: await fs.readFile(path.join(certs, "server.pem")),
    },
    (request, response) => {
      const chunks: Buffer[] = [];
      request.on("data", (chunk: Buffer) => chunks.push(chunk));
      request.on("end", () => void answer(request, response, Buffer.concat(chunks).toString("utf8")));
    },
  );
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    host,
    address: `127.0.0.1:${port}`,
    caFile: path.join(certs, "ca.pem"),
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await fs.rm(certs, { recursive: true, force: true });
    },
  };
}

export interface ModelStub extends TlsStub {
  readonly requests: StubRequest[];
  /** Messages API requests only (what the model was asked). */
  messages(): StubRequest[];
  /**
   * The next streamed answer to the agent's turn (a request offering tools) stops after its first text delta
   * until the returned function is called.
   */
  holdNext(): () => void;
  close(): Promise<void>;
}

export async function startModelStub(host = "api.anthropic.com"): Promise<ModelStub> {
  const requests: StubRequest[] = [];
  let hold: Promise<void> | undefined;
  let release: (() => void) | undefined;
  const answer = async (request: http.IncomingMessage, response: http.ServerResponse, text: string) => {
    let body: Record<string, unknown> = {};
    try {
      body = text ? (JSON.parse(text) as Record<string, unknown>) : {};
    } catch {
      response.writeHead(400, { "content-type": "application/json" });
      response.end(
        JSON.stringify({ type: "error", error: { type: "invalid_request_error", message: "not JSON" } }),
      );
      return;
    }
    const url = (request.url ?? "").split("?")[0]!;
    requests.push({ method: request.method ?? "", url, headers: request.headers, body });
    if (request.method === "POST" && url === "/v1/messages/count_tokens") {
      response.writeHead(200, { "content-type": "application/json" });
      response.end(JSON.stringify({ input_tokens: 10 }));
      return;
    }
    if (request.method !== "POST" || url !== "/v1/messages") {
      response.writeHead(404, { "content-type": "application/json" });
      response.end(
        JSON.stringify({
          type: "error",
          error: { type: "not_found_error", message: `the stub has no ${url}` },
        }),
      );
      return;
    }
    const model = typeof body.model === "string" ? body.model : "stub";
    const said = stubAnswer(body as Parameters<typeof stubAnswer>[0]);
    if (body.stream !== true) {
      response.writeHead(200, { "content-type": "application/json", "request-id": id("req") });
      response.end(JSON.stringify(messageJson(model, said)));
      return;
    }
    response.writeHead(200, {
      "content-type": "text/event-stream",
      "cache-control": "no-cache",
      "request-id": id("req"),
    });
    // Held: the agent's own turn (its tools offered), not a side request (a title, a summary).
    const held = Array.isArray(body.tools) && body.tools.length > 0 ? hold : undefined;
    if (held) hold = undefined;
    for (const [event, data] of messageEvents(model, said)) {
      if (response.destroyed) return;
      response.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
      if (held && event === "content_block_delta") await held;
    }
    response.end();
  };
  const stub = await serveTlsStub(host, "agent-sandbox model stub CA", answer);
  return {
    ...stub,
    requests,
    messages: () => requests.filter((r) => r.url === "/v1/messages"),
    holdNext() {
      hold = new Promise<void>((resolve) => (release = resolve));
      return () => release?.();
    },
    async close() {
      release?.();
      await stub.close();
    },
  };
}
