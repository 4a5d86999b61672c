// What an owner may change on a live project (PATCH /projects/{id}), and the allowlist rules it shares
// with POST /projects. Bounds come from the sandbox (what it needs to run) and from this host.
import * as os from "node:os";
import { z } from "zod";
import { SquidTenantInputs } from "../../../provider/resources/squid-tenant.js";
import { BANDWIDTH_KBPS } from "../../../provider/resources/traffic-shaper.js";
import { IDLE_ACTIONS, type IdleAction } from "../../store/projects.js";
import type { SettingsChange } from "../../tenants/service.js";
import { MAX_FRONT_DOOR_PORTS, SANDBOX_SSH_PORT, validateFrontDoorPorts } from "../../../lib/front-door.js";

/**
 * An allowlist entry as the tenant's Squid allowlist takes it (a host name or `.domain`, never an IP
 * literal: the last label starts with a letter), before it is trimmed and lower-cased. Spaces and tabs
 * around it are spelt out rather than `\s`, which means other characters to other regex dialects (U+0085
 * is whitespace to Python and Rust, not to JavaScript), and the document's readers are not all JavaScript.
 */
const ALLOWLIST_ENTRY =
  /^[ \t]*\.?(?=[^ \t]{1,253}[ \t]*$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+[A-Za-z][A-Za-z0-9-]{0,61}[A-Za-z0-9][ \t]*$/;

/** The same rules the tenant's Squid allowlist applies, checked before anything is recorded. */
export const Allowlist = z
  .array(
    z
      .string()
      .regex(ALLOWLIST_ENTRY, {
        message: "must be a host name like api.example.com or .example.com (no IP addresses, no wildcards)",
      })
      .meta({ examples: ["api.example.com", ".github.com", "registry.npmjs.org"] })
      .pipe(SquidTenantInputs.shape.domains.element),
  )
  .min(1, { message: "needs at least one domain (an empty allowlist is a stopped sandbox's job)" })
  .max(200);

const IMAGE_PATH_COMPONENT = "[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*";
const IMAGE_REGISTRY = "[a-z0-9]+(?:-+[a-z0-9]+)*(?:\\.[a-z0-9]+(?:-+[a-z0-9]+)*)*(?::[0-9]+)?";
const IMAGE_REFERENCE = new RegExp(
  `^(?:${IMAGE_REGISTRY}/)?${IMAGE_PATH_COMPONENT}(?:/${IMAGE_PATH_COMPONENT})*` +
    "(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$",
);

/** This host's memory and CPUs: a sandbox may not be promised more. */
export const HOST_MEMORY_MIB = Math.floor(os.totalmem() / (1024 * 1024));
export const HOST_CPUS = os.availableParallelism();

const RelativePath = z
  .string()
  .max(255)
  .regex(/^(?!\/)(?!(?:[^/]*\/)*\.\.(?:\/|$))[A-Za-z0-9._/-]+$/, {
    message: "must be a path relative to /home/agent, without '..'",
  });

/**
 * A container image reference as the engine parses one (the distribution reference grammar, lower-case
 * registry): `[registry[:port]/]path[:tag][@sha256:digest]`, path components joined by `.`, `_`, `__` or
 * dashes. Anything the pattern lets through the engine can look up (a missing image is a 409, never a 500).
 */
const ImageRef = z.string().max(255).regex(IMAGE_REFERENCE, {
  message: "must be an image reference such as agent-sandbox/sandbox-repo:abc123",
});

/**
 * Dev-server ports for the front door (`[{port, name?}]`): the shape for the document, the rules from
 * lib/front-door.ts (whose message names the entry, e.g. `ports[1].port`, given here as its path).
 */
export const FrontDoorPorts = z
  .array(
    z
      .object({
        port: z
          .number()
          .int()
          .min(1024)
          .max(65535)
          .refine((port) => port !== SANDBOX_SSH_PORT, {
            message: `${SANDBOX_SSH_PORT} is the sandbox's SSH port`,
          })
          .meta({ not: { const: SANDBOX_SSH_PORT } }),
        /** A worktree or label: the route's host is `<project label>-<name>.sandbox.localhost`. */
        name: z
          .string()
          .regex(/^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$/, { message: "must be a DNS label (a-z, 0-9, '-')" })
          .optional(),
      })
      .strict(),
  )
  .max(MAX_FRONT_DOOR_PORTS)
  .meta({ uniqueItems: true })
  .superRefine((ports, context) => {
    try {
      validateFrontDoorPorts(ports);
    } catch (error) {
      const match = /^ports(?:\[(\d+)\])?(?:\.(\w+))?: (.*)$/s.exec((error as Error).message);
      context.addIssue({
        code: "custom",
        message: match ? match[3]! : (error as Error).message,
        path: match ? [...(match[1] ? [Number(match[1])] : []), ...(match[2] ? [match[2]] : [])] : [],
      });
    }
  });

const bandwidthRate = z
  .number()
  .int()
  .min(BANDWIDTH_KBPS.min, { message: `must be at least ${BANDWIDTH_KBPS.min} (kbit/s)` })
  .max(BANDWIDTH_KBPS.max, { message: `must be at most ${BANDWIDTH_KBPS.max} (kbit/s, 10 Gbit/s)` });

/**
 * A container sandbox's bandwidth caps in kbit/s (1000 bits a second), shaped on its bridge: `download_kbps`
 * what reaches the sandbox, `upload_kbps` what it sends; a direction left out is not capped.
 */
export const Bandwidth = z
  .object({ download_kbps: bandwidthRate.optional(), upload_kbps: bandwidthRate.optional() })
  .strict()
  .refine((b) => b.download_kbps !== undefined || b.upload_kbps !== undefined, {
    message: "needs download_kbps or upload_kbps (null removes the caps)",
  })
  .meta({ minProperties: 1, examples: [{ download_kbps: 8000 }] });
export type Bandwidth = z.infer<typeof Bandwidth>;

/** The API's caps as the tenant spec names them. */
export const bandwidthSpec = (b: Bandwidth) => ({
  ...(b.download_kbps !== undefined ? { downloadKbps: b.download_kbps } : {}),
  ...(b.upload_kbps !== undefined ? { uploadKbps: b.upload_kbps } : {}),
});

/** What the idle handling does to the project: `pause`, `stop` or `none` (issue 44). */
export const IdleActionField = z.enum(IDLE_ACTIONS);

/**
 * The idle action a create or PATCH asks for, from `idle` or the older `idle_shutdown` (undefined: neither):
 * `idle_shutdown: true` alone keeps an action the project has (`current`), else it is `pause`.
 */
export function idleActionOf(
  body: { idle?: IdleAction | undefined; idle_shutdown?: boolean | undefined },
  current: IdleAction = "none",
): IdleAction | undefined {
  if (body.idle_shutdown === undefined) return body.idle;
  if (!body.idle_shutdown) return "none";
  return body.idle ?? (current === "none" ? "pause" : current);
}

/** `idle` and the older `idle_shutdown` in one body must say the same. */
export const idleAgrees: [
  (body: { idle?: IdleAction | undefined; idle_shutdown?: boolean | undefined }) => boolean,
  { message: string; path: string[] },
] = [
  (body) =>
    body.idle === undefined ||
    body.idle_shutdown === undefined ||
    (body.idle !== "none") === body.idle_shutdown,
  {
    message: 'idle_shutdown contradicts idle: false goes with idle "none", true with "pause" or "stop"',
    path: ["idle_shutdown"],
  },
];

/** {@link idleAgrees} as the OpenAPI document states it: neither contradiction of the two fields. */
export const IDLE_AGREES_SCHEMA = [
  {
    not: {
      required: ["idle", "idle_shutdown"],
      properties: { idle_shutdown: { const: false }, idle: { not: { const: "none" } } },
    },
  },
  {
    not: {
      required: ["idle", "idle_shutdown"],
      properties: { idle_shutdown: { const: true }, idle: { const: "none" } },
    },
  },
];

export const PatchProjectBody = z
  .object({
    /** Applied to the running sandbox without a restart (its Squid rule is rewritten). */
    allowlist: Allowlist.optional(),
    /** Applied in place (the container's cgroup), the agent's processes keep running. */
    limits: z
      .object({
        memory_mib: z
          .number()
          .int()
          .min(256, { message: "must be at least 256 (MiB): the sandbox's own services need it" })
          .max(HOST_MEMORY_MIB, { message: `must be at most this host's ${HOST_MEMORY_MIB} MiB` }),
        cpus: z
          .number()
          .min(0.1, { message: "must be at least 0.1" })
          .max(HOST_CPUS, { message: `must be at most this host's ${HOST_CPUS} CPUs` }),
        pids: z
          .number()
          .int()
          .min(64, { message: "must be at least 64: the sandbox's own services need them" })
          .max(65536),
      })
      .partial()
      .strict()
      .refine((limits) => Object.keys(limits).length > 0, { message: "needs memory_mib, cpus or pids" })
      .meta({ minProperties: 1 })
      .optional(),
    /** An image on this platform's engine (e.g. from `npm run image:repo`). */
    image: ImageRef.optional(),
    /** With `image`: replace the container now; without, a running sandbox gets the image at its next start. */
    restart: z.boolean().optional(),
    /** Paths under /home/agent the agent may read but not change (the container is replaced). */
    protected_paths: z.array(RelativePath).max(64).optional(),
    /** Dev-server ports reachable through the front door (replaces the list; `[]` removes every route). */
    ports: FrontDoorPorts.optional(),
    /** What happens to the sandbox when nobody uses it: `pause`, `stop` or `none`. */
    idle: IdleActionField.optional(),
    /** The older switch: false is `idle: "none"`, true `pause` (or `idle`'s value). */
    idle_shutdown: z.boolean().optional(),
    /**
     * Bandwidth caps (replace the ones it has; `null` removes them), applied in place by the update it
     * queues: the sandbox keeps running. A container's only (409 for another backend).
     */
    bandwidth: Bandwidth.nullable().optional(),
    /** `null`: the platform's `tenants.driftRemediation`. */
    drift_remediation: z.enum(["report", "repair"]).nullable().optional(),
    /**
     * Ports the front door does not route when it finds a dev server on them (replaces the list; `[]` routes
     * them all again); a declared port is routed as declared. Shown by GET /projects/{id}/dev-servers.
     */
    private_ports: z
      .array(z.number().int().min(1024, { message: "must be from 1024 to 65535" }).max(65535))
      .max(64)
      .optional(),
  })
  .strict()
  .refine((body) => Object.keys(body).length > 0, { message: "needs at least one setting to change" })
  .refine((body) => body.restart === undefined || body.image !== undefined, {
    message: "restart goes with image",
    path: ["restart"],
  })
  .refine(...idleAgrees)
  // The two refinements, as the OpenAPI document states them.
  .meta({ minProperties: 1, dependentRequired: { restart: ["image"] }, allOf: IDLE_AGREES_SCHEMA });
export type PatchProjectBody = z.infer<typeof PatchProjectBody>;

/** The body's stack settings, as the tenant spec names them (undefined: nothing for the stack). */
export function settingsChange(body: PatchProjectBody): SettingsChange | undefined {
  const change: SettingsChange = {
    ...(body.allowlist ? { allowlist: body.allowlist } : {}),
    ...(body.limits
      ? {
          limits: {
            ...(body.limits.memory_mib !== undefined ? { memoryMiB: body.limits.memory_mib } : {}),
            ...(body.limits.cpus !== undefined ? { cpus: body.limits.cpus } : {}),
            ...(body.limits.pids !== undefined ? { pids: body.limits.pids } : {}),
          },
        }
      : {}),
    ...(body.protected_paths ? { protectedPaths: body.protected_paths } : {}),
    ...(body.ports ? { ports: body.ports } : {}),
    ...(body.bandwidth !== undefined
      ? { bandwidth: body.bandwidth === null ? null : bandwidthSpec(body.bandwidth) }
      : {}),
    ...(body.image ? { image: { ref: body.image, restart: body.restart ?? false } } : {}),
  };
  return Object.keys(change).length > 0 ? change : undefined;
}
