import * as gcp from "@pulumi/gcp";
import * as pulumi from "@pulumi/pulumi";
import { PROJECT_SERVICE_ACCOUNT_ID } from "../tenant/identity.js";

/** The Project Service account's id: the tenants' accounts name it as token creator. */
export { PROJECT_SERVICE_ACCOUNT_ID };

/**
 * Three roles (tenant accounts, the bucket, the registry), each at the narrowest scope that works: nothing
 * project-wide except what creating and deleting the tenants' service accounts needs.
 */
export const PROJECT_SERVICE_ROLES = {
  /** Project: create and delete the per-tenant service accounts. */
  serviceAccountAdmin: "roles/iam.serviceAccountAdmin",
  /** The platform bucket only: set the per-tenant IAM conditions on it. */
  bucketAdmin: "roles/storage.admin",
  /**
   * The `sandboxes` repository only: push and pull snapshots, and delete a deleted tenant's package (the writer
   * role cannot delete).
   */
  registryAdmin: "roles/artifactregistry.repoAdmin",
} as const;

/** Arguments of {@link ProjectServiceIdentity}. */
export interface ProjectServiceIdentityArgs {
  readonly project: string;
  /** The platform bucket's name. */
  readonly bucket: pulumi.Input<string>;
  /** The registry repository: its location and id. */
  readonly registry: { readonly location: pulumi.Input<string>; readonly repositoryId: pulumi.Input<string> };
}

/**
 * The Project Service account: who creates tenants' cloud resources. It has no key: the runtime on the host
 * VM impersonates it (see {@link HostIdentity}), so no long-lived credential exists anywhere.
 */
export class ProjectServiceIdentity extends pulumi.ComponentResource {
  public readonly email: pulumi.Output<string>;
  public readonly member: pulumi.Output<string>;
  /** The account's resource name, for IAM bindings on it. */
  public readonly accountName: pulumi.Output<string>;

  constructor(name: string, args: ProjectServiceIdentityArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:gcp:ProjectServiceIdentity", name, {}, opts);
    const account = new gcp.serviceaccount.Account(
      `${name}-sa`,
      {
        project: args.project,
        accountId: PROJECT_SERVICE_ACCOUNT_ID,
        displayName: "Agent Platform - Project Service",
        description:
          "Creates and deletes the tenants' service accounts and bucket conditions; pushes snapshots",
      },
      { parent: this },
    );
    const member = pulumi.interpolate`serviceAccount:${account.email}`;
    new gcp.projects.IAMMember(
      `${name}-sa-admin`,
      { project: args.project, role: PROJECT_SERVICE_ROLES.serviceAccountAdmin, member },
      { parent: this },
    );
    new gcp.storage.BucketIAMMember(
      `${name}-bucket-admin`,
      { bucket: args.bucket, role: PROJECT_SERVICE_ROLES.bucketAdmin, member },
      { parent: this },
    );
    new gcp.artifactregistry.RepositoryIamMember(
      `${name}-registry-writer`,
      {
        project: args.project,
        location: args.registry.location,
        repository: args.registry.repositoryId,
        role: PROJECT_SERVICE_ROLES.registryAdmin,
        member,
      },
      { parent: this },
    );
    this.email = account.email;
    this.member = member;
    this.accountName = account.name;
    this.registerOutputs({ email: this.email, member: this.member, accountName: this.accountName });
  }
}
