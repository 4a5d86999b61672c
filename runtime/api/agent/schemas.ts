// The agent pane's routes (a prompt to the project's agent, its answer streamed and resumable): their input,
// the events of a turn, and what the sandbox's side may say (checked line by line: the sandbox is not trusted).
import { z } from "zod";
import { chars } from "../validation.js";
import { notFound, notRunning, wakeFailed, wakeTimeout } from "../answers.js";
import { EmptyBody, ProjectParams } from "../projects/schemas.js";
import { route } from "../route.js";

/** The agents a turn can run (sandbox-image/rootfs/usr/local/bin/sandbox-agent-turn knows their output). */
export const AGENTS = ["claude"] as const;
/** A prompt's most characters: a paste past it is refused (the terminal's frames are bounded alike). */
export const MAX_PROMPT_CHARS = 32_768;
/** The body's bound: the longest prompt, each character as JSON's longest escape (`\uXXXX`), and room. */
export const TURN_BODY_LIMIT = MAX_PROMPT_CHARS * 6 + 4096;

export const TurnBody = z
  .object({
    prompt: chars(1, MAX_PROMPT_CHARS)
      .regex(/[^ \t\n\r\f\v]/, { message: "must say something (it is only whitespace)" })
      .regex(/^[^\u0000]*$/, { message: "must not contain NUL characters" })
      .meta({ description: `what to ask the agent (1 to ${MAX_PROMPT_CHARS} characters)` }),
    agent: z
      .enum(AGENTS, { message: `must be one of ${AGENTS.join(", ")}` })
      .default("claude")
      .meta({ description: "the agent CLI in the sandbox that answers (Claude Code's print mode)" }),
  })
  .strict();

export const TurnParams = ProjectParams.extend({
  turnId: z.uuid({ message: "must be a turn id (UUID)" }),
}).strict();

export const TurnEventsQuery = z
  .object({
    /** Events after this `seq` (the last one the client has): a lost stream resumes where it stopped. */
    after: z.coerce.number().int().min(-1).default(-1),
  })
  .strict();

// What the sandbox's side says, one JSON object a line. Bounds: a hostile sandbox fills nothing.
const MAX_TEXT = 65_536;
export const SandboxTurnEvent = z.discriminatedUnion("type", [
  z
    .object({ type: z.literal("session"), session_id: z.string().max(200), model: z.string().max(200) })
    .strict(),
  z.object({ type: z.literal("text"), text: z.string().max(MAX_TEXT) }).strict(),
  z
    .object({ type: z.literal("command"), tool: z.string().min(1).max(100), command: z.string().max(16_384) })
    .strict(),
  z.object({ type: z.literal("output"), text: z.string().max(8192), is_error: z.boolean() }).strict(),
  z
    .object({
      type: z.literal("result"),
      text: z.string().max(MAX_TEXT),
      is_error: z.boolean(),
      duration_ms: z.number().int().min(0),
      turns: z.number().int().min(0),
      cost_usd: z.number().min(0),
    })
    .strict(),
  z.object({ type: z.literal("notice"), text: z.string().max(8192) }).strict(),
]);
export type SandboxTurnEvent = z.infer<typeof SandboxTurnEvent>;

/** One event of a turn, as the pane reads it; `seq` counts from 0 and says where to resume. */
export const TurnEvent = z.union([
  z
    .object({
      seq: z.number().int(),
      type: z.literal("turn"),
      turn_id: z.uuid(),
      agent: z.enum(AGENTS),
      /** What was asked (a pane that follows a turn it did not start shows it). */
      prompt: z.string(),
      exec_id: z.uuid(),
      started_at: z.string(),
    })
    .strict(),
  ...SandboxTurnEvent.options.map((option) => option.extend({ seq: z.number().int() })),
  z
    .object({
      seq: z.number().int(),
      type: z.literal("end"),
      /** null when the turn's end is unknown (its output stream failed). */
      exit_code: z.number().int().nullable(),
      duration_ms: z.number().int(),
      timed_out: z.boolean(),
      /** `stopped` (DELETE), `timeout`, `error`; null when the agent ended by itself. */
      killed_by: z.string().nullable(),
    })
    .strict(),
]);
export type TurnEvent = z.infer<typeof TurnEvent>;

export const TurnSummary = z
  .object({
    turn_id: z.uuid(),
    agent: z.enum(AGENTS),
    user_id: z.uuid(),
    started_at: z.string(),
    running: z.boolean(),
    /** Events so far: GET .../events?after=<events - 1> waits for the next. */
    events: z.number().int(),
    exit_code: z.number().int().nullable(),
  })
  .strict();

const ndjson = {
  description:
    "one JSON object per line (TurnEvent): `turn` first, then `session`, `text` (the answer as it streams), `command` (what the agent runs), `output`, `result`, `notice`, and `end` last",
  body: z.string(),
  contentType: "application/x-ndjson",
} as const;

export const startTurnRoute = route({
  method: "post",
  path: "/projects/{id}/agent/turns",
  summary:
    "Send a prompt to the project's agent, non-interactively, in its sandbox (the model key stays with the credential gateway): its answer and the commands it runs stream back as NDJSON, and show in the terminal's `agent` window. The turn goes on if the client leaves; GET .../events resumes it",
  params: ProjectParams,
  body: TurnBody,
  bodyLimit: TURN_BODY_LIMIT,
  access: "owner",
  responses: {
    200: ndjson,
    404: notFound,
    409: `${notRunning}; or the project has a turn running already (\`turn_running\`, naming it)`,
    500: wakeFailed,
    504: wakeTimeout,
  },
});

export const listTurnsRoute = route({
  method: "get",
  path: "/projects/{id}/agent/turns",
  summary: "The project's agent turns this runtime keeps (running, or recently ended), newest first",
  params: ProjectParams,
  access: "owner",
  responses: {
    200: { description: "turns", body: z.object({ turns: z.array(TurnSummary) }).strict() },
    404: notFound,
  },
});

export const turnEventsRoute = route({
  method: "get",
  path: "/projects/{id}/agent/turns/{turnId}/events",
  summary: "A turn's events after `after`, then the rest as they come, to its end (a lost stream resumed)",
  params: TurnParams,
  query: TurnEventsQuery,
  access: "owner",
  responses: {
    200: ndjson,
    404: "no such project, or no such turn in this runtime (a turn is kept an hour after it ends)",
  },
});

export const stopTurnRoute = route({
  method: "delete",
  path: "/projects/{id}/agent/turns/{turnId}",
  summary: "Stop a running turn (its whole process tree in the sandbox); its summary once it has ended",
  params: TurnParams,
  body: EmptyBody,
  bodyOptional: true,
  access: "owner",
  responses: {
    200: { description: "the turn, ended", body: TurnSummary },
    404: "no such project, or no such turn in this runtime",
  },
});

/** The routes above, in the document's order. */
export const agentRoutes = [startTurnRoute, listTurnsRoute, turnEventsRoute, stopTurnRoute] as const;
