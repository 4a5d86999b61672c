// The runtime service's entry point (npm run local starts it after the toolchain and host bring-up).
import * as os from "node:os";
import * as path from "node:path";
import { openDatabase } from "./store/db.js";
import { migrate } from "./store/migrations.js";
import { Reconciler } from "./reconciler/reconciler.js";
import { reconcilerOptions } from "./reconciler/options.js";
import { clusterCredentials, stateBackendUrl, tenantDefaults, tenantDisksRoot } from "./tenants/config.js";
import { discardUnrecordedStagedHomes, stagingRoots } from "./tenants/fork.js";
import { dockerClient } from "../lib/docker-client.js";
import { CredentialGateway, credentialGatewayOptions } from "./gateway/gateway.js";
import { KubernetesSshGateway } from "./kubernetes/ssh-gateway.js";
import { SecretBox, tokenSecret } from "./secrets.js";
import { Auth, DEFAULT_AUTH } from "./api/auth.js";
import { InviteCodes } from "./api/invites.js";
import {
  bucketPrerequisite,
  databasePrerequisite,
  kubernetesProviderPrerequisite,
  pulumiPrerequisite,
  stateBackendPrerequisite,
  type Prerequisite,
} from "./health.js";
import { fileBackendDir } from "./stack-state.js";
import { GcsClient, gcsEndpoint, hostTokenSource } from "./gcp/storage.js";
import { runtimeProbedParts } from "./host/baseline.js";
import { Metrics, metricsToken } from "./metrics.js";
import { HostWatchdog, watchedHostParts } from "./host/watchdog.js";
import { buildServer } from "./server.js";
import { WEB_CONSOLE_ROOT } from "./api/web-console.js";
import { loadStackConfig } from "./stack-file.js";
import { startTelemetry } from "../lib/telemetry.js";
import { consoleOriginsOf, gcpMicroVm, PROJECT } from "../stacks/config.js";
import { poolCapacityProblem, WarmPool } from "./tenants/pool.js";
import { pulumiCliVersion, REPO_ROOT, toolchain } from "../lib/toolchain.js";
import { platformBackends } from "./backends/registry.js";
import { detectGvisorSupport, gvisorCheck, type GvisorSupport } from "./gvisor-support.js";
import { detectMicroVmSupport, microVmCheck, microVmDirs, type MicroVmSupport } from "./microvm-support.js";
import { TerminalProxy } from "./terminal/proxy.js";
import { projectSecretValues } from "./tenants/project-secrets.js";
import { WAKE_WAIT_MS, wakeProject } from "./tenants/wake.js";
import { kubernetesProjects } from "./kubernetes/sandbox.js";
import { driftSweepJob } from "./jobs/drift.js";
import { e2bTimeoutJob } from "./jobs/e2b-timeout.js";
import { idleShutdownJob, memoryRetentionJob } from "./jobs/idle.js";
import { SshWaker } from "./jobs/ssh-waker.js";
import { outsideBackupsJob } from "./jobs/outside-backups.js";
import { sandboxRevivalJob } from "./jobs/revive.js";
import { tenantTokensJob } from "./jobs/tenant-tokens.js";
import { GuestTokens } from "./gcp/guest-token.js";
import { JobScheduler } from "./jobs/scheduler.js";
import { pruneRecordings, recordingsDir } from "./terminal/recording.js";
import { TicketIssuer } from "./terminal/tickets.js";
import { installProcessErrorPolicy } from "./process-errors.js";

async function main(): Promise<void> {
  // Bad options fail here, before the port opens.
  const { config, file } = loadStackConfig();
  const poolProblem = poolCapacityProblem(config.tenants.warmPool, os.totalmem());
  if (poolProblem)
    throw new Error(`${file}: invalid configuration\n  - ${PROJECT}:tenants.warmPool.size: ${poolProblem}`);
  // Before anything that makes spans: requests, queries and operations are traced from the first one.
  const telemetry = startTelemetry(config.runtime.telemetry);
  const chain = toolchain();
  const pulumiVersion = await pulumiCliVersion(chain).catch((error: Error) => error);
  const db = await openDatabase({
    url: process.env.DATABASE_URL,
    dataDir: path.join(config.host.dataDir, "db"),
  });
  await migrate(db);

  // Drift in the parts not probed is the platform stack's refresh to find.
  const hostParts = runtimeProbedParts(config.host, config.target);
  const prerequisites: Prerequisite[] = [
    pulumiPrerequisite(chain, pulumiVersion),
    ...hostParts,
    databasePrerequisite(db),
    // The tenant stacks' file state backend: with no space left no operation can save a stack.
    ...[fileBackendDir(stateBackendUrl(config))]
      .filter((dir) => dir !== undefined)
      .map(stateBackendPrerequisite),
    // GCP: the platform bucket is there, readable, and in gcp.region.
    ...(config.target === "gcp" && config.gcp
      ? [
          bucketPrerequisite(
            new GcsClient(hostTokenSource(), gcsEndpoint()),
            config.gcp.bucket,
            config.gcp.region,
          ),
        ]
      : []),
    // A cluster for kubernetes projects: their stacks need Pulumi's Kubernetes provider.
    ...(config.tenants.kubernetes ? [kubernetesProviderPrerequisite()] : []),
  ];
  const secret = tokenSecret(config.host.dataDir);
  const scrapeToken = metricsToken(config.host.dataDir);
  const auth = new Auth(db, { ...DEFAULT_AUTH, secret });
  const docker = dockerClient({ DOCKER_HOST: `unix://${config.host.dockerSocket}` });
  const tickets = new TicketIssuer(secret);
  const secretBox = SecretBox.fromDataDir(config.host.dataDir);
  const { listenHost, apiPort, terminalPort, publicHost } = config.runtime;
  const terminalUrlBase = config.runtime.terminalUrlBase ?? `ws://${publicHost}:${terminalPort}/terminal`;
  // The reconciler logs through the server's logger (used only once both exist: start() comes last).
  const settings = reconcilerOptions(config);
  // A sleeping sandbox's SSH port, held by the runtime: an ssh to it wakes the sandbox (runtime/jobs/).
  // Its operations take the port back first, so one runtime per host holds them (as it runs the sandboxes).
  const sshWaker = new SshWaker(db, {
    wake: (projectId, gone) => wakeProject(db, projectId, { timeoutMs: WAKE_WAIT_MS, gone }),
    log: (message, fields) => app.log.info({ ...fields, component: "ssh-waker" }, message),
  });
  const reconciler: Reconciler = new Reconciler({
    db,
    ...settings,
    sleepingPorts: sshWaker,
    log: (message, fields) => app.log.info({ ...fields, component: "reconciler" }, message),
  });
  // MicroVMs, on the local target and on a GCP host made for them (gcp.microvm: nested
  // virtualization, QEMU): decided in the background (the probe may take its KVM budget), so the API opens
  // at once; a microVM create before the decision is refused naming why.
  let microvm: MicroVmSupport | undefined;
  if (config.target === "local" || gcpMicroVm(config))
    void detectMicroVmSupport({ repoRoot: REPO_ROOT, dataDir: config.host.dataDir }).then((support) => {
      microvm = support;
      app.log.info(
        {
          component: "microvm",
          ...(support.available ? { accelerator: support.host.accelerator } : support),
        },
        support.available ? "microVM backend available" : "microVM backend not available",
      );
    });
  else
    microvm = {
      available: false,
      reason:
        "this GCP host was not made for microVMs (agent-sandbox:gcp.microvm is off: no QEMU, no nested virtualization)",
    };
  prerequisites.push({
    name: "microvm",
    probe: async () => microVmCheck(microvm, config.tenants.backend === "microvm"),
  });
  // gVisor for containers (`isolation: gvisor`): the engine's runsc runtime, probed with the sandbox image in
  // the background too; a gvisor create before the decision is refused naming why.
  let gvisor: GvisorSupport | undefined;
  void detectGvisorSupport(docker, config.tenants.image).then((support) => {
    gvisor = support;
    app.log.info(
      { component: "gvisor", ...support },
      support.available ? "gVisor isolation available" : "gVisor isolation not available",
    );
  });
  prerequisites.push({
    name: "gvisor",
    probe: async () => gvisorCheck(gvisor, config.tenants.isolation === "gvisor"),
  });
  const defaults = { ...tenantDefaults(config), microvm: () => microvm, gvisor: () => gvisor };
  // Kubernetes projects are reached through the cluster's API; the client is made at first use.
  const kubernetes = kubernetesProjects(
    config.tenants.kubernetes?.kubeconfigFile,
    clusterCredentials(config),
  );
  // Each project's sandbox through its own backend (runtime/backends/): the API's exec and files, the terminal.
  const backends = platformBackends({ docker: () => docker, microvm: () => microvm, kubernetes });
  const backedUpOutside = (kind: string) => !backends.traits(kind).backupDaemonInside;
  // Background jobs: they only enqueue operations; one leader per database runs each.
  const jobs = new JobScheduler(
    db,
    [
      idleShutdownJob(db, {
        idleMinutes: config.tenants.idleMinutes,
        intervalMs: config.runtime.jobs.idleCheckSeconds * 1000,
        liveTerminal: (projectId) => terminal.hasLiveSession(projectId),
        backends,
      }),
      // Paused sandboxes' memory images, dropped after tenants.memoryRetentionHours.
      memoryRetentionJob(
        db,
        config.tenants.memoryRetentionHours,
        config.runtime.jobs.idleCheckSeconds * 1000,
      ),
      driftSweepJob(db, config.runtime.jobs.driftSweepMinutes * 60_000),
      // E2B sandboxes past their timeout: killed, or stopped where the SDK asked to auto-pause.
      e2bTimeoutJob(db, config.runtime.jobs.e2bTimeoutSeconds * 1000),
      // Kubernetes projects' homes, backed up by the runtime from outside their Pods.
      ...(settings.kubernetesBackups
        ? [outsideBackupsJob(settings.kubernetesBackups, db, backends.kinds().filter(backedUpOutside))]
        : []),
      // GCP: the sandboxes' storage tokens renewed before they expire, and copied into microVMs.
      ...(settings.gcp
        ? [
            tenantTokensJob(
              db,
              settings.gcp.tokens,
              new GuestTokens(
                settings.gcp.tokens,
                (spec) => backends.runner({ projectId: spec.projectId, spec }),
                (spec) => backends.of(spec).traits.tokenCopiedIn,
              ),
              backends,
            ),
          ]
        : []),
      // The local host's engine: a restarted one leaves every sandbox exited.
      ...(config.target === "local" && config.runtime.jobs.sandboxRevivalSeconds > 0
        ? [sandboxRevivalJob(db, backends, config.runtime.jobs.sandboxRevivalSeconds * 1000)]
        : []),
    ],
    (message, fields) => app.log.warn({ ...fields, component: "jobs" }, message),
  );
  const pool = new WarmPool({
    db,
    defaults,
    settings: config.tenants.warmPool,
    runners: backends.runners(db),
    imageAvailable: (image) =>
      docker
        .getImage(image)
        .inspect()
        .then(
          () => true,
          () => false,
        ),
    log: (message, fields) => app.log.warn({ ...fields, component: "pool" }, message),
  });

  // Squid and the registry restarted when they die; only on the local target, where this
  // runtime runs on the sandbox host itself.
  const metrics = new Metrics();
  const watched = watchedHostParts(config.host);
  const watchdog =
    config.target === "local" && config.runtime.jobs.hostWatchdogSeconds > 0
      ? new HostWatchdog({
          parts: watched,
          intervalMs: config.runtime.jobs.hostWatchdogSeconds * 1000,
          log: (message, fields) => app.log.warn({ ...fields, component: "host-watchdog" }, message),
          onRepair: (repair) => metrics.countHostRepair(repair.part, repair.ok),
        })
      : undefined;
  if (watchdog) for (const part of watched) metrics.watchHostPart(part.name);

  const app = buildServer({
    metrics,
    reconcilerInFlight: () => reconciler.inFlight,
    metricsToken: scrapeToken,
    agent: { recordingsDir: recordingsDir(config.host.dataDir) },
    prerequisites,
    auth,
    limits: config.runtime,
    admins: config.runtime.admins,
    jobs,
    invites: new InviteCodes(secret),
    webConsole: { root: WEB_CONSOLE_ROOT, terminalOrigins: [new URL(terminalUrlBase).origin] },
    projects: {
      db,
      defaults,
      pool,
      secrets: secretBox,
      publicHost: config.runtime.publicHost,
      docker,
      terminal: { urlBase: terminalUrlBase, tickets },
      createWaitSeconds: config.runtime.createWaitSeconds,
      backends,
    },
  });
  // An error nothing caught is logged, counted and survived: no tenant's input may stop the runtime.
  installProcessErrorPolicy({
    log: (message, fields) => app.log.error({ ...fields, component: "process" }, message),
    count: (kind) => metrics.countProcessError(kind),
  });
  const terminal = new TerminalProxy({
    db,
    tickets,
    attacher: backends.attacher(db),
    recordingsDir: recordingsDir(config.host.dataDir),
    allowedOrigins: consoleOriginsOf(config.runtime),
    secretValues: (projectId) => projectSecretValues(db, secretBox, projectId),
    wake: (projectId, gone) => wakeProject(db, projectId, { timeoutMs: WAKE_WAIT_MS, gone }),
    http: config.runtime.http,
    log: (message, fields) => app.log.info({ ...fields, component: "terminal" }, message),
  });

  // Model-API keys added on the way out, on each tenant's own gateway address (runtime/gateway/).
  const gatewaySettings = credentialGatewayOptions(config.tenants.credentialGateway);
  const gateway = gatewaySettings
    ? new CredentialGateway({
        db,
        box: secretBox,
        ...gatewaySettings,
        log: (message, fields) => app.log.warn({ ...fields, component: "gateway" }, message),
      })
    : undefined;

  // SSH to kubernetes projects' Pods, which run no sshd: on each project's own port (runtime/kubernetes/).
  const sshGateway = config.tenants.kubernetes
    ? new KubernetesSshGateway({
        db,
        box: secretBox,
        exec: kubernetes.exec,
        limits: config.runtime.sshGateway,
        log: (message, fields) => app.log.info({ ...fields, component: "ssh-gateway" }, message),
      })
    : undefined;

  const shutdown = async (signal: string) => {
    app.log.info({ signal }, "shutting down");
    await jobs.stop();
    await sshWaker.stop();
    await watchdog?.stop();
    await pool.stop();
    await sshGateway?.close();
    kubernetes.close();
    await gateway?.close();
    await Promise.all([app.close(), terminal.close()]);
    await reconciler.stop();
    await db.close();
    // The last spans sent before the process goes.
    await telemetry?.stop().catch(() => undefined);
    process.exit(0);
  };
  process.once("SIGINT", () => void shutdown("SIGINT"));
  process.once("SIGTERM", () => void shutdown("SIGTERM"));

  const inUse = (port: number, key: string) =>
    new Error(
      `port ${port} on ${listenHost} is in use (is 'npm run local' already running?); stop that or change agent-sandbox:runtime.${key} in ${file}`,
    );
  try {
    await app.listen({ host: listenHost, port: apiPort });
  } catch (error) {
    await db.close();
    if ((error as NodeJS.ErrnoException).code === "EADDRINUSE") throw inUse(apiPort, "apiPort");
    throw error;
  }
  try {
    await terminal.listen(terminalPort, listenHost);
  } catch (error) {
    await app.close();
    await db.close();
    if ((error as NodeJS.ErrnoException).code === "EADDRINUSE") throw inUse(terminalPort, "terminalPort");
    throw error;
  }
  if (config.target === "local") {
    // After the listens (no other runtime serves this host), before forks of this process could be confused
    // with a dead one's: only copies written before this process started go.
    const startedAt = new Date(Date.now() - process.uptime() * 1000);
    const discarded = await discardUnrecordedStagedHomes(
      db,
      stagingRoots(tenantDisksRoot(config), microVmDirs(config.host.dataDir).stateRoot),
      startedAt,
    );
    if (discarded.length > 0)
      app.log.warn({ files: discarded }, "removed fork copies a killed runtime staged but never recorded");
  }
  reconciler.start();
  jobs.start();
  sshWaker.start();
  watchdog?.start();
  // Also with the pool off: members left from when it was on are drained.
  pool.start();
  await gateway?.start();
  await sshGateway?.start();
  // Recording retention: hourly, and once now.
  const retentionMs = config.runtime.recordingRetentionDays * 24 * 3600 * 1000;
  const prune = () =>
    void pruneRecordings(recordingsDir(config.host.dataDir), retentionMs).then(
      (removed) => removed > 0 && app.log.info({ removed }, "old terminal recordings deleted"),
      (error: Error) => app.log.error({ err: error }, "pruning terminal recordings failed"),
    );
  prune();
  setInterval(prune, 3600_000).unref();
  app.log.info(
    { stack: file, database: db.location },
    `runtime ready: http://${listenHost}:${apiPort}/healthz, terminals on ${terminalUrlBase}`,
  );
}

main().catch((error: Error) => {
  console.error(`error: ${error.message}`);
  process.exit(1);
});
