import * as gcp from "@pulumi/gcp";
import * as pulumi from "@pulumi/pulumi";
import { GCP } from "../../lib/constants.js";

export const HOST_SERVICE_ACCOUNT_ID = "agent-sandbox-host";

/** One IAM condition on a bucket binding. */
export interface HostBucketGrant {
  readonly role: string;
  readonly title: string;
  readonly description: string;
  readonly expression: string;
}

/**
 * The host VM's bucket grants, each confined by an IAM condition: the tenant stacks' state (read-write,
 * the `gs://` backend runs as the VM's account), listing that prefix (listing is bucket-level, so it is
 * confined by the requested prefix), and reading runtime releases.
 */
export function hostBucketGrants(bucket: string): HostBucketGrant[] {
  const objects = `projects/_/buckets/${bucket}/objects/`;
  const listPrefix = `api.getAttribute("storage.googleapis.com/objectListPrefix", "")`;
  return [
    {
      role: "roles/storage.objectAdmin",
      title: "tenant stack state",
      description: `read-write on gs://${bucket}/${GCP.statePrefix} only`,
      expression: `resource.name.startsWith("${objects}${GCP.statePrefix}")`,
    },
    {
      role: "roles/storage.objectViewer",
      title: "tenant stack state listing",
      description: `list gs://${bucket}/${GCP.statePrefix} only`,
      expression: `resource.type == "storage.googleapis.com/Bucket" && ${listPrefix}.startsWith("${GCP.statePrefix}")`,
    },
    {
      role: "roles/storage.objectViewer",
      title: "runtime releases",
      description: `read gs://${bucket}/${GCP.releasesPrefix} only`,
      expression: `resource.name.startsWith("${objects}${GCP.releasesPrefix}")`,
    },
  ];
}

export const HOST_ROLES = {
  /** On the Project Service account only: mint its short-lived tokens (impersonation). */
  impersonate: "roles/iam.serviceAccountTokenCreator",
  /** On the tenant-state key only: `gcpkms://` secrets of the tenant stacks. */
  stateKey: "roles/cloudkms.cryptoKeyEncrypterDecrypter",
  /** On the `sandboxes` repository only: pull sandbox images and snapshots. */
  registryReader: "roles/artifactregistry.reader",
} as const;

/** Arguments of {@link HostIdentity}. */
export interface HostIdentityArgs {
  readonly project: string;
  /** The bucket's name (known from config: the conditions are written with it). */
  readonly bucketName: string;
  /** The bucket resource's name output, so the grants wait for the bucket. */
  readonly bucket: pulumi.Input<string>;
  readonly stateKeyId: pulumi.Input<string>;
  readonly registry: { readonly location: pulumi.Input<string>; readonly repositoryId: pulumi.Input<string> };
  /** The Project Service account's resource name (`projects/<p>/serviceAccounts/<email>`). */
  readonly projectServiceAccount: pulumi.Input<string>;
}

/**
 * The host VM's own service account, least privileged: no project-level role at all. Everything the
 * runtime does to tenants' cloud resources it does as the Project Service account, by impersonation.
 */
export class HostIdentity extends pulumi.ComponentResource {
  public readonly email: pulumi.Output<string>;

  constructor(name: string, args: HostIdentityArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:gcp:HostIdentity", name, {}, opts);
    const account = new gcp.serviceaccount.Account(
      `${name}-sa`,
      {
        project: args.project,
        accountId: HOST_SERVICE_ACCOUNT_ID,
        displayName: "Agent Platform - host VM",
        description:
          "The sandbox host VM: tenant stack state, releases, image pulls; impersonates the Project Service",
      },
      { parent: this },
    );
    const member = pulumi.interpolate`serviceAccount:${account.email}`;
    new gcp.serviceaccount.IAMMember(
      `${name}-impersonate`,
      { serviceAccountId: args.projectServiceAccount, role: HOST_ROLES.impersonate, member },
      { parent: this },
    );
    new gcp.kms.CryptoKeyIAMMember(
      `${name}-state-key`,
      { cryptoKeyId: args.stateKeyId, role: HOST_ROLES.stateKey, member },
      { parent: this },
    );
    new gcp.artifactregistry.RepositoryIamMember(
      `${name}-registry-reader`,
      {
        project: args.project,
        location: args.registry.location,
        repository: args.registry.repositoryId,
        role: HOST_ROLES.registryReader,
        member,
      },
      { parent: this },
    );
    hostBucketGrants(args.bucketName).forEach(
      (grant, index) =>
        new gcp.storage.BucketIAMMember(
          `${name}-bucket-${index}`,
          {
            bucket: args.bucket,
            role: grant.role,
            member,
            condition: { title: grant.title, description: grant.description, expression: grant.expression },
          },
          { parent: this },
        ),
    );
    this.email = account.email;
    this.registerOutputs({ email: this.email });
  }
}
