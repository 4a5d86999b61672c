// The engine's run of one operation as spans (lib/telemetry.ts), from its own event stream: `engine start`
// from the run's start to the engine's first event (the CLI, the language host, the program's load), one
// `step <op> <type>` per resource step from its pre-event to its outputs (or its failure), and `engine
// finish` from the summary to the run's end (the engine's exit, the state written).
import type { EngineEvent } from "@pulumi/pulumi/automation/index.js";
import type { Context, Span } from "@opentelemetry/api";
import { contextOf, spanFailed, startSpan } from "../../lib/telemetry.js";

export class EngineSpans {
  private readonly parent: Context;
  private starting: Span | undefined;
  private finishing: Span | undefined;
  private readonly steps = new Map<string, Span>();

  /** `run`: the span of the engine's whole run, the parent of these. */
  constructor(run: Span) {
    this.parent = contextOf(run);
    this.starting = startSpan("engine start", {}, { parent: this.parent });
  }

  event(event: EngineEvent): void {
    this.starting?.end();
    this.starting = undefined;
    const pre = event.resourcePreEvent?.metadata;
    if (pre) {
      this.steps.get(pre.urn)?.end();
      this.steps.set(
        pre.urn,
        startSpan(
          `step ${pre.op} ${pre.type}`,
          { "pulumi.urn": pre.urn, "pulumi.op": pre.op, "pulumi.type": pre.type },
          { parent: this.parent },
        ),
      );
      return;
    }
    const done = event.resOutputsEvent?.metadata ?? event.resOpFailedEvent?.metadata;
    if (done) {
      const step = this.steps.get(done.urn);
      if (!step) return;
      if (event.resOpFailedEvent) spanFailed(step, new Error(`${done.op} ${done.urn} failed`));
      step.end();
      this.steps.delete(done.urn);
      return;
    }
    if (event.summaryEvent && !this.finishing)
      this.finishing = startSpan(
        "engine finish",
        { "pulumi.changes": JSON.stringify(event.summaryEvent.resourceChanges ?? {}) },
        { parent: this.parent },
      );
  }

  /** The run ended: every span still open ends with it. */
  end(): void {
    this.starting?.end();
    for (const step of this.steps.values()) step.end();
    this.steps.clear();
    this.finishing?.end();
    this.starting = this.finishing = undefined;
  }
}
