import type { Database, Queryable } from "../store/db.js";
import {
  enqueueOperation,
  operationByIdempotencyKey,
  operationsQueued,
  type Operation,
  type OperationKind,
} from "../store/operations.js";
import {
  allocatedSubnetsAndPorts,
  applyPendingImage,
  getTenant,
  lockOwnerProjects,
  lockTenantAllocations,
  recordCreatingTenant,
  recordDesiredChange,
  recordTenantSettings,
} from "../store/tenants.js";
import { TenantSpec, type TenantSpecInput } from "../../components/tenant/spec.js";
import type { KubernetesBackendSpec } from "../../components/tenant/kubernetes/spec.js";
import { allocateTenantSubnet, SubnetPoolExhaustedError } from "../../lib/subnets.js";
import { PROJECT } from "../../stacks/config/shared.js";
import type { HostUsage } from "../../lib/host/net.js";
import type { NestedCaps } from "../../lib/microvm/nested.js";
import type { GvisorSupport } from "../gvisor-support.js";
import type { MicroVmSupport } from "../microvm-support.js";

/** Where new tenants go and what they get unless asked otherwise: from the platform's config. */
export interface TenantDefaults {
  readonly mode: "local" | "gcp";
  readonly image: string;
  readonly subnetPool: string;
  readonly sshPortRange: readonly [number, number];
  readonly host: TenantSpecInput["host"];
  readonly gcp?: TenantSpecInput["gcp"];
  readonly backupIntervalSeconds?: number;
  readonly backupAfterChangeSeconds?: number;
  /** Local mode: the sizes of a new tenant's home and backup filesystems (spec `homeBytes`, `backupBytes`). */
  readonly homeBytes?: number;
  readonly backupBytes?: number;
  /**
   * What the host uses outside the platform's records: subnets and ports in use there are
   * skipped at allocation, so a foreign network or a leftover bridge never fails a create.
   */
  readonly hostUsage?: HostUsage;
  /** What a create gets without asking (`tenants.backend`): container unless configured. */
  readonly backend?: string;
  /** The kubernetes backend's spec block (`tenants.kubernetes` less its kubeconfig); undefined: not configured. */
  readonly kubernetes?: KubernetesBackendSpec;
  /** Whether this host runs microVMs, and with what (runtime/microvm-support.ts); undefined while probing. */
  readonly microvm?: () => MicroVmSupport | undefined;
  /** The largest microVM a nested project gets (`tenants.nestedVirtualization`); 4 GiB and 2 vCPUs unless set. */
  readonly nestedCaps?: NestedCaps;
  /** What a container create gets without asking (`tenants.isolation`): runc unless configured. */
  readonly isolation?: Isolation;
  /** Whether the engine runs gVisor (runtime/gvisor-support.ts); undefined while probing. */
  readonly gvisor?: () => GvisorSupport | undefined;
}

export interface CreateTenantRequest {
  readonly projectId: string;
  readonly ownerId: string;
  readonly allowlist?: string[];
  readonly limits?: TenantSpecInput["limits"];
  readonly sshPublicKey?: string;
  readonly idempotencyKey?: string;
  /** Dev-server ports for the front door. */
  readonly ports?: TenantSpecInput["ports"];
  /** Bandwidth caps (the container backend's: its admission checked). */
  readonly bandwidth?: TenantSpecInput["bandwidth"];
  /**
   * What the project's backend adds to its spec, its admission passed (runtime/backends/:
   * `SandboxBackend.admit`); none: a container.
   */
  readonly backendFields?: BackendFields;
  /** What a fork takes from its source instead of the defaults (runtime/tenants/fork.ts). */
  readonly forkFields?: ForkFields;
  /** A create nobody waits on (a warm pool member's): run after every other runnable operation. */
  readonly background?: boolean;
}

/**
 * What a fork's spec takes from its source's: its home (size, and the staged copy), protected paths, image
 * (a devcontainer's toolchain, `PATCH image`; not a restored snapshot of the source's own: runtime/tenants/fork.ts)
 * and bandwidth caps (admitted for the source's backend, which is the fork's).
 */
export type ForkFields = Partial<
  Pick<TenantSpecInput, "homeBytes" | "homeCopyFrom" | "protectedPaths" | "image" | "bandwidth">
>;

/** What a backend adds to a new project's spec: its name (none for a container) and its own block. */
export type BackendFields = Partial<
  Pick<TenantSpecInput, "backend" | "microvm" | "kubernetes" | "isolation">
>;

/** A container's isolation (TenantSpec `isolation`): the engine's runc, or gVisor. */
export type Isolation = "runc" | "gvisor";

/** What a create asks of its backend beyond the platform's defaults. */
export interface AdmitRequest {
  /** The isolation asked for; absent: the platform's `tenants.isolation` where the backend has one. */
  readonly isolation?: Isolation;
  /** A microVM whose guest runs VMs of its own (docs/microvm.md, "Nested virtualisation"). */
  readonly nestedVirtualization?: boolean;
  /** Bandwidth caps asked for (the backend must shape them: BackendTraits.bandwidth). */
  readonly bandwidth?: boolean;
}

/**
 * A request the caller got wrong, or one the host has no room for (503: `capacity` names the config key of
 * what ran out); `status` is what an HTTP API answers.
 */
export class TenantRequestError extends Error {
  constructor(
    readonly status: 400 | 404 | 409 | 503,
    message: string,
    readonly capacity?: string,
  ) {
    super(message);
    this.name = "TenantRequestError";
  }
}

/** What a create needs room for on the host: each a config key an operator can widen. */
export const SUBNET_CAPACITY = `${PROJECT}:tenants.subnetPool`;
export const SSH_PORT_CAPACITY = `${PROJECT}:tenants.sshPortRange`;

async function lowestFreePort(
  range: readonly [number, number],
  taken: Set<number>,
  host: HostUsage | undefined,
): Promise<number> {
  const busy: number[] = [];
  for (let port = range[0]; port <= range[1]; port++) {
    if (taken.has(port)) continue;
    if (host && (await host.portInUse(port))) {
      busy.push(port);
      continue;
    }
    return port;
  }
  throw new TenantRequestError(
    503,
    `no SSH port left in ${range[0]}-${range[1]} (${SSH_PORT_CAPACITY}): each is held by a project` +
      (busy.length > 0 ? ` or by something else on the host (${busy.join(", ")})` : "") +
      "; one frees when a project is deleted",
    SSH_PORT_CAPACITY,
  );
}

/** {@link requestCreate} inside a transaction the caller holds (to record more in the same one). */
export async function requestCreateIn(
  tx: Queryable,
  defaults: TenantDefaults,
  request: CreateTenantRequest,
): Promise<{ operation: Operation; created: boolean }> {
  if (request.idempotencyKey) {
    const earlier = await operationByIdempotencyKey(tx, request.idempotencyKey);
    if (earlier) {
      if (earlier.project_id !== request.projectId || earlier.kind !== "create") {
        throw new TenantRequestError(
          409,
          `idempotency key ${request.idempotencyKey} was already used for another request`,
        );
      }
      return { operation: earlier, created: false };
    }
  }
  await lockOwnerProjects(tx, request.ownerId);
  await lockTenantAllocations(tx);
  const existing = await getTenant(tx, request.projectId);
  if (existing && existing.state !== "deleted")
    throw new TenantRequestError(409, `project ${request.projectId} already exists`);
  const allocated = await allocatedSubnetsAndPorts(tx);
  let subnet: string;
  try {
    subnet = allocateTenantSubnet(
      defaults.subnetPool,
      allocated.flatMap((r) => (r.subnet ? [r.subnet] : [])),
      (await defaults.hostUsage?.networks()) ?? [],
    );
  } catch (error) {
    if (error instanceof SubnetPoolExhaustedError)
      throw new TenantRequestError(
        503,
        `${error.message} (${SUBNET_CAPACITY}); one frees when a project is deleted`,
        SUBNET_CAPACITY,
      );
    throw new TenantRequestError(409, (error as Error).message);
  }
  const sshPort = await lowestFreePort(
    defaults.sshPortRange,
    new Set(allocated.flatMap((r) => (r.ssh_port ? [r.ssh_port] : []))),
    defaults.hostUsage,
  );
  const parsed = TenantSpec.safeParse({
    projectId: request.projectId,
    ownerId: request.ownerId,
    ownerLabel: false,
    mode: defaults.mode,
    image: defaults.image,
    subnet,
    sshHostPort: sshPort,
    allowlist: request.allowlist,
    limits: request.limits,
    sshPublicKey: request.sshPublicKey,
    ports: request.ports,
    ...(request.bandwidth ? { bandwidth: request.bandwidth } : {}),
    backupIntervalSeconds: defaults.backupIntervalSeconds,
    backupAfterChangeSeconds: defaults.backupAfterChangeSeconds,
    homeBytes: defaults.homeBytes,
    backupBytes: defaults.backupBytes,
    host: defaults.host,
    gcp: defaults.gcp,
    ...request.forkFields,
    ...request.backendFields,
  });
  if (!parsed.success) {
    throw new TenantRequestError(
      400,
      parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; "),
    );
  }
  await recordCreatingTenant(tx, {
    projectId: request.projectId,
    ownerId: request.ownerId,
    spec: parsed.data,
    subnet,
    sshPort,
  });
  return enqueueOperation(tx, request.projectId, "create", request.idempotencyKey, undefined, {
    background: request.background,
  });
}

/**
 * Records a new tenant's desired state with its subnet and SSH port, and a `create` operation, in one
 * transaction. Nothing runs Pulumi here: the reconciler does.
 */
export async function requestCreate(
  db: Database,
  defaults: TenantDefaults,
  request: CreateTenantRequest,
): Promise<{ operation: Operation; created: boolean }> {
  return db.transaction((tx) => requestCreateIn(tx, defaults, request));
}

/** What an operation changes in the desired state before it runs (recorded with it, in one transaction). */
export interface DesiredChange {
  readonly running?: boolean;
  /** The image the sandbox runs (a restore puts a snapshot here). */
  readonly image?: string;
  /**
   * A microVM's: whether its stop keeps its memory (a pause) or drops it, and on a stopped one, false drops
   * the image it kept. A start sets it again: the next stop is a pause unless asked otherwise.
   */
  readonly keepMemory?: boolean;
}

/** What an owner may change on a live project (PATCH /projects/{id}); each is an update of its stack. */
export interface SettingsChange {
  readonly allowlist?: string[];
  readonly limits?: Partial<TenantSpec["limits"]>;
  readonly protectedPaths?: string[];
  /** Front-door ports (replace the list): one route each is added or removed, the sandbox untouched. */
  readonly ports?: TenantSpec["ports"];
  /** A new image: at once (`restart`, or the sandbox is stopped), else at the next start. */
  readonly image?: { readonly ref: string; readonly restart: boolean };
  /** Bandwidth caps (replace the ones it has), shaped in place; `null` removes them. */
  readonly bandwidth?: TenantSpec["bandwidth"] | null;
}

/**
 * Records new settings in the desired state and an `update` that applies them: the allowlist is Squid's
 * (reconfigured, the sandbox untouched), limits change the container's cgroup in place, an image or the
 * protected paths replace the container (same home volume). An image for a running sandbox without
 * `restart` waits for the next start, and needs no operation now. The merged spec is validated before
 * anything is recorded: a bad value is a 400 naming it.
 */
export async function requestSettingsChange(
  db: Database,
  projectId: string,
  change: SettingsChange,
  /**
   * A new allowlist in force before the commit, where the project's backend can (SandboxBackends
   * .applyAllowlist): after the row's update, which holds its lock, so two changes apply in the order they
   * commit. One that fails leaves it to the update, whose operation says why if it fails too.
   */
  applyAllowlist?: (before: TenantSpec, after: TenantSpec) => Promise<void>,
): Promise<{ operation: Operation | undefined; pendingImage: string | null }> {
  return db.transaction(async (tx) => {
    const tenant = await getTenant(tx, projectId);
    if (!tenant || tenant.state === "deleted")
      throw new TenantRequestError(404, `project ${projectId} does not exist`);
    const spec = tenant.spec;
    const imageNow = change.image && (change.image.restart || !spec.running);
    const next = {
      ...spec,
      // null: no caps (the key gone, as in a spec that never had them).
      ...(change.bandwidth !== undefined ? { bandwidth: change.bandwidth ?? undefined } : {}),
      ...(change.allowlist ? { allowlist: change.allowlist } : {}),
      ...(change.limits ? { limits: { ...spec.limits, ...change.limits } } : {}),
      ...(change.protectedPaths ? { protectedPaths: change.protectedPaths } : {}),
      ...(change.ports ? { ports: change.ports } : {}),
      ...(imageNow ? { image: change.image!.ref } : {}),
    };
    const parsed = TenantSpec.safeParse(next);
    if (!parsed.success)
      throw new TenantRequestError(
        400,
        parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; "),
      );
    const pendingImage = change.image && !imageNow ? change.image.ref : null;
    const specChanged = JSON.stringify(parsed.data) !== JSON.stringify(TenantSpec.parse(spec));
    await recordTenantSettings(tx, projectId, parsed.data, pendingImage, Boolean(imageNow));
    const allowlistChanged = JSON.stringify(parsed.data.allowlist) !== JSON.stringify(spec.allowlist);
    if (applyAllowlist && allowlistChanged && !["creating", "deleting"].includes(tenant.state))
      await applyAllowlist(TenantSpec.parse(spec), parsed.data).catch(() => undefined);
    const operation = specChanged ? (await enqueueOperation(tx, projectId, "update")).operation : undefined;
    return { operation, pendingImage };
  });
}

/** Records a change of desired state (start, stop, delete, ...) and the operation that carries it out. */
export async function requestOperation(
  db: Database,
  projectId: string,
  kind: Exclude<OperationKind, "create">,
  idempotencyKey?: string,
  asked: DesiredChange = kind === "start" ? { running: true } : kind === "stop" ? { running: false } : {},
): Promise<{ operation: Operation; created: boolean }> {
  // Whatever runs the sandbox again (a start, a wake, a restore) makes its next stop a pause once more.
  const change = asked.running === true ? { keepMemory: true, ...asked } : asked;
  const queued = await db.transaction(async (tx) => {
    const tenant = await getTenant(tx, projectId);
    if (!tenant || tenant.state === "deleted")
      throw new TenantRequestError(404, `project ${projectId} does not exist`);
    if (change.running !== undefined || change.image !== undefined || change.keepMemory !== undefined) {
      // A restore's image replaces one waiting for the next start.
      await recordDesiredChange(tx, projectId, change, change.image !== undefined);
    }
    // An image set while the sandbox ran (no restart) is the one it starts with.
    if (kind === "start") await applyPendingImage(tx, projectId);
    return enqueueOperation(tx, projectId, kind, idempotencyKey);
  });
  if (queued.created) operationsQueued();
  return queued;
}
