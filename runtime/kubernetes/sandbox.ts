// A kubernetes-backend sandbox as the runtime sees it: its state read from the StatefulSet, its Pod's
// conditions and container status (and the controller's FailedCreate events, which is where a namespace quota's
// refusal shows), and the same SandboxRunner and terminal attacher as the other backends, over the API's exec.
import { Duplex } from "node:stream";
import { kubernetesTenantNames } from "../../components/tenant/kubernetes/names.js";
import { SandboxNotRunningError } from "../sandbox/exec.js";
import { EXEC_MARKER, processArgv, signalArgv } from "../sandbox/process.js";
import { boundedOutput, type SandboxRunner } from "../sandbox/runner.js";
import {
  TMUX_SESSION,
  TMUX_SESSION_NAME,
  type SandboxAttacher,
  type TerminalAttachment,
} from "../terminal/attach.js";
import { ClusterUnreachableError, isTransient, KubernetesApiError, KubernetesClient } from "./client.js";
import { readKubeconfig } from "./kubeconfig.js";
import { podExec, type PodContainer, type PodExec, type PodExecOptions } from "./exec.js";

/** Where a project's sandbox runs on the cluster (components/tenant/kubernetes/names.ts). */
export function sandboxPod(
  projectId: string,
): PodContainer & { readonly statefulSet: string; readonly proxy: string } {
  const names = kubernetesTenantNames(projectId);
  return {
    namespace: names.namespace,
    pod: names.pod,
    container: names.container,
    statefulSet: names.statefulSet,
    proxy: names.proxy,
  };
}

export type SandboxPhase = "absent" | "deleting" | "stopped" | "stopping" | "starting" | "running" | "failed";

export interface SandboxObservation {
  readonly phase: SandboxPhase;
  /** A machine-readable cause when not running (`Unschedulable`, `ImagePullBackOff`, `FailedCreate`, ...). */
  readonly reason?: string;
  readonly message?: string;
  readonly node?: string;
  readonly restarts?: number;
  /** A running sandbox's egress: its proxy's Deployment has an available Pod (`ready`) or not (`not-ready`). */
  readonly egress?: "ready" | "not-ready";
}

/** What the sandbox's state reads of its egress proxy's Deployment. */
export interface DeploymentObject {
  readonly status?: { readonly availableReplicas?: number };
}

interface Condition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
}
interface ContainerStatus {
  name: string;
  ready?: boolean;
  restartCount?: number;
  state?: {
    waiting?: { reason?: string; message?: string };
    terminated?: { reason?: string; message?: string; exitCode?: number };
  };
}
export interface PodObject {
  metadata?: { deletionTimestamp?: string };
  spec?: { nodeName?: string };
  status?: {
    phase?: string;
    podIP?: string;
    reason?: string;
    message?: string;
    conditions?: Condition[];
    containerStatuses?: ContainerStatus[];
  };
}
export interface StatefulSetObject {
  metadata?: { deletionTimestamp?: string; managedFields?: { time?: string }[] };
  spec?: { replicas?: number };
}
export interface EventObject {
  reason?: string;
  message?: string;
  lastTimestamp?: string;
  eventTime?: string;
  metadata?: { creationTimestamp?: string };
}

/** Waiting reasons that will not clear by themselves: the sandbox has failed until its spec changes. */
const FAILED_WAITING = new Set([
  "ErrImagePull",
  "ImagePullBackOff",
  "InvalidImageName",
  "CrashLoopBackOff",
  "CreateContainerConfigError",
  "CreateContainerError",
  "RunContainerError",
]);

const eventTime = (event: EventObject) =>
  Date.parse(event.lastTimestamp ?? event.eventTime ?? event.metadata?.creationTimestamp ?? "") || 0;

/**
 * The sandbox's state from what the API holds: its namespace (undefined: gone), StatefulSet, Pod, and the
 * StatefulSet controller's FailedCreate events (the newest since the StatefulSet last changed counts). Pure.
 */
export function observeSandbox(
  container: string,
  namespace: { metadata?: { deletionTimestamp?: string } } | undefined,
  statefulSet: StatefulSetObject | undefined,
  pod: PodObject | undefined,
  failedCreates: readonly EventObject[] = [],
  proxy?: DeploymentObject,
): SandboxObservation {
  if (!namespace) return { phase: "absent" };
  if (namespace.metadata?.deletionTimestamp)
    return {
      phase: "deleting",
      reason: "NamespaceTerminating",
      message: "the tenant's namespace is being deleted",
    };
  if (!statefulSet)
    return { phase: "absent", reason: "NoStatefulSet", message: "the namespace has no sandbox StatefulSet" };
  const wanted = statefulSet.metadata?.deletionTimestamp ? 0 : (statefulSet.spec?.replicas ?? 1);
  if (!pod) {
    if (wanted === 0) return { phase: "stopped" };
    // Only a refusal since the StatefulSet last changed counts: events outlive what caused them (an hour), and
    // an older one (a quota since freed, a spec since fixed) says nothing of the Pod it makes now.
    const changed = Math.max(
      0,
      ...(statefulSet.metadata?.managedFields ?? []).map((field) => Date.parse(field.time ?? "") || 0),
    );
    const failedCreate = failedCreates
      .filter((event) => eventTime(event) >= changed)
      .sort((a, b) => eventTime(b) - eventTime(a))[0];
    if (failedCreate)
      return {
        phase: "failed",
        reason: "FailedCreate",
        message: failedCreate.message ?? "the Pod could not be created",
      };
    return { phase: "starting", reason: "NoPod", message: "the StatefulSet has not made its Pod yet" };
  }
  const node = pod.spec?.nodeName;
  if (wanted === 0 || pod.metadata?.deletionTimestamp)
    return { phase: "stopping", ...(node ? { node } : {}) };
  const status = pod.status ?? {};
  const sandbox = status.containerStatuses?.find((c) => c.name === container);
  const restarts = sandbox?.restartCount ?? 0;
  const base = { ...(node ? { node } : {}), restarts };
  if (status.phase === "Failed" || status.phase === "Succeeded") {
    const ended = sandbox?.state?.terminated;
    return {
      phase: "failed",
      ...base,
      reason: status.reason ?? ended?.reason ?? status.phase,
      message:
        status.message ??
        ended?.message ??
        `the sandbox's container ended${ended?.exitCode !== undefined ? ` with exit code ${ended.exitCode}` : ""}`,
    };
  }
  const waiting = sandbox?.state?.waiting;
  if (waiting?.reason && FAILED_WAITING.has(waiting.reason))
    return { phase: "failed", ...base, reason: waiting.reason, message: waiting.message ?? waiting.reason };
  const condition = (type: string) => status.conditions?.find((c) => c.type === type);
  const scheduled = condition("PodScheduled");
  if (scheduled?.status === "False")
    return {
      phase: "starting",
      ...base,
      reason: scheduled.reason ?? "Unscheduled",
      message: scheduled.message,
    };
  if (status.phase === "Running" && condition("Ready")?.status === "True" && sandbox?.ready !== false)
    // Running, and whether anything it asks for outside can get out: without its proxy, nothing can.
    return {
      phase: "running",
      ...base,
      egress: (proxy?.status?.availableReplicas ?? 0) > 0 ? "ready" : "not-ready",
    };
  return {
    phase: "starting",
    ...base,
    reason: waiting?.reason ?? status.phase ?? "Pending",
    ...(waiting?.message ? { message: waiting.message } : {}),
  };
}

/** Reads the sandbox's objects from the cluster and {@link observeSandbox}s them. */
export async function readSandbox(client: KubernetesClient, projectId: string): Promise<SandboxObservation> {
  const target = sandboxPod(projectId);
  const ns = `/api/v1/namespaces/${target.namespace}`;
  const namespace = await client.get<{ metadata?: { deletionTimestamp?: string } }>(ns);
  if (!namespace) return observeSandbox(target.container, undefined, undefined, undefined);
  const apps = `/apis/apps/v1/namespaces/${target.namespace}`;
  const [statefulSet, pod, proxy] = await Promise.all([
    client.get<StatefulSetObject>(`${apps}/statefulsets/${target.statefulSet}`),
    client.get<PodObject>(`${ns}/pods/${target.pod}`),
    client.get<DeploymentObject>(`${apps}/deployments/${target.proxy}`),
  ]);
  let failedCreates: EventObject[] = [];
  if (statefulSet && !pod) {
    const selector = new URLSearchParams({
      fieldSelector: `involvedObject.kind=StatefulSet,involvedObject.name=${target.statefulSet},reason=FailedCreate`,
    });
    const events = await client.get<{ items?: EventObject[] }>(`${ns}/events?${selector.toString()}`);
    failedCreates = events?.items ?? [];
  }
  return observeSandbox(target.container, namespace, statefulSet, pod, failedCreates, proxy);
}

/**
 * An exec that cannot reach the sandbox: the Pod is missing or its container not running, or the cluster's API
 * server does not answer (the API then says the sandbox cannot be reached, and why, not a server error).
 */
function notRunning(error: unknown, target: PodContainer): unknown {
  if (error instanceof ClusterUnreachableError)
    return new SandboxNotRunningError(`${target.namespace}/${target.pod}`, error.message);
  if (!(error instanceof KubernetesApiError)) return error;
  if (
    error.status === 404 ||
    (error.status === 400 &&
      /not found|not running|ContainerCreating|is waiting|completed pod/i.test(error.detail))
  )
    return new SandboxNotRunningError(
      `${target.namespace}/${target.pod}`,
      `sandbox ${target.namespace}/${target.pod} is not running (${error.detail || error.reason})`,
    );
  return error;
}

/** `env NAME=value ...` ahead of argv: an exec through the API carries no environment of its own. */
export const withEnv = (env: Readonly<Record<string, string>>, argv: readonly string[]) => [
  "env",
  ...Object.entries(env).map(([name, value]) => `${name}=${value}`),
  ...argv,
];

/**
 * The project's sandbox through the API's exec: the container's own user (the image's agent, uid 1000), since
 * the Pod runs non-root with every capability dropped; nothing runs as root there.
 */
export function kubernetesRunner(client: KubernetesClient, target: PodContainer): SandboxRunner {
  const where = `${target.namespace}/${target.pod}`;
  const open = async (
    argv: readonly string[],
    stdin: boolean,
    onOutput: Parameters<typeof podExec>[3]["onOutput"],
    tty = false,
  ): Promise<PodExec> => {
    try {
      return await podExec(client, target, argv, { stdin, tty, onOutput });
    } catch (error) {
      throw notRunning(error, target);
    }
  };
  return {
    async start(id, command, onOutput) {
      // A terminal needs a stdin to be one (the API server refuses a tty without it).
      const exec = await open(
        withEnv({ ...command.env, [EXEC_MARKER]: id }, processArgv(command)),
        command.stdin !== undefined || command.tty !== undefined,
        onOutput,
        command.tty !== undefined,
      );
      if (command.tty) exec.resize(command.tty.cols, command.tty.rows);
      if (Buffer.isBuffer(command.stdin)) {
        exec.write(command.stdin);
        exec.endInput();
      }
      // An upload waits for the connection to take it (its send buffer under SEND_BUFFER_BYTES): a Pod or
      // API server that reads slowly slows the upload, nothing piles up in the runtime.
      const input =
        command.stdin === "stream"
          ? new Duplex({
              write(chunk: Buffer, _encoding, done) {
                exec.write(chunk, () => done());
              },
              final(done) {
                exec.endInput();
                done();
              },
              read() {},
            })
          : undefined;
      return {
        id,
        input,
        exited: exec.exited,
        pause: () => exec.pause(),
        resume: () => exec.resume(),
        detach: () => exec.close(),
        resize: async ({ cols, rows }) => {
          if (command.tty) exec.resize(cols, rows);
        },
      };
    },
    async signal(id, signal) {
      const result = await this.run(signalArgv(id, signal), { timeoutMs: 30_000 });
      return Number.parseInt(result.stdout.trim(), 10) || 0;
    },
    // `root` asks for the platform's own commands to run as root where there is one; the Pod has none, so they
    // run as its user (a kubernetes project's backups are the runtime's, from outside: backup.ts).
    async run(argv, options = {}) {
      const output = boundedOutput();
      const exec = await open(argv, options.stdin !== undefined, output.onOutput);
      if (options.stdin !== undefined) {
        exec.write(options.stdin);
        exec.endInput();
      }
      return output.result(exec.exited, options.timeoutMs, () => exec.close(), argv, where);
    },
  };
}

/** The terminal of a kubernetes sandbox: a tty exec running the shared tmux session, resized over channel 4. */
export async function kubernetesAttach(
  client: KubernetesClient,
  projectId: string,
  session: string = TMUX_SESSION,
): Promise<TerminalAttachment> {
  if (!TMUX_SESSION_NAME.test(session)) throw new Error(`invalid tmux session name: ${session}`);
  const target = sandboxPod(projectId);
  let opened: PodExec | undefined;
  const stream = new Duplex({
    write(chunk: Buffer, _encoding, done) {
      if (opened) opened.write(chunk, () => done());
      else done();
    },
    read() {},
    destroy(error, done) {
      opened?.close();
      done(error);
    },
  });
  try {
    opened = await podExec(
      client,
      target,
      withEnv({ TERM: "xterm-256color", LANG: "C.UTF-8", COLORTERM: "truecolor" }, [
        "sh",
        "-c",
        `cd ~ 2>/dev/null; trap '' INT QUIT TSTP; exec tmux new-session -A -s ${session}`,
      ]),
      { stdin: true, tty: true, onOutput: (_stream, chunk) => stream.push(chunk) },
    );
  } catch (error) {
    throw notRunning(error, target);
  }
  const exec = opened;
  let detached = false;
  const ended = exec.exited
    .then(
      () => true,
      () => false,
    )
    .then(async (exitedCleanly) => {
      stream.push(null);
      if (detached || exitedCleanly) return { sandboxRunning: true };
      // The stream ended without the command's status: the Pod (or the cluster's reach) went away.
      const state = await readSandbox(client, projectId).catch(() => undefined);
      return { sandboxRunning: state?.phase === "running" };
    });
  return {
    stream,
    ended,
    async resize({ cols, rows }) {
      exec.resize(cols, rows);
    },
    detach() {
      detached = true;
      // Closing the stream hangs up the exec's terminal: the tmux client detaches, the session lives on.
      exec.close();
    },
  };
}

/** Picks up a kubernetes project's terminal through the cluster's API. */
export function kubernetesAttacher(client: KubernetesClient): SandboxAttacher {
  return { attach: (projectId, session) => kubernetesAttach(client, projectId, session) };
}

/**
 * The runtime's way to kubernetes projects: the cluster's client, made at first use from the configured
 * kubeconfig (`tenants.kubernetes.kubeconfigFile`), and a kubernetes project's runner, terminal and Pod (the
 * backend registry, runtime/backends/, decides which projects are).
 */
export function kubernetesProjects(
  kubeconfigFile: string | undefined,
  /** The runtime's own credentials instead of the kubeconfig user's (`tenants.kubernetes.credentials: gke`). */
  credentials?: Parameters<typeof readKubeconfig>[2],
) {
  let client: KubernetesClient | undefined;
  /** The cluster's client, made at first use; undefined without a kubeconfig; throws when it cannot be read. */
  const open = (): KubernetesClient | undefined =>
    kubeconfigFile
      ? (client ??= new KubernetesClient(readKubeconfig(kubeconfigFile, undefined, credentials)))
      : undefined;
  const cluster = (projectId: string): KubernetesClient => {
    let opened: KubernetesClient | undefined;
    try {
      opened = open();
    } catch (error) {
      throw new SandboxNotRunningError(
        projectId,
        `the cluster cannot be reached: ${(error as Error).message}`,
      );
    }
    if (!opened)
      throw new SandboxNotRunningError(
        projectId,
        `project ${projectId} runs on a kubernetes cluster, and this runtime has none configured (tenants.kubernetes.kubeconfigFile)`,
      );
    return opened;
  };
  return {
    /** A kubernetes project's runner. */
    runnerOf: (projectId: string): SandboxRunner =>
      kubernetesRunner(cluster(projectId), sandboxPod(projectId)),
    /** A kubernetes project's terminal on tmux session `session`. */
    attach: async (projectId: string, session?: string): Promise<TerminalAttachment> =>
      kubernetesAttach(cluster(projectId), projectId, session),
    /** A kubernetes project's sandbox as the cluster has it now (the project view's `sandbox`). */
    observe: (projectId: string): Promise<SandboxObservation> => readSandbox(cluster(projectId), projectId),
    /**
     * The address of a kubernetes project's sandbox Pod on the cluster's network, where the front door reaches
     * its dev servers; undefined while it has none (no Pod, not yet started, being deleted).
     */
    async podAddress(projectId: string): Promise<string | undefined> {
      const target = sandboxPod(projectId);
      const pod = await cluster(projectId).get<PodObject>(
        `/api/v1/namespaces/${target.namespace}/pods/${target.pod}`,
      );
      return pod?.metadata?.deletionTimestamp ? undefined : pod?.status?.podIP || undefined;
    },
    /** The UID of a kubernetes project's home claim, or undefined when it has none (the runtime's backups). */
    async homeClaimUid(projectId: string): Promise<string | undefined> {
      const names = kubernetesTenantNames(projectId);
      const claim = await cluster(projectId).get<{ metadata?: { uid?: string } }>(
        `/api/v1/namespaces/${names.namespace}/persistentvolumeclaims/${names.homeClaim}`,
      );
      return claim?.metadata?.uid;
    },
    /** A command in a kubernetes project's sandbox, its backend already known (the SSH gateway's sessions). */
    async exec(projectId: string, argv: readonly string[], options: PodExecOptions): Promise<PodExec> {
      const target = sandboxPod(projectId);
      try {
        return await podExec(cluster(projectId), target, argv, options);
      } catch (error) {
        throw notRunning(error, target);
      }
    },
    /**
     * Why the cluster cannot be reached now: nothing answered its API server's `/readyz`, or it said it is not
     * ready (ClusterUnreachableError's, KubernetesApiError's words); undefined when it answers, or when there
     * is no cluster to ask (no kubeconfig, one that cannot be read: not something that comes back by waiting).
     * `failure`, an operation's error, counts too when it names the API server's address out of reach: a
     * blip over by the time it is asked.
     */
    async unreachable(failure = ""): Promise<string | undefined> {
      let access: KubernetesClient | undefined;
      try {
        access = open();
      } catch {
        return undefined;
      }
      if (!access) return undefined;
      try {
        await access.request("GET", "/readyz");
      } catch (error) {
        if (isTransient(error)) return (error as Error).message;
        return undefined;
      }
      const host = new URL(access.access.server).host;
      return failure.includes(host) && CONNECTION_LOST.test(failure)
        ? `the cluster's API server ${access.access.server} was unreachable during the operation`
        : undefined;
    },
    close: () => client?.close(),
  };
}
/** How Go's net/http (Pulumi's Kubernetes provider, client-go) says a connection failed or was lost. */
const CONNECTION_LOST =
  /connection refused|connection reset|i\/o timeout|no route to host|network is unreachable|TLS handshake timeout|unexpected EOF|cluster is unreachable/;
export type KubernetesProjects = ReturnType<typeof kubernetesProjects>;
