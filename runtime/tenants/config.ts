import { createHash } from "node:crypto";
import { chmodSync, mkdirSync, readFileSync } from "node:fs";
import * as path from "node:path";
import { GCP } from "../../lib/constants.js";
import { squidPaths } from "../../lib/host/squid.js";
import { engineHostUsage } from "../../lib/host/net.js";
import { statePassphrase } from "../secrets.js";
import type { StackConfig } from "../../stacks/config.js";
import type { KubernetesBackendSpec } from "../../components/tenant/kubernetes/spec.js";
import type { TenantDefaults } from "./service.js";
import type { TenantStackOptions } from "./stack.js";
import type { SnapshotOptions } from "./snapshots.js";
import type { KubernetesProjects } from "../kubernetes/sandbox.js";
import { KubernetesBackups } from "../kubernetes/backup.js";
import { gkeCredentials, kubeconfigWithToken, type GkeCredentials } from "../kubernetes/gke-credentials.js";
import { PROJECT_SERVICE_ACCOUNT_ID } from "../../components/gcp/project-service-identity.js";
import { TenantTokens } from "../gcp/credentials.js";
import {
  GcsClient,
  GOOGLE_STORAGE,
  gcsEndpoint,
  hostTokenSource,
  type TenantCloudStorage,
} from "../gcp/storage.js";
import { artifactRegistryAuth, deleteArtifactPackage } from "../gcp/registry.js";

/** Each tenant's secret files go under `<root>/<project>` (components/tenant/secrets.ts). */
export const tenantSecretsRoot = (config: StackConfig) => path.join(config.host.dataDir, "tenant-secrets");

/** Each tenant's authorized SSH key goes under `<root>/<project>` (components/tenant/sandbox.ts). */
export const tenantSshKeysRoot = (config: StackConfig) => path.join(config.host.dataDir, "tenant-ssh-keys");

/** Each local tenant's filesystem images and mountpoints go under `<root>/<project>` (components/tenant/tenant.ts). */
export const tenantDisksRoot = (config: StackConfig) => path.join(path.resolve(config.host.dataDir), "disks");

/** The tenant stacks' state backend: `file://<dataDir>/state` locally, `gs://<bucket>/state` on GCP. */
export function stateBackendUrl(config: StackConfig): string {
  return config.target === "gcp"
    ? `gs://${config.gcp!.bucket}/state`
    : `file://${path.join(path.resolve(config.host.dataDir), "state")}`;
}

/**
 * The platform instance's id: 12 hex digits of the SHA-256 of its tenant stacks' state backend. Several
 * instances share one engine and the host's iptables chains (the operator's platform, every integration
 * test's); what tells them apart is where their stacks live, which is also what decides whether a tenant
 * "has a stack". So processes on one backend (the runtime, a standalone worker, `npm run orphans`) agree
 * without being told, and two instances can never share an id unless they share their stacks. Moving the
 * backend (another data dir or bucket) makes a new instance: its tenants get the new id with their next
 * create.
 */
export function platformInstanceId(config: StackConfig): string {
  return createHash("sha256").update(stateBackendUrl(config)).digest("hex").slice(0, 12);
}

/**
 * Where the tenant stacks keep their state and how their secrets are encrypted: a file backend with a
 * passphrase locally; on GCP the bucket's state/ prefix and the platform's KMS key.
 */
export function tenantStackOptions(
  config: StackConfig,
  env: NodeJS.ProcessEnv = process.env,
): TenantStackOptions {
  const workRoot = path.join(config.host.dataDir, "work");
  const dockerHost = `unix://${config.host.dockerSocket}`;
  const backendUrl = stateBackendUrl(config);
  const kubeconfigFile = config.tenants.kubernetes?.kubeconfigFile;
  const credentials = clusterCredentials(config, env);
  // Read at each operation: an operator may rotate the file under a running runtime.
  const cluster = kubeconfigFile
    ? {
        kubeconfig: () =>
          credentials
            ? kubeconfigWithToken(readKubeconfigText(kubeconfigFile), credentials)
            : readKubeconfigText(kubeconfigFile),
      }
    : {};
  if (config.target === "gcp") {
    const gcp = config.gcp!;
    return {
      backendUrl,
      secretsProvider: `gcpkms://${gcp.kmsKey}`,
      workRoot,
      dockerHost,
      sharedProvider: config.tenants.sharedProvider,
      ...cluster,
    };
  }
  mkdirSync(backendUrl.slice("file://".length), { recursive: true });
  // Root-only: the tenants' directories below it are bind-mounted into their sandboxes, and only there are
  // their files for anyone but root to read.
  mkdirSync(tenantSecretsRoot(config), { recursive: true, mode: 0o700 });
  chmodSync(tenantSecretsRoot(config), 0o700);
  return {
    backendUrl,
    workRoot,
    passphrase: statePassphrase(config.host.dataDir, env),
    dockerHost,
    sharedProvider: config.tenants.sharedProvider,
    ...cluster,
  };
}

/** The kubeconfig file's text, or an error naming the key and the file. */
function readKubeconfigText(file: string): string {
  try {
    return readFileSync(file, "utf8");
  } catch (error) {
    throw new Error(
      `agent-sandbox:tenants.kubernetes.kubeconfigFile ${file} cannot be read: ${(error as NodeJS.ErrnoException).code ?? error}`,
    );
  }
}

/**
 * `tenants.kubernetes` as every kubernetes tenant's spec gets it: the kubeconfig's path and how the runtime
 * authenticates are the runtime's alone.
 */
function kubernetesSpecDefaults({
  kubeconfigFile: _file,
  credentials: _credentials,
  ...spec
}: NonNullable<StackConfig["tenants"]["kubernetes"]>): KubernetesBackendSpec {
  return spec;
}

/**
 * With `tenants.kubernetes.credentials: gke`, the runtime's token on the cluster: the Project Service account's,
 * minted with the VM's own token (AGENT_SANDBOX_IAMCREDENTIALS_ENDPOINT points the tests at their own).
 */
export function clusterCredentials(
  config: StackConfig,
  env: NodeJS.ProcessEnv = process.env,
): GkeCredentials | undefined {
  if (config.tenants.kubernetes?.credentials !== "gke") return undefined;
  return projectServiceCredentials(config, env);
}

/**
 * On GCP, the runtime's own token as the Project Service account (the identity its tenant stacks run as): minted
 * with the VM's token and kept until shortly before it expires (AGENT_SANDBOX_IAMCREDENTIALS_ENDPOINT points the
 * tests at their own IAM Credentials).
 */
export function projectServiceCredentials(
  config: StackConfig,
  env: NodeJS.ProcessEnv = process.env,
): GkeCredentials | undefined {
  if (config.target !== "gcp") return undefined;
  const gcp = config.gcp!;
  return gkeCredentials({
    account:
      gcp.impersonateServiceAccount ?? `${PROJECT_SERVICE_ACCOUNT_ID}@${gcp.project}.iam.gserviceaccount.com`,
    source: hostTokenSource(env),
    endpoint: env.AGENT_SANDBOX_IAMCREDENTIALS_ENDPOINT || undefined,
  });
}

export function tenantDefaults(config: StackConfig): TenantDefaults {
  const squid = squidPaths(config.host);
  return {
    mode: config.target,
    image: config.tenants.image,
    subnetPool: config.tenants.subnetPool,
    sshPortRange: config.tenants.sshPortRange,
    backupIntervalSeconds: config.tenants.backupIntervalSeconds,
    backupAfterChangeSeconds: config.tenants.backupAfterChangeSeconds,
    backend: config.tenants.backend,
    isolation: config.tenants.isolation,
    nestedCaps: config.tenants.nestedVirtualization,
    ...(config.tenants.kubernetes ? { kubernetes: kubernetesSpecDefaults(config.tenants.kubernetes) } : {}),
    ...(config.target === "local"
      ? { homeBytes: config.tenants.homeBytes, backupBytes: config.tenants.backupBytes }
      : {}),
    // Both targets run the sandboxes on the runtime's own host and engine (a VM on GCP).
    hostUsage: engineHostUsage(config.host.dockerSocket),
    host: {
      instance: platformInstanceId(config),
      squidPort: config.host.squidPort,
      squidConfigFile: squid.config,
      squidFragmentsDir: squid.fragmentsDir,
      backupRoot: path.join(config.host.dataDir, "backups"),
      ...(config.target === "local" ? { disksRoot: tenantDisksRoot(config) } : {}),
      secretsRoot: tenantSecretsRoot(config),
      sshKeysRoot: tenantSshKeysRoot(config),
      gatewayPort: config.tenants.credentialGateway.port || undefined,
      // The GCP host's front door is public, on the platform's domain with TLS (the startup script's Caddy).
      frontDoor:
        config.target === "gcp" && config.gcp
          ? {
              adminPort: config.host.frontDoorAdminPort,
              port: GCP.httpsPort,
              domain: config.gcp.domain,
              authUpstream: `127.0.0.1:${config.runtime.apiPort}`,
              tls: true,
            }
          : {
              adminPort: config.host.frontDoorAdminPort,
              port: config.host.frontDoorPort,
              domain: "sandbox.localhost",
              authUpstream: `127.0.0.1:${config.runtime.apiPort}`,
            },
    },
    gcp: config.gcp ? { project: config.gcp.project, bucket: config.gcp.bucket } : undefined,
  };
}

/**
 * Where snapshots go: the platform's Artifact Registry repository `sandboxes` on GCP (its cleanup policy
 * keeps the newest five), the local registry here (the runtime deletes old ones itself).
 */
export function snapshotOptions(config: StackConfig, env: NodeJS.ProcessEnv = process.env): SnapshotOptions {
  if (config.target === "gcp") {
    const gcp = config.gcp!;
    const registryHost = env.AGENT_SANDBOX_REGISTRY_HOST || `${gcp.region}-docker.pkg.dev`;
    const credentials = projectServiceCredentials(config, env)!;
    const token = async () => (await credentials.refresh(), credentials.token());
    return {
      repository: `${registryHost}/${gcp.project}/${GCP.registryRepository}`,
      keep: config.tenants.snapshotsKept,
      pruneRegistry: false,
      registryAuth: artifactRegistryAuth(registryHost, credentials),
      deleteProjectImages: (projectId) =>
        deleteArtifactPackage(
          { project: gcp.project, location: gcp.region, repository: GCP.registryRepository, name: projectId },
          token,
          env.AGENT_SANDBOX_ARTIFACTREGISTRY_ENDPOINT || undefined,
        ),
    };
  }
  return {
    repository: `127.0.0.1:${config.host.registryPort}/sandboxes`,
    keep: config.tenants.snapshotsKept,
    pruneRegistry: true,
  };
}

/**
 * The runtime's backups of kubernetes projects (runtime/kubernetes/backup.ts): through the cluster's exec; on
 * GCP with each tenant's own token minted at each backup, to the bucket's endpoint (STORAGE_EMULATOR_HOST in the
 * tests); on the local target to each tenant's directory on this host.
 */
export function kubernetesBackupsOf(
  config: StackConfig,
  projects: KubernetesProjects,
  gcp: TenantCloud | undefined,
  env: NodeJS.ProcessEnv = process.env,
): KubernetesBackups | undefined {
  if (!gcp && config.target === "gcp") return undefined;
  const endpoint = gcsEndpoint(env);
  return new KubernetesBackups({
    exec: projects.exec,
    runnerOf: projects.runnerOf,
    homeClaimUid: projects.homeClaimUid,
    ...(gcp ? { token: (projectId: string) => gcp.tokens.mint(projectId) } : {}),
    ...(gcp && endpoint !== GOOGLE_STORAGE ? { storageEndpoint: endpoint } : {}),
  });
}

/** A GCP platform's storage for its tenants: the bucket, and each tenant's tokens for it. */
export interface TenantCloud {
  readonly storage: TenantCloudStorage;
  readonly tokens: TenantTokens;
}

/**
 * gcp: the bucket a tenant's delete empties and the impersonation chain its tokens come from (the VM's
 * account, then the Project Service account). STORAGE_EMULATOR_HOST and AGENT_SANDBOX_IAMCREDENTIALS_ENDPOINT
 * point them elsewhere (the tests); nothing else differs.
 */
export function gcpTenantCloud(
  config: StackConfig,
  env: NodeJS.ProcessEnv = process.env,
): TenantCloud | undefined {
  if (config.target !== "gcp") return undefined;
  const gcp = config.gcp!;
  const source = hostTokenSource(env);
  return {
    storage: { client: new GcsClient(source, gcsEndpoint(env)), bucket: gcp.bucket },
    tokens: new TenantTokens(
      {
        project: gcp.project,
        projectServiceAccount:
          gcp.impersonateServiceAccount ??
          `${PROJECT_SERVICE_ACCOUNT_ID}@${gcp.project}.iam.gserviceaccount.com`,
        source,
        endpoint: env.AGENT_SANDBOX_IAMCREDENTIALS_ENDPOINT || undefined,
      },
      tenantSecretsRoot(config),
    ),
  };
}
