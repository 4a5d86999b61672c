import { z } from "zod";
import { PORTS } from "../../lib/constants.js";
import { port } from "./shared.js";

export const REGISTRATION_MODES = ["open", "invite", "closed"] as const;
export type RegistrationMode = (typeof REGISTRATION_MODES)[number];

/** A token bucket: `burst` requests at once, refilled at `perHour` a hour. */
export const RateLimit = z
  .object({
    burst: z.number().int().min(1).max(100_000),
    perHour: z.number().int().min(1).max(3_600_000),
  })
  .strict();
export type RateLimit = z.infer<typeof RateLimit>;

const DEFAULT_RATE_LIMITS = {
  register: { burst: 10, perHour: 20 },
  createProject: { burst: 10, perHour: 60 },
} as const satisfies Record<string, RateLimit>;

/**
 * `agent-sandbox:runtime.sshGateway`: the runtime's SSH gateway to kubernetes projects' Pods
 * (runtime/kubernetes/ssh-gateway.ts), held to what the container backend's sshd allows before a login.
 */
export const SshGatewayConfig = z
  .object({
    /** A connection that has not finished its key exchange this long after it opened is closed. */
    handshakeTimeoutSeconds: z.number().int().min(1).max(600).default(20),
    /** A connection not logged in this long after it opened is closed (sshd's LoginGraceTime, 120 s there). */
    loginTimeoutSeconds: z.number().int().min(1).max(3600).default(60),
    /** Connections not yet logged in from one address, over every project's port; past it, closed at once. */
    maxUnauthenticatedPerAddress: z.number().int().min(1).max(100_000).default(10),
    /** Connections not yet logged in, in all (sshd's MaxStartups refuses past 100); past it, closed at once. */
    maxUnauthenticated: z.number().int().min(1).max(100_000).default(100),
    /** Sessions (shell, command, SFTP) and forwarded ports one login holds open at once (sshd's MaxSessions). */
    maxChannelsPerConnection: z.number().int().min(1).max(1000).default(10),
  })
  .strict()
  .refine((ssh) => ssh.handshakeTimeoutSeconds <= ssh.loginTimeoutSeconds, {
    message: "handshakeTimeoutSeconds must not be longer than loginTimeoutSeconds",
    path: ["handshakeTimeoutSeconds"],
  })
  .refine((ssh) => ssh.maxUnauthenticatedPerAddress <= ssh.maxUnauthenticated, {
    message: "maxUnauthenticatedPerAddress must not be more than maxUnauthenticated",
    path: ["maxUnauthenticatedPerAddress"],
  });
export type SshGatewayConfig = z.infer<typeof SshGatewayConfig>;

/**
 * `agent-sandbox:runtime.e2b`: the E2B-compatible control plane (runtime/api/e2b/, docs/e2b.md): how long a
 * sandbox lives when the SDK names no timeout, the longest it may ask for, and how long a create waits for
 * its sandbox to run (E2B's SDK gives up on a request after 60 s).
 */
export const E2bConfig = z
  .object({
    defaultTimeoutSeconds: z.number().int().min(1).max(86_400).default(300),
    maxTimeoutSeconds: z
      .number()
      .int()
      .min(1)
      .max(30 * 86_400)
      .default(86_400),
    createWaitSeconds: z.number().int().min(1).max(300).default(50),
  })
  .strict()
  .refine((e2b) => e2b.defaultTimeoutSeconds <= e2b.maxTimeoutSeconds, {
    message: "defaultTimeoutSeconds must not be longer than maxTimeoutSeconds",
    path: ["defaultTimeoutSeconds"],
  });
export type E2bConfig = z.infer<typeof E2bConfig>;

/**
 * `agent-sandbox:runtime.telemetry`: OpenTelemetry traces of the runtime (runtime/telemetry.ts: requests,
 * queries, operations and their steps, pool claims, sandbox commands), exported over OTLP/HTTP; off unless
 * an endpoint is named.
 */
export const TelemetryConfig = z
  .object({
    /** An OTLP/HTTP traces endpoint, e.g. `http://collector:4318/v1/traces` (JSON is what is sent). */
    otlpEndpoint: z
      .url({
        protocol: /^https?$/,
        message:
          "must be an http:// or https:// URL of an OTLP/HTTP traces endpoint (e.g. http://collector:4318/v1/traces)",
      })
      .optional(),
    /** The spans' `service.name`. */
    serviceName: z.string().min(1).max(100).default("agent-sandbox-runtime"),
    /** How long finished spans wait to be sent together. */
    exportDelayMillis: z.number().int().min(100).max(60_000).default(2_000),
  })
  .strict();
export type TelemetryConfig = z.infer<typeof TelemetryConfig>;

/** `agent-sandbox:runtime`: the runtime service (API, reconciler, terminal proxy). */
export const RuntimeConfig = z
  .object({
    apiPort: port.default(PORTS.api),
    terminalPort: port.default(PORTS.terminal),
    listenHost: z.string().min(1).default("127.0.0.1"),
    /** The host name or address clients reach sandboxes' SSH ports on. */
    publicHost: z.string().min(1).default("127.0.0.1"),
    /**
     * Who may create an account: anyone (`open`), holders of an operator's invite code (`invite`, codes
     * from `npm run invite`), or nobody (`closed`).
     */
    registration: z.enum(REGISTRATION_MODES).default("open"),
    /**
     * Live projects per user (one being deleted counts until its delete has finished): each holds a
     * subnet and an SSH port from pools every user shares.
     */
    projectQuota: z.number().int().min(1).max(10_000).default(5),
    rateLimits: z
      .object({
        /** Account creations per client address. */
        register: RateLimit.default(DEFAULT_RATE_LIMITS.register),
        /** Project creations per user (each one is a Pulumi update of a new stack). */
        createProject: RateLimit.default(DEFAULT_RATE_LIMITS.createProject),
      })
      .strict()
      .default(DEFAULT_RATE_LIMITS),
    /**
     * How long `POST /projects` waits for the new sandbox to run, to answer as synchronous clients expect
     * (201, `running`, `terminal_url`); past it, or at 0, it answers 202 and the client follows the
     * operation. A cold create takes about 4 s here, 25 s ten at once (docs/tenant-stacks.md); keep it under
     * the idle timeout of whatever fronts the API (often 60 s).
     */
    createWaitSeconds: z
      .number({ message: "must be a number of seconds (0 answers at once)" })
      .int({ message: "must be a whole number of seconds" })
      .min(0, { message: "must be 0 (answer at once) or more seconds" })
      .max(300, { message: "must be at most 300 seconds (a client or proxy gives up long before)" })
      .default(30),
    /**
     * Base of every `terminal_url` (default `ws://<publicHost>:<terminalPort>/terminal`); set a `wss://`
     * URL when a TLS proxy fronts the terminal port.
     */
    terminalUrlBase: z
      .string()
      .regex(/^wss?:\/\/[^/\s]+(\/[^\s]*)?$/, { message: "must be a ws:// or wss:// URL" })
      .transform((url) => url.replace(/\/+$/, ""))
      .optional(),
    /** Operators' account emails: they get `/admin/*` (every project, the queue, cancel, jobs). */
    admins: z.array(z.email({ message: "must be an email address" }).toLowerCase()).default([]),
    /** How often the background jobs run (one leader per database runs each). */
    jobs: z
      .object({
        idleCheckSeconds: z.number().int().min(1).max(3600).default(60),
        /** Every tenant stack gets a refresh preview this often (and on demand). */
        driftSweepMinutes: z.number().positive().max(1440).default(15),
        /** The local host's Squid and registry are probed this often and restarted when down (0: never). */
        hostWatchdogSeconds: z.number().int().min(0).max(3600).default(10),
        /** Projects that should run but whose container exited (an engine restart) are started (0: never). */
        sandboxRevivalSeconds: z.number().int().min(0).max(3600).default(15),
        /** E2B sandboxes past their timeout are killed (or stopped, where the SDK asked to auto-pause). */
        e2bTimeoutSeconds: z.number().int().min(1).max(3600).default(10),
      })
      .strict()
      .default({
        idleCheckSeconds: 60,
        driftSweepMinutes: 15,
        hostWatchdogSeconds: 10,
        sandboxRevivalSeconds: 15,
        e2bTimeoutSeconds: 10,
      }),
    /** Commands run through the API (POST /projects/{id}/exec). */
    exec: z
      .object({
        /** The longest `timeout_s` a caller may ask for (a background process's default). */
        maxTimeoutSeconds: z.number().int().min(1).max(86_400).default(3600),
        /** Output kept per stream by a buffered exec's answer; past it, `truncated` (the stream route has none). */
        bufferedOutputBytes: z
          .number()
          .int()
          .min(1024)
          .max(64 * 1024 * 1024)
          .default(1024 * 1024),
        /** Output a background process keeps for reading (both streams, the newest). */
        backgroundOutputBytes: z
          .number()
          .int()
          .min(1024)
          .max(256 * 1024 * 1024)
          .default(4 * 1024 * 1024),
        /** Background processes one project may have running at once; one more is refused (429). */
        maxBackgroundProcesses: z.number().int().min(1).max(1000).default(16),
        /**
         * Output all of one project's background processes keep together, running and finished: past it, the
         * one keeping the most drops its oldest output.
         */
        backgroundOutputBytesPerProject: z
          .number()
          .int()
          .min(1024)
          .max(1024 * 1024 * 1024)
          .default(16 * 1024 * 1024),
      })
      .strict()
      .default({
        maxTimeoutSeconds: 3600,
        bufferedOutputBytes: 1024 * 1024,
        backgroundOutputBytes: 4 * 1024 * 1024,
        maxBackgroundProcesses: 16,
        backgroundOutputBytesPerProject: 16 * 1024 * 1024,
      }),
    /** Files moved through the API (/projects/{id}/files): the largest file or tar stream. */
    files: z
      .object({
        maxBytes: z
          .number()
          .int()
          .min(1024)
          .max(16 * 1024 * 1024 * 1024)
          .default(256 * 1024 * 1024),
        /** Entries one answer of GET /projects/{id}/files holds; a longer listing continues by `next_cursor`. */
        maxListEntries: z.number().int().min(1).max(100_000).default(1000),
      })
      .strict()
      .default({ maxBytes: 256 * 1024 * 1024, maxListEntries: 1000 }),
    /** Terminal recordings are deleted this long after their last write (the audit rows are kept). */
    recordingRetentionDays: z.number().int().min(1).max(3650).default(90),
    /**
     * Reverse proxies whose `X-Forwarded-For` the API believes (addresses or CIDRs): a request from one of
     * them is the client's it names, for login throttling, rate limits and the audit. Default none. The GCP
     * target sets `127.0.0.1`, its front door on the host.
     */
    trustedProxies: z
      .array(
        z.string().regex(/^\d{1,3}(\.\d{1,3}){3}(\/\d{1,2})?$/, {
          message: "must be an IPv4 address or CIDR such as 127.0.0.1",
        }),
      )
      .default([]),
    /**
     * Origins of the web console, the only pages a browser may open terminals from (default: the API's
     * own address, and its localhost alias when that is loopback). Set it when a TLS proxy fronts the API.
     */
    consoleOrigins: z
      .array(
        z.string().regex(/^https?:\/\/[^/\s]+$/, {
          message: "must be an origin such as https://sandbox.example.com (scheme and host, no path)",
        }),
      )
      .min(1)
      .optional(),
    /**
     * Slow and greedy clients, on the API's and the terminal's ports alike: a request's headers must
     * arrive within `headersTimeoutSeconds` and the whole request within `requestTimeoutSeconds` (an
     * upload through the files API included: raise it for large files over slow links), and one address
     * holds at most `maxConnectionsPerAddress` open connections (loopback is exempt: a TLS proxy in front
     * relays everyone from there, and limits them itself). Answers that stream (exec) are not cut.
     */
    http: z
      .object({
        headersTimeoutSeconds: z.number().int().min(1).max(300).default(20),
        requestTimeoutSeconds: z.number().int().min(1).max(86_400).default(300),
        maxConnectionsPerAddress: z.number().int().min(1).max(100_000).default(256),
      })
      .strict()
      .refine((http) => http.headersTimeoutSeconds <= http.requestTimeoutSeconds, {
        message: "headersTimeoutSeconds must not be longer than requestTimeoutSeconds",
        path: ["headersTimeoutSeconds"],
      })
      .default({ headersTimeoutSeconds: 20, requestTimeoutSeconds: 300, maxConnectionsPerAddress: 256 }),
    /** The SSH gateway kubernetes projects are reached through: its deadlines and caps (docs/kubernetes.md). */
    sshGateway: SshGatewayConfig.default(SshGatewayConfig.parse({})),
    e2b: E2bConfig.default(E2bConfig.parse({})),
    telemetry: TelemetryConfig.default(TelemetryConfig.parse({})),
  })
  .strict();
export type RuntimeConfig = z.infer<typeof RuntimeConfig>;

/** {@link RuntimeConfig.consoleOrigins}, or its default. */
export function consoleOriginsOf(runtime: RuntimeConfig): string[] {
  if (runtime.consoleOrigins) return [...runtime.consoleOrigins];
  const loopback = ["127.0.0.1", "localhost"];
  const hosts = loopback.includes(runtime.publicHost) ? loopback : [runtime.publicHost];
  return hosts.map((host) => `http://${host}:${runtime.apiPort}`);
}
