import { z } from "zod";
import { PLATFORM_BACKENDS, type TenantSpec } from "../../../components/tenant/spec.js";
import type { TenantState } from "../../store/tenants.js";
import { PROJECT_STATUSES } from "../responses.js";
import { displayName } from "../validation.js";
import {
  Allowlist,
  Bandwidth,
  FrontDoorPorts,
  IDLE_AGREES_SCHEMA,
  IdleActionField,
  idleAgrees,
} from "./settings.js";

// The project routes' input: their schemas validate requests and write the OpenAPI document alike.

// Patterns rather than refinements, so that the OpenAPI document says exactly what is accepted.
const ProjectName = displayName(100);

/** A create's body, its `backend` one of `kinds` (the registry's: the OpenAPI document lists them). */
export function createProjectBody(kinds: readonly [string, ...string[]]) {
  return (
    z
      .object({
        name: ProjectName,
        // The same rules the tenant's Squid allowlist applies, checked before anything is recorded.
        allowlist: Allowlist.optional(),
        /**
         * What happens to the sandbox when nobody has used it for `tenants.idleMinutes`: `pause` (the default: a
         * snapshot and a stop that keeps its memory where the backend can, a microVM's), `stop` (its memory
         * dropped: the next start boots) or `none`.
         */
        idle: IdleActionField.optional(),
        /** The older switch: false is `idle: "none"`, true the default (`pause`). */
        idle_shutdown: z.boolean().optional(),
        /** Dev-server ports reachable through the front door (as PATCH takes them). */
        ports: FrontDoorPorts.optional(),
        /**
         * Where the sandbox runs: `container` (shares the host's kernel), `microvm` (a QEMU microVM with its
         * own kernel) or `kubernetes` (a Pod on the platform's cluster, where configured), or a backend the
         * runtime registered; the platform's `tenants.backend` when absent.
         */
        backend: z.enum(kinds).optional(),
        /**
         * A container's isolation: `runc` (the engine's default runtime) or `gvisor` (gVisor's kernel in user
         * space between the agent and the host's, where the host's probe passed it: else a 409 names why); the
         * platform's `tenants.isolation` when absent. Other backends take none (400).
         */
        isolation: z.enum(["runc", "gvisor"]).optional(),
        /**
         * A microVM whose guest has KVM of its own, for the agent's own VMs (`-cpu host,+vmx` or `svm`, KVM's
         * modules, /dev/kvm; its size held to `tenants.nestedVirtualization`, 4 GiB and 2 vCPUs by default):
         * where the host's probe offers it, else a 409 naming why; with a backend that is no microVM, a 400.
         */
        nested_virtualization: z.boolean().optional(),
        /**
         * Bandwidth caps in kbit/s, shaped on the sandbox's bridge (as PATCH takes them). A container's only:
         * with another backend, a 400.
         */
        bandwidth: Bandwidth.optional(),
      })
      .strict()
      .refine(...idleAgrees)
      .refine((body) => body.isolation === undefined || (body.backend ?? "container") === "container", {
        message: "is a container's choice of runtime: a project of another backend takes none",
        path: ["isolation"],
      })
      .refine((body) => body.bandwidth === undefined || (body.backend ?? "container") === "container", {
        message: "is shaped on a container's bridge: a project of another backend takes none yet",
        path: ["bandwidth"],
      })
      // The refinements, as the OpenAPI document states them.
      .meta({
        allOf: [
          ...IDLE_AGREES_SCHEMA,
          {
            not: {
              required: ["backend", "isolation"],
              properties: { backend: { not: { const: "container" } } },
            },
          },
          {
            not: {
              required: ["backend", "bandwidth"],
              properties: { backend: { not: { const: "container" } } },
            },
          },
        ],
      })
  );
}
/** The create's body with the platform's backends. */
export const CreateProjectBody = createProjectBody(PLATFORM_BACKENDS);
export const ProjectParams = z.object({ id: z.uuid({ message: "must be a project id (UUID)" }) }).strict();
/** Start and delete take no input: a body, if any, is empty JSON (`{}`, or nothing at all). */
export const EmptyBody = z.object({}).strict().optional();
/** A stop's body, if any. */
export const StopBody = z
  .object({
    /**
     * Keep the sandbox's memory where the backend can (a microVM's: its processes resume at the next start),
     * the default; false drops it, and the next start boots from the disks.
     */
    keep_memory: z.boolean().default(true),
  })
  .strict()
  .default({ keep_memory: true });
export const SnapshotBody = z
  .object({
    /** Stop the sandbox once the snapshot is pushed (what an idle shutdown does). */
    stop: z.boolean().default(false),
  })
  .strict()
  .default({ stop: false });
export const SnapshotTag = z
  .string()
  .regex(/^[0-9]{8}-[0-9]{6}-[0-9]{3}$/, { message: "must be a snapshot tag such as 20261122-031502-123" })
  .meta({ examples: ["20261122-031502-123"] });
export const RestoreBody = z
  .object({
    /** The snapshot to restore; the newest when absent (the base image when there is none). */
    snapshot: SnapshotTag.optional(),
  })
  .strict()
  .default({});
/**
 * RFC 7240 preferences a create honours: `respond-async` (answer 202 at once) and `wait=<seconds>` (wait at
 * most that long, never longer than configured). Others are ignored, as the RFC asks.
 */
export const PreferHeader = z
  .string()
  .meta({
    description:
      "`respond-async`: answer 202 at once; `wait=<seconds>`: wait at most that long for the sandbox (up to agent-sandbox:runtime.createWaitSeconds)",
    examples: ["respond-async", "wait=10"],
  })
  .optional();

/** How long a create may wait (ms) given the request's `Prefer` header, and the preference applied. */
export function createWaitOf(
  prefer: string | string[] | undefined,
  configuredSeconds: number,
): { ms: number; applied?: string } {
  const preferences = [prefer ?? []]
    .flat()
    .flatMap((header) => header.split(","))
    .map((preference) => preference.split(";")[0]!.trim().toLowerCase());
  if (preferences.includes("respond-async")) return { ms: 0, applied: "respond-async" };
  const wait = preferences.map((p) => /^wait=(\d{1,9})$/.exec(p)?.[1]).find((v) => v !== undefined);
  if (wait === undefined) return { ms: configuredSeconds * 1000 };
  const seconds = Math.min(Number(wait), configuredSeconds);
  return { ms: seconds * 1000, applied: `wait=${seconds}` };
}

export const IdempotencyKey = z
  .string()
  .regex(/^[A-Za-z0-9_.:-]{1,200}$/, { message: "must be 1-200 characters of [A-Za-z0-9_.:-]" })
  .meta({ examples: ["create-20261122-1"] })
  .optional();

/** Seed 000's project states; a tenant being reconfigured shows the state it is heading for. */
export type ProjectStatus = (typeof PROJECT_STATUSES)[number];

export function projectStatus(state: TenantState, spec: Pick<TenantSpec, "running">): ProjectStatus {
  switch (state) {
    case "creating":
    case "running":
    case "stopped":
    case "snapshotting":
    case "restoring":
    case "error":
      return state;
    case "updating":
      return spec.running ? "running" : "stopped";
    case "deleting":
    case "deleted":
      return "deleting";
    default: {
      const never: never = state;
      throw new Error(`unknown tenant state ${String(never)}`);
    }
  }
}
