// A stub of OpenAI's Responses API for Codex in a sandbox to talk to (issue 45), the counterpart of model-stub.ts:
// TLS with a test CA, reached only through the credential gateway (`tenants.credentialGateway.resolve` points
// api.openai.com at it). It speaks `POST /v1/responses` as Codex 0.169 uses it: streamed server-sent events,
// the request's tools offered in the body's `tools` or in an `additional_tools` input item (namespaces of
// function and custom tools). Its model is a script, so a test knows what the agent will do:
//
//   - the last user message asks to "run `CMD`" and no tool output follows it: a sentence, then a call of a tool
//     that runs CMD: the function `exec_command` where it is offered (Codex 0.169 with an older model, `-m o3`),
//     else the custom JavaScript tool `exec` (its default model's "code mode": `exec` alone, in an
//     `additional_tools` item, its cell calling `tools.exec_command`);
//   - the same conversation once the tool's output is in: "The command printed: <its first line>.";
//   - anything else (a title, a compaction, a prompt without a command): "Stub model: nothing to run."
//
// Every request is kept (method, path, headers, body) for the test to read.
import type * as http from "node:http";
import { serveTlsStub, textOf, type StubRequest, type TlsStub } from "./model-stub.js";

export type { StubRequest } from "./model-stub.js";

/** One item of a Responses API request's `input` (a message, a tool call, its output, the tools offered). */
interface InputItem {
  readonly type?: string;
  readonly role?: string;
  readonly content?: unknown;
  readonly output?: unknown;
  readonly tools?: readonly Tool[];
}
interface Tool {
  readonly type?: string;
  readonly name?: string;
  readonly tools?: readonly Tool[];
}

/** A tool call as the stub's model makes it: a function's JSON arguments, or a custom tool's free text. */
export type StubToolCall =
  | { readonly kind: "function"; readonly name: string; readonly arguments: Record<string, unknown> }
  | { readonly kind: "custom"; readonly name: string; readonly input: string };

/** What the stub's model says to one request: text, then perhaps a tool call. */
export interface OpenAiStubAnswer {
  readonly text: string;
  readonly toolCall?: StubToolCall;
}

const TOOL_OUTPUTS = ["function_call_output", "custom_tool_call_output"];

/**
 * What the command printed, out of a tool's output: Codex puts its own lines first (`Script completed`, `Wall
 * time 0.1 seconds`, `Process exited with code 0`), then `Output:` on a line of its own, then the command's.
 */
function commandOutput(output: string): string {
  const at = output.match(/^Output:\n/m);
  return at?.index === undefined ? output : output.slice(at.index + at[0].length);
}

/** Every tool offered, namespaces flattened: the body's `tools` and those of `additional_tools` items. */
function offeredTools(body: { tools?: readonly Tool[]; input?: readonly InputItem[] }): Tool[] {
  const flat = (tools: readonly Tool[]): Tool[] =>
    tools.flatMap((tool) => (tool.type === "namespace" ? flat(tool.tools ?? []) : [tool]));
  const extra = (body.input ?? []).filter((item) => item.type === "additional_tools");
  return flat([...(body.tools ?? []), ...extra.flatMap((item) => item.tools ?? [])]);
}

/** A call running `command` with the first tool offered that can run one (undefined: none can). */
function toolCallRunning(command: string, tools: readonly Tool[]): StubToolCall | undefined {
  const has = (type: string, name: string) => tools.some((t) => t.type === type && t.name === name);
  // `login: false`: the command alone, without a login shell's profile run before it.
  if (has("function", "exec_command"))
    return { kind: "function", name: "exec_command", arguments: { cmd: command, login: false } };
  // A JavaScript cell that runs the command through the nested `exec_command` tool and returns its output:
  // the output's lines are all the model reads back, so nothing else is said.
  if (has("custom", "exec"))
    return {
      kind: "custom",
      name: "exec",
      input: `const done = await tools.exec_command({ cmd: ${JSON.stringify(command)}, login: false });\ntext(done.output);\n`,
    };
  return undefined;
}

/** The script (above) for one Responses API request body. */
export function openAiStubAnswer(body: {
  input?: readonly InputItem[];
  tools?: readonly Tool[];
}): OpenAiStubAnswer {
  const input = body.input ?? [];
  const lastUser = input.findLastIndex((item) => item.type === "message" && item.role === "user");
  if (lastUser < 0) return { text: "Stub model: nothing to run." };
  const result = input.slice(lastUser + 1).find((item) => TOOL_OUTPUTS.includes(item.type ?? ""));
  if (result) {
    const first = commandOutput(textOf(result.output)).trim().split("\n")[0] ?? "";
    return { text: `The command printed: ${first}.` };
  }
  const asked = textOf(input[lastUser]!.content).match(/run `([^`]+)`/);
  const toolCall = asked ? toolCallRunning(asked[1]!, offeredTools(body)) : undefined;
  return toolCall ? { text: "I will run it.", toolCall } : { text: "Stub model: nothing to run." };
}

let ids = 0;
const id = (prefix: string) => `${prefix}_stub${(++ids).toString().padStart(6, "0")}`;

/** The answer's output items, as `response.output_item.done` and a whole response carry them. */
function outputItems(answer: OpenAiStubAnswer): Record<string, unknown>[] {
  const message = {
    type: "message",
    id: id("msg"),
    role: "assistant",
    status: "completed",
    content: [{ type: "output_text", text: answer.text, annotations: [] }],
  };
  const call = answer.toolCall;
  if (!call) return [message];
  return [
    message,
    call.kind === "function"
      ? {
          type: "function_call",
          id: id("fc"),
          call_id: id("call"),
          name: call.name,
          arguments: JSON.stringify(call.arguments),
          status: "completed",
        }
      : {
          type: "custom_tool_call",
          id: id("ctc"),
          call_id: id("call"),
          name: call.name,
          input: call.input,
          status: "completed",
        },
  ];
}

const usage = {
  input_tokens: 10,
  input_tokens_details: { cached_tokens: 0 },
  output_tokens: 10,
  output_tokens_details: { reasoning_tokens: 0 },
  total_tokens: 20,
};

/** The whole response object (what a non-streamed request gets, and `response.completed` carries). */
function responseJson(responseId: string, model: string, output: unknown[], status: string) {
  return {
    id: responseId,
    object: "response",
    created_at: Math.floor(Date.now() / 1000),
    status,
    model,
    output,
    usage: status === "completed" ? usage : null,
  };
}

/** The answer as the Responses API's server-sent events: the text in a few deltas, then each item whole. */
function* responseEvents(model: string, answer: OpenAiStubAnswer): Generator<Record<string, unknown>> {
  const responseId = id("resp");
  const items = outputItems(answer);
  const message = items[0]!;
  yield { type: "response.created", response: responseJson(responseId, model, [], "in_progress") };
  yield {
    type: "response.output_item.added",
    output_index: 0,
    item: { ...message, status: "in_progress", content: [] },
  };
  for (const delta of answer.text.match(/.{1,12}/gs) ?? [])
    yield {
      type: "response.output_text.delta",
      item_id: message.id,
      output_index: 0,
      content_index: 0,
      delta,
    };
  for (const [index, item] of items.entries()) {
    if (index > 0) yield { type: "response.output_item.added", output_index: index, item };
    yield { type: "response.output_item.done", output_index: index, item };
  }
  yield { type: "response.completed", response: responseJson(responseId, model, items, "completed") };
}

export interface OpenAiModelStub extends TlsStub {
  readonly requests: StubRequest[];
  /** Responses API requests only (what the model was asked). */
  responses(): StubRequest[];
  close(): Promise<void>;
}

export async function startOpenAiModelStub(host = "api.openai.com"): Promise<OpenAiModelStub> {
  const requests: StubRequest[] = [];
  const error = (response: http.ServerResponse, status: number, type: string, message: string) => {
    response.writeHead(status, { "content-type": "application/json" });
    response.end(JSON.stringify({ error: { type, message, code: null, param: null } }));
  };
  const answer = (request: http.IncomingMessage, response: http.ServerResponse, text: string) => {
    let body: Record<string, unknown> = {};
    try {
      body = text ? (JSON.parse(text) as Record<string, unknown>) : {};
    } catch {
      return error(response, 400, "invalid_request_error", "the body is not JSON");
    }
    const url = (request.url ?? "").split("?")[0]!;
    requests.push({ method: request.method ?? "", url, headers: request.headers, body });
    if (request.method !== "POST" || url !== "/v1/responses")
      return error(response, 404, "invalid_request_error", `the stub has no ${request.method} ${url}`);
    const model = typeof body.model === "string" ? body.model : "stub";
    const said = openAiStubAnswer(body as Parameters<typeof openAiStubAnswer>[0]);
    const headers = { "x-request-id": id("req") };
    if (body.stream !== true) {
      response.writeHead(200, { ...headers, "content-type": "application/json" });
      response.end(JSON.stringify(responseJson(id("resp"), model, outputItems(said), "completed")));
      return;
    }
    response.writeHead(200, { ...headers, "content-type": "text/event-stream", "cache-control": "no-cache" });
    let sequence = 0;
    for (const event of responseEvents(model, said))
      response.write(
        `event: ${String(event.type)}\ndata: ${JSON.stringify({ ...event, sequence_number: sequence++ })}\n\n`,
      );
    response.end();
  };
  const stub = await serveTlsStub(host, "agent-sandbox OpenAI model stub CA", answer);
  return {
    ...stub,
    requests,
    responses: () => requests.filter((r) => r.method === "POST" && r.url === "/v1/responses"),
  };
}
