// Deep imports: the package's index would bring its 2,000 declaration files into every check of the tenant
// program (stacks/tenant/version.ts), for the three resources used here.
import * as gcpServiceAccount from "@pulumi/gcp/serviceaccount/index.js";
import * as gcpStorage from "@pulumi/gcp/storage/index.js";
import * as pulumi from "@pulumi/pulumi";
import * as path from "node:path";
import { AGENT_UID } from "../../lib/constants.js";
import { HostDirectory } from "../resources/host-directory.js";
import { HostFilesystem } from "../resources/host-filesystem.js";
import { SshKeyPair } from "../resources/ssh-keypair.js";
import { tenantNames } from "./names.js";
import type { TenantDisk } from "./storage.js";

/** Arguments of {@link TenantIdentity}. */
export interface TenantIdentityArgs {
  readonly projectId: string;
  readonly mode: "local" | "gcp";
  /** local: backups go to `<backupRoot>/<projectId>` on the host. */
  readonly backupRoot?: string;
  /**
   * local: the backup location's own filesystem, apart from the home's (losing one never loses the other);
   * absent (tenants made before it), the plain directory under `backupRoot`.
   */
  readonly backupDisk?: TenantDisk;
  /** A microVM keeps its backups on a disk of its own (/mnt/backup in the guest): nothing on the host. */
  readonly backupInGuest?: boolean;
  /** gcp: the platform bucket and its GCP project. */
  readonly gcp?: { readonly project: string; readonly bucket: string };
  /** A public key made outside the stack (by the API); without it the stack makes the keypair. */
  readonly sshPublicKey?: string;
  /**
   * local, the plain directory: who owns it. The agent (uid 1000) in a sandbox that mounts it; a Pod's backups
   * are the runtime's, whose rclone runs as `nobody` (NOBODY_UID) on the host.
   */
  readonly backupOwner?: number;
}

/** Where a local tenant's backups are on the host (its plain directory under `backupRoot`). */
export function localBackupHostDir(backupRoot: string, projectId: string): string {
  return path.join(backupRoot, projectId);
}

export interface BucketCondition {
  readonly role: string;
  readonly title: string;
  readonly description: string;
  readonly expression: string;
}

/**
 * IAM conditions confining a project's service account to `projects/<id>/` of the bucket (read-write)
 * and `shared/` (read-only). The trailing slash matters: `projects/p1` would also match `projects/p10/`.
 * Listing is a bucket-level permission, so it is confined by the requested prefix instead.
 */
export function bucketPrefixConditions(bucket: string, projectId: string): BucketCondition[] {
  const objects = `projects/_/buckets/${bucket}/objects/`;
  const listPrefix = `api.getAttribute("storage.googleapis.com/objectListPrefix", "")`;
  const bucketResource = `resource.type == "storage.googleapis.com/Bucket"`;
  const own = `projects/${projectId}/`;
  return [
    {
      role: "roles/storage.objectAdmin",
      title: `project ${projectId} objects`,
      description: `read-write on gs://${bucket}/${own} only`,
      expression: `resource.name.startsWith("${objects}${own}")`,
    },
    {
      role: "roles/storage.objectViewer",
      title: `project ${projectId} listing`,
      description: `list gs://${bucket}/${own} and gs://${bucket}/shared/ only`,
      expression: `${bucketResource} && (${listPrefix}.startsWith("${own}") || ${listPrefix}.startsWith("shared/"))`,
    },
    {
      role: "roles/storage.objectViewer",
      title: "shared objects",
      description: `read-only on gs://${bucket}/shared/`,
      expression: `resource.name.startsWith("${objects}shared/")`,
    },
  ];
}

/**
 * The Project Service account's id, here because the tenant program must not import
 * the platform's components (its version covers components/tenant and components/resources only).
 */
export const PROJECT_SERVICE_ACCOUNT_ID = "project-service-sa";

/** The tenant's own service account (made by {@link TenantIdentity} in gcp mode). */
/** Where a gcp-mode tenant's home is backed up: its own prefix of the platform's bucket, as rclone names it. */
export const gcsBackupRemote = (bucket: string, projectId: string) =>
  `:gcs:${bucket}/projects/${projectId}/workspace`;

export function tenantServiceAccountEmail(project: string, projectId: string): string {
  return `${tenantNames(projectId).serviceAccountId}@${project}.iam.gserviceaccount.com`;
}

/**
 * Who may mint tokens of a tenant's account: the Project Service account, which the runtime impersonates
 * to act for a tenant. No key of a tenant's account exists anywhere.
 */
export const TENANT_TOKEN_CREATOR_ROLE = "roles/iam.serviceAccountTokenCreator";

export function validateTenantIdentityArgs(args: TenantIdentityArgs): string[] {
  if (args.mode === "local" && !args.backupRoot) return ["backupRoot is required in local mode"];
  if (args.mode === "gcp" && !args.gcp) return ["gcp (project, bucket) is required in gcp mode"];
  return [];
}

/**
 * Who the sandbox is: its SSH keypair, and what it may write backups to: a per-project directory on the
 * host locally, or on GCP a service account that can touch only the project's prefix of the bucket. It has
 * no key: the runtime mints short-lived tokens of it through the Project Service account (impersonation,
 * runtime/gcp/credentials.ts), which this grants the token-creator role on the account and nothing else.
 */
export class TenantIdentity extends pulumi.ComponentResource {
  public readonly sshPublicKey: pulumi.Output<string>;
  /** Only when the stack made the keypair. */
  public readonly sshPrivateKey: pulumi.Output<string | undefined>;
  /** rclone remote the sandbox backs up to. */
  public readonly backupRemote: pulumi.Output<string>;
  /** local: the host directory mounted at /mnt/backup. */
  public readonly backupHostDir: pulumi.Output<string | undefined>;
  public readonly serviceAccountEmail: pulumi.Output<string | undefined>;

  constructor(name: string, args: TenantIdentityArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:tenant:Identity", name, {}, opts);
    const problems = validateTenantIdentityArgs(args);
    if (problems.length > 0) throw new pulumi.ResourceError(problems.join("; "), this);
    const names = tenantNames(args.projectId);
    if (args.sshPublicKey) {
      this.sshPublicKey = pulumi.output(args.sshPublicKey);
      this.sshPrivateKey = pulumi.output(undefined);
    } else {
      const keypair = new SshKeyPair(
        `${name}-ssh`,
        { comment: `agent@${names.container}` },
        { parent: this },
      );
      this.sshPublicKey = keypair.publicKey;
      this.sshPrivateKey = keypair.privateKey;
    }

    if (args.mode === "gcp") {
      const { project, bucket } = args.gcp!;
      const account = new gcpServiceAccount.Account(
        `${name}-sa`,
        {
          project,
          accountId: names.serviceAccountId,
          displayName: `agent sandbox ${args.projectId}`,
          description: `Backups of project ${args.projectId}`,
        },
        { parent: this },
      );
      new gcpServiceAccount.IAMMember(
        `${name}-sa-token-creator`,
        {
          serviceAccountId: account.name,
          role: TENANT_TOKEN_CREATOR_ROLE,
          member: `serviceAccount:${PROJECT_SERVICE_ACCOUNT_ID}@${project}.iam.gserviceaccount.com`,
        },
        { parent: this },
      );
      bucketPrefixConditions(bucket, args.projectId).forEach(
        (condition, index) =>
          new gcpStorage.BucketIAMMember(
            `${name}-bucket-${index}`,
            {
              bucket,
              role: condition.role,
              member: pulumi.interpolate`serviceAccount:${account.email}`,
              condition: {
                title: condition.title,
                description: condition.description,
                expression: condition.expression,
              },
            },
            { parent: this },
          ),
      );
      this.serviceAccountEmail = account.email;
      this.backupRemote = pulumi.output(gcsBackupRemote(bucket, args.projectId));
      this.backupHostDir = pulumi.output(undefined);
    } else if (args.backupInGuest) {
      this.backupHostDir = pulumi.output(undefined);
      this.backupRemote = pulumi.output("/mnt/backup/workspace");
      this.serviceAccountEmail = pulumi.output(undefined);
    } else if (args.backupDisk) {
      // rclone writes here as the agent: a size of its own, so a runaway backup fills this and not the host.
      const disk = new HostFilesystem(
        `${name}-backup-disk`,
        { ...args.backupDisk, uid: AGENT_UID, gid: AGENT_UID, mode: "0700" },
        { parent: this },
      );
      this.backupHostDir = disk.dataPath;
      this.backupRemote = pulumi.output("/mnt/backup/workspace");
      this.serviceAccountEmail = pulumi.output(undefined);
    } else {
      const dir = new HostDirectory(
        `${name}-backup`,
        {
          path: localBackupHostDir(args.backupRoot!, args.projectId),
          uid: args.backupOwner ?? AGENT_UID,
          gid: args.backupOwner ?? AGENT_UID,
          mode: "0700",
          deleteContents: true,
        },
        { parent: this },
      );
      this.backupHostDir = dir.path;
      this.backupRemote = pulumi.output("/mnt/backup/workspace");
      this.serviceAccountEmail = pulumi.output(undefined);
    }
    this.registerOutputs({
      sshPublicKey: this.sshPublicKey,
      sshPrivateKey: this.sshPrivateKey,
      backupRemote: this.backupRemote,
      backupHostDir: this.backupHostDir,
      serviceAccountEmail: this.serviceAccountEmail,
    });
  }
}
