// The console's agent pane (issue 46; docs/terminals.md#the-agent-pane): a prompt to the project's agent, run
// non-interactively in its sandbox by sandbox-agent-turn (the image's), its answer and the commands it runs
// streamed back as NDJSON. A turn is a session of its own: its prompt and each command go to the append-only
// audit (redacted as typed input is), its recording is the turn as the terminal's `agent` window showed it, and
// the command that ran it is in the exec audit. The model key is the credential gateway's: nothing of it
// reaches the browser or the sandbox. A turn outlives its client's connection (kept an hour after its end),
// so a lost stream resumes; one turn at a time per project.
import { randomUUID } from "node:crypto";
import * as path from "node:path";
import { PassThrough } from "node:stream";
import type { FastifyReply, FastifyRequest } from "fastify";
import { HttpError } from "../../errors.js";
import { SandboxNotRunningError } from "../../sandbox/exec.js";
import type { SandboxRunners } from "../../sandbox/runner.js";
import type { Database } from "../../store/db.js";
import { recordTerminalSessionEnd, recordTerminalSessionStart } from "../../store/terminal.js";
import { AuditLog, CastRecorder } from "../../terminal/recording.js";
import { SecretMatchers, secretPatterns, StreamRedactor } from "../../terminal/redact.js";
import { Execution } from "../exec/execution.js";
import { sandboxNotRunning } from "../projects/view.js";
import type { Routes } from "../route.js";
import { awake } from "../wake.js";
import {
  listTurnsRoute,
  startTurnRoute,
  stopTurnRoute,
  turnEventsRoute,
  type TurnSummary,
  AGENTS,
} from "./schemas.js";
import { SandboxLines, TurnLog, TurnStore, type UnnumberedEvent } from "./turns.js";
import type { z } from "zod";

export interface AgentRoutesOptions {
  readonly db: Database;
  readonly sandboxes: SandboxRunners;
  /** Where the turns' recordings go (the terminal's: runtime/terminal/recording.ts). */
  readonly recordingsDir: string;
  /** The project's secret values, kept out of the audit and the recording as typed input's are. */
  readonly secretValues?: (projectId: string) => Promise<readonly string[]>;
  /** How long a turn may run before its processes are killed. */
  readonly turnTimeoutSeconds?: number;
  /** How long an ended turn stays readable. */
  readonly keepEndedMs?: number;
}

/** The sandbox's side of a turn: the agent named, the turn's id (the prompt goes on stdin). */
const HELPER = 'exec sandbox-agent-turn "$0" "$1"';
const DEFAULT_TURN_TIMEOUT_S = 1800;
const KEEP_ENDED_MS = 60 * 60 * 1000;
/** Ended turns kept per project, and of all projects, whatever their age. */
const ENDED_KEPT = 10;
const ENDED_KEPT_TOTAL = 200;
/** The recording's screen (the pane's text is wrapped by the player). */
const CAST_SIZE = { cols: 120, rows: 40 };
const DIM = "\x1b[2m";
const CYAN = "\x1b[36m";
const RESET = "\x1b[0m";

interface Turn {
  readonly id: string;
  readonly projectId: string;
  readonly userId: string;
  readonly agent: (typeof AGENTS)[number];
  readonly startedAt: Date;
  readonly log: TurnLog;
  execution?: Execution;
  endedAt?: number;
  /** Settles once the turn's end is in its log (and `endedAt` set). */
  ended?: Promise<void>;
}

export function registerAgentRoutes(routes: Routes, options: AgentRoutesOptions): void {
  const { db, sandboxes } = options;
  const turns = new TurnStore<Turn>({
    keepEndedMs: options.keepEndedMs ?? KEEP_ENDED_MS,
    perProject: ENDED_KEPT,
    total: ENDED_KEPT_TOTAL,
  });
  const matchers = new SecretMatchers();

  const summary = (turn: Turn): z.infer<typeof TurnSummary> => ({
    turn_id: turn.id,
    agent: turn.agent,
    user_id: turn.userId,
    started_at: turn.startedAt.toISOString(),
    running: turn.endedAt === undefined,
    events: turn.log.events.length,
    exit_code: turn.execution?.exitCode ?? null,
  });

  /** The caller's turn `turnId` of project `id`. */
  const ownTurn = (id: string, turnId: string): Turn => {
    const turn = turns.get(id, turnId);
    if (!turn)
      throw new HttpError(404, "not_found", `project ${id} has no agent turn ${turnId} in this runtime`);
    return turn;
  };

  /** Redacts the project's secret values from `text` (whole: a prompt or a command, not a stream). */
  const redactor = async (projectId: string) => {
    const values = options.secretValues ? await options.secretValues(projectId) : [];
    const matcher = matchers.get(secretPatterns(values, "input"));
    return (text: string): Buffer => {
      const redactor = new StreamRedactor(matcher);
      return Buffer.concat([redactor.push(Buffer.from(text)), redactor.flush()]);
    };
  };

  /** Streams the turn's events after `after` to the client, as NDJSON, to the turn's end or the client's. */
  const stream = (request: FastifyRequest, reply: FastifyReply, turn: Turn, after: number) => {
    const out = new PassThrough();
    out.on("error", () => undefined);
    const gone = () => out.destroyed || request.raw.socket?.destroyed === true;
    void (async () => {
      for await (const event of turn.log.read(after, gone)) {
        if (gone()) break;
        if (!out.write(`${JSON.stringify(event)}\n`))
          await new Promise<void>((resolve) => {
            out.once("drain", resolve);
            out.once("close", resolve);
          });
      }
      out.end();
    })();
    return reply.type("application/x-ndjson; charset=utf-8").header("cache-control", "no-store").send(out);
  };

  routes.handle(startTurnRoute, async ({ request, reply, userId, params: { id }, body, project }) => {
    const running = turns.running(id);
    if (running)
      throw new HttpError(
        409,
        "turn_running",
        `project ${id} has an agent turn running already (${running.id}, since ${running.startedAt.toISOString()}): wait for its end, or stop it (DELETE /projects/${id}/agent/turns/${running.id})`,
        { turn_id: running.id },
      );
    const turn: Turn = {
      id: randomUUID(),
      projectId: id,
      userId,
      agent: body.agent,
      startedAt: new Date(),
      log: new TurnLog(),
    };
    // Claimed before the first await: a second prompt sent meanwhile is the 409 above.
    turns.add(turn);
    /** What the sandbox says before the turn's first event is out: said after it, in order. */
    let early: UnnumberedEvent[] | undefined = [];
    let record: (event: UnnumberedEvent) => void = () => undefined;
    const said = (event: UnnumberedEvent) => {
      if (early) early.push(event);
      else {
        turn.log.add(event);
        record(event);
      }
    };
    const lines = new SandboxLines(said);
    let redact: (text: string) => Buffer;
    let execution: Execution;
    try {
      redact = await redactor(id);
      const argv = ["bash", "-lc", HELPER, body.agent, turn.id];
      execution = await awake(db, request, id, async () => {
        const started = new Execution(
          randomUUID(),
          id,
          argv,
          { command: argv, stdin: body.prompt },
          await sandboxes(id),
          db,
          request.log,
        );
        await started.start(userId, options.turnTimeoutSeconds ?? DEFAULT_TURN_TIMEOUT_S, (stream, chunk) => {
          if (stream === "stdout") lines.push(chunk);
          else said({ type: "notice", text: chunk.toString("utf8").slice(0, 8192) });
        });
        return started;
      });
    } catch (error) {
      turns.delete(turn.id);
      if (error instanceof SandboxNotRunningError) throw sandboxNotRunning(id, project, error);
      throw error;
    }
    turn.execution = execution;
    const castPath = path.join(options.recordingsDir, id, `${turn.id}.cast`);
    const recorder = new CastRecorder(castPath, CAST_SIZE, { title: `agent turn (${body.agent})` });
    const audit = new AuditLog(db, { session: turn.id, project: id, user: userId });
    /** Settles once the turn's first event is out (its end waits for it). */
    let opened!: () => void;
    const ready = new Promise<void>((resolve) => (opened = resolve));
    turn.ended = execution.finished.then(async () => {
      await ready;
      lines.end();
      turn.log.add({
        type: "end",
        exit_code: execution.exitCode,
        duration_ms: execution.durationMs,
        timed_out: execution.timedOut,
        killed_by: execution.killedBy,
      });
      turn.endedAt = Date.now();
    });
    void turn.ended.then(async () => {
      await audit.flush();
      await recorder.close();
      await recordTerminalSessionEnd(db, turn.id, {
        code: execution.exitCode ?? -1,
        reason: execution.killedBy ?? (execution.exitCode === 0 ? "the turn ended" : "the agent failed"),
        inputBytes: Buffer.byteLength(body.prompt),
        outputBytes: execution.bytes.stdout,
      }).catch((error: unknown) => request.log.error({ err: error, turn: turn.id }, "agent turn not closed"));
    });
    try {
      await recordTerminalSessionStart(db, { id: turn.id, projectId: id, userId, castPath, kind: "agent" });
    } catch (error) {
      // A turn that cannot be audited does not run.
      opened();
      await execution.kill("error");
      throw error;
    }
    audit.record("agent_prompt", redact(body.prompt));
    /** The turn as the terminal's window shows it, for the recording; commands for the audit. */
    const cast = (text: string) => recorder.output(redact(text.replace(/\r?\n/g, "\r\n")));
    record = (event) => {
      switch (event.type) {
        case "text":
          cast(event.text);
          break;
        case "command":
          audit.record(
            "agent_command",
            redact(event.tool === "Bash" ? event.command : `${event.tool} ${event.command}`),
          );
          cast(`\n${CYAN}${event.tool === "Bash" ? "$" : `● ${event.tool}`} ${event.command}${RESET}\n`);
          break;
        case "output":
        case "notice":
          cast(`${DIM}${event.text}${RESET}\n`);
          break;
        case "result":
          cast(`\n${event.is_error ? "✗ failed" : "✓ done"} in ${(event.duration_ms / 1000).toFixed(1)} s\n`);
          break;
        case "turn":
        case "session":
        case "end":
          break;
      }
    };
    cast(`› ${body.prompt}\n`);
    turn.log.add({
      type: "turn",
      turn_id: turn.id,
      agent: turn.agent,
      prompt: body.prompt,
      exec_id: execution.id,
      started_at: turn.startedAt.toISOString(),
    });
    const before = early;
    early = undefined;
    for (const event of before) said(event);
    opened();
    return stream(request, reply, turn, -1);
  });

  routes.handle(listTurnsRoute, async ({ params: { id } }) => {
    return { turns: turns.list(id).map(summary) };
  });

  routes.handle(turnEventsRoute, async ({ request, reply, params: { id, turnId }, query: { after } }) => {
    return stream(request, reply, ownTurn(id, turnId), after);
  });

  routes.handle(stopTurnRoute, async ({ params: { id, turnId } }) => {
    const turn = ownTurn(id, turnId);
    if (turn.execution?.running) await turn.execution.kill("stopped");
    // Answered once the turn's end is in its log (a turn that ended by itself just now too).
    await turn.ended;
    return summary(turn);
  });
}
