// A stub of Google's Gemini API for Gemini CLI in a sandbox to talk to (issue 45), the counterpart of
// model-stub.ts: TLS with a test CA, reached only through the credential gateway (`tenants.credentialGateway
// .resolve` points generativelanguage.googleapis.com at it). It speaks `POST /v1beta/models/{model}:
// generateContent` and `:streamGenerateContent?alt=sse` as Gemini CLI 0.61 uses them, and `:countTokens`. Its
// model is a script, so a test knows what the agent will do:
//
//   - a request for JSON in a schema (`generationConfig.responseJsonSchema`: Gemini CLI's side questions, such as
//     its router's complexity score before each prompt, and its next-speaker check where `model.skipNextSpeakerCheck`
//     is false): an object of that schema, each enum at its first value except that "user" is chosen where offered
//     (the user speaks next, so the CLI ends its turn), each number at its low end (a complexity score of 1, a loop
//     confidence of 0), each string a stub sentence;
//   - a request whose tools include `run_shell_command`, and whose last user content asks to "run `CMD`" with no
//     function response yet: a sentence, then a function call of `run_shell_command` running CMD;
//   - the same conversation once the function's response is in: "The command printed: <its first line>.";
//   - anything else: "Stub model: nothing to run."
//
// Every request is kept (method, path with its query, headers, body) for the test to read.
import type * as http from "node:http";
import { serveTlsStub, type StubRequest, type TlsStub } from "./model-stub.js";

export type { StubRequest } from "./model-stub.js";

/** Gemini CLI's tool that runs a command (`bash -c <command>`). */
export const GEMINI_SHELL_TOOL = "run_shell_command";

interface Part {
  readonly text?: string;
  readonly thought?: boolean;
  readonly functionCall?: { readonly name?: string; readonly args?: unknown };
  readonly functionResponse?: { readonly name?: string; readonly response?: unknown };
}
interface Content {
  readonly role?: string;
  readonly parts?: readonly Part[];
}
/** A JSON schema as Gemini's `responseJsonSchema` carries it (types in either case: `OBJECT`, `string`). */
interface Schema {
  readonly type?: string;
  readonly properties?: Record<string, Schema>;
  readonly items?: Schema;
  readonly enum?: readonly unknown[];
  readonly minimum?: number;
}
/** A `generateContent` request body, as far as the script reads it. */
export interface GenerateContentBody {
  readonly contents?: readonly Content[];
  readonly tools?: readonly { readonly functionDeclarations?: readonly { readonly name?: string }[] }[];
  readonly generationConfig?: {
    readonly responseMimeType?: string;
    readonly responseJsonSchema?: Schema;
    readonly responseSchema?: Schema;
  };
}

/** What the stub's model says to one request: text, then perhaps a function call. */
export interface GeminiStubAnswer {
  readonly text: string;
  readonly functionCall?: { readonly name: string; readonly args: Record<string, unknown> };
}

const NOTHING = "Stub model: nothing to run.";

/** A value of `schema`: what a model asked for JSON in that schema might say. */
export function schemaExample(schema: Schema): unknown {
  if (schema.enum && schema.enum.length > 0) return schema.enum.includes("user") ? "user" : schema.enum[0];
  switch ((schema.type ?? "string").toLowerCase()) {
    case "object":
      return Object.fromEntries(
        Object.entries(schema.properties ?? {}).map(([name, property]) => [name, schemaExample(property)]),
      );
    case "array":
      return [];
    case "integer":
      return schema.minimum ?? 1;
    case "number":
      return schema.minimum ?? 0;
    case "boolean":
      return false;
    default:
      return NOTHING;
  }
}

/** A function response's text: the shell tool answers `{ output: "Output: ...\n..." }`. */
function responseText(response: unknown): string {
  if (typeof response === "string") return response;
  const output = (response as { output?: unknown } | undefined)?.output;
  return typeof output === "string" ? output : JSON.stringify(response ?? "");
}

/**
 * The first line the command printed, from the shell tool's report: Gemini CLI 0.61 sends
 * "<untrusted_context>\nOutput: <stdout and stderr>\nProcess Group PGID: 37\n</untrusted_context>" (an exit code,
 * an error or a signal on lines of their own).
 */
function firstOutputLine(report: string): string {
  const output = /^Output: ?(.*)$/m.exec(report);
  if (output) return output[1]!.trim();
  return (
    report
      .replace(/<\/?untrusted_context>/g, "")
      .trim()
      .split("\n")[0] ?? ""
  );
}

/** The script (above) for one `generateContent` request body. */
export function geminiStubAnswer(body: GenerateContentBody): GeminiStubAnswer {
  const config = body.generationConfig;
  const schema = config?.responseJsonSchema ?? config?.responseSchema;
  if (config?.responseMimeType === "application/json" || schema)
    return { text: JSON.stringify(schemaExample(schema ?? { type: "object" })) };
  const lastUser = [...(body.contents ?? [])].reverse().find((c) => c.role === "user");
  const parts = lastUser?.parts ?? [];
  const result = parts.find((p) => p.functionResponse);
  if (result) {
    return {
      text: `The command printed: ${firstOutputLine(responseText(result.functionResponse?.response))}.`,
    };
  }
  const hasShell = (body.tools ?? []).some((tool) =>
    (tool.functionDeclarations ?? []).some((f) => f.name === GEMINI_SHELL_TOOL),
  );
  const asked = parts
    .filter((p) => typeof p.text === "string" && !p.thought)
    .map((p) => p.text)
    .join("\n")
    .match(/run `([^`]+)`/);
  if (hasShell && asked)
    return {
      text: "I will run it.",
      functionCall: {
        name: GEMINI_SHELL_TOOL,
        args: { command: asked[1]!, description: "Run the command asked for" },
      },
    };
  return { text: NOTHING };
}

let ids = 0;
const responseId = () => `stub${(++ids).toString().padStart(6, "0")}`;
const usage = { promptTokenCount: 10, candidatesTokenCount: 10, totalTokenCount: 20 };

/** The answer as one `GenerateContentResponse` (the whole of a non-streamed answer). */
function responseJson(model: string, answer: GeminiStubAnswer) {
  const parts: unknown[] = [{ text: answer.text }];
  if (answer.functionCall) parts.push({ functionCall: answer.functionCall });
  return {
    candidates: [{ content: { role: "model", parts }, finishReason: "STOP", index: 0 }],
    usageMetadata: usage,
    modelVersion: model,
    responseId: responseId(),
  };
}

/**
 * The answer as the chunks of a stream: the text in a few pieces, then a last chunk with the function call (if
 * any), the finish reason and the usage. Gemini CLI retries a stream that ends without a finish reason.
 */
function* responseChunks(model: string, answer: GeminiStubAnswer): Generator<unknown> {
  const id = responseId();
  const chunk = (parts: unknown[], last: boolean) => ({
    candidates: [{ content: { role: "model", parts }, index: 0, ...(last ? { finishReason: "STOP" } : {}) }],
    ...(last ? { usageMetadata: usage } : {}),
    modelVersion: model,
    responseId: id,
  });
  const pieces = answer.text.match(/.{1,12}/gs) ?? [""];
  for (const [i, piece] of pieces.entries()) {
    const last = i === pieces.length - 1 && !answer.functionCall;
    yield chunk([{ text: piece }], last);
  }
  if (answer.functionCall) yield chunk([{ functionCall: answer.functionCall }], true);
}

export interface GeminiModelStub extends TlsStub {
  readonly requests: StubRequest[];
  /** `generateContent` and `streamGenerateContent` requests only (what the model was asked). */
  generations(): StubRequest[];
  close(): Promise<void>;
}

/** `/v1beta/models/{model}:{method}`, the query aside. */
const MODEL_METHOD = /^\/v1beta\/models\/([^/:]+):([A-Za-z]+)$/;

export async function startGeminiStub(host = "generativelanguage.googleapis.com"): Promise<GeminiModelStub> {
  const requests: StubRequest[] = [];
  /** Google's error shape (`google.rpc.Status`), which Gemini CLI reads the status and message of. */
  const fail = (response: http.ServerResponse, code: number, status: string, message: string) => {
    response.writeHead(code, { "content-type": "application/json" });
    response.end(JSON.stringify({ error: { code, message, status } }));
  };
  const answer = (request: http.IncomingMessage, response: http.ServerResponse, text: string) => {
    let body: Record<string, unknown> = {};
    try {
      body = text ? (JSON.parse(text) as Record<string, unknown>) : {};
    } catch {
      fail(response, 400, "INVALID_ARGUMENT", "the body is not JSON");
      return;
    }
    const url = request.url ?? "";
    requests.push({ method: request.method ?? "", url, headers: request.headers, body });
    const target = MODEL_METHOD.exec(url.split("?")[0]!);
    if (request.method !== "POST" || !target) {
      fail(response, 404, "NOT_FOUND", `the stub has no ${request.method} ${url}`);
      return;
    }
    const [, model, method] = target as unknown as [string, string, string];
    switch (method) {
      case "countTokens":
        response.writeHead(200, { "content-type": "application/json" });
        response.end(JSON.stringify({ totalTokens: 10 }));
        return;
      case "generateContent":
        response.writeHead(200, { "content-type": "application/json" });
        response.end(JSON.stringify(responseJson(model, geminiStubAnswer(body))));
        return;
      case "streamGenerateContent": {
        // Gemini CLI asks `?alt=sse` (server-sent events), never the API's other form (one JSON array).
        const said = geminiStubAnswer(body);
        response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
        for (const chunk of responseChunks(model, said))
          response.write(`data: ${JSON.stringify(chunk)}\r\n\r\n`);
        response.end();
        return;
      }
      default:
        fail(response, 404, "NOT_FOUND", `the stub has no method ${method}`);
    }
  };
  const stub = await serveTlsStub(host, "agent-sandbox Gemini stub CA", answer);
  return {
    ...stub,
    requests,
    generations: () => requests.filter((r) => /:(stream)?generateContent(\?|$)/i.test(r.url)),
  };
}
