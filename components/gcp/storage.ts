import * as gcp from "@pulumi/gcp";
import * as pulumi from "@pulumi/pulumi";
import { GCP } from "../../lib/constants.js";

/** Days a deleted or overwritten object (a deleted project's data, a bad sync's victim) is kept. */
export const DELETED_DATA_RETENTION_DAYS = 30;
/** Soft delete on top of versioning: even a purged version can be restored for this long. */
export const SOFT_DELETE_SECONDS = 7 * 24 * 3600;

/** Arguments of {@link PlatformBucket}. */
export interface PlatformBucketArgs {
  readonly project: string;
  readonly name: string;
  readonly location: string;
  readonly labels: Record<string, string>;
  /** Days before noncurrent versions are deleted (default DELETED_DATA_RETENTION_DAYS, 30). */
  readonly deletedDataRetentionDays?: number;
}

export function validatePlatformBucketArgs(args: PlatformBucketArgs): string[] {
  const days = args.deletedDataRetentionDays ?? DELETED_DATA_RETENTION_DAYS;
  return Number.isInteger(days) && days >= 1
    ? []
    : [`deletedDataRetentionDays: ${days} must be a whole number ≥ 1`];
}

/**
 * The lifecycle rules. The seed's rule is `Delete if age > 30` on the whole bucket "to clean deleted
 * project data", but age counts from an object's creation: on its own it would delete every live backup
 * and every tenant stack's state after 30 days. With versioning on, deleting a project's data (or a sync
 * overwriting a file) makes the old objects noncurrent, and they are deleted 30 days after that instead.
 */
export function bucketLifecycleRules(days: number = DELETED_DATA_RETENTION_DAYS) {
  return [
    {
      action: { type: "Delete" },
      condition: { daysSinceNoncurrentTime: days, withState: "ARCHIVED" },
    },
    // Half-finished uploads (an rclone or state write cut off) are never read; clean them after a day.
    { action: { type: "AbortIncompleteMultipartUpload" }, condition: { age: 1 } },
  ];
}

/**
 * The platform bucket: tenant data under `projects/<id>/`, the tenant stacks' Pulumi state under `state/`,
 * runtime releases under `releases/`. Never public (uniform access + public access prevention enforced),
 * versioned so a bad sync can be undone, protected against `pulumi destroy`.
 */
export class PlatformBucket extends pulumi.ComponentResource {
  public readonly bucketName: pulumi.Output<string>;
  public readonly url: pulumi.Output<string>;
  /** `gs://<bucket>/state`: the tenant stacks' backend. */
  public readonly stateBackendUrl: pulumi.Output<string>;
  public readonly bucket: gcp.storage.Bucket;

  constructor(name: string, args: PlatformBucketArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:gcp:PlatformBucket", name, {}, opts);
    const problems = validatePlatformBucketArgs(args);
    if (problems.length > 0) throw new pulumi.ResourceError(problems.join("; "), this);
    this.bucket = new gcp.storage.Bucket(
      `${name}-bucket`,
      {
        project: args.project,
        name: args.name,
        location: args.location,
        labels: args.labels,
        uniformBucketLevelAccess: true,
        publicAccessPrevention: "enforced",
        versioning: { enabled: true },
        softDeletePolicy: { retentionDurationSeconds: SOFT_DELETE_SECONDS },
        lifecycleRules: bucketLifecycleRules(args.deletedDataRetentionDays),
        forceDestroy: false,
      },
      // Tenant data and every tenant's state: never removed by a destroy of the platform stack.
      { parent: this, protect: true },
    );
    this.bucketName = this.bucket.name;
    this.url = this.bucket.url;
    this.stateBackendUrl = pulumi.interpolate`gs://${this.bucket.name}/${GCP.statePrefix.replace(/\/$/, "")}`;
    this.registerOutputs({
      bucketName: this.bucketName,
      url: this.url,
      stateBackendUrl: this.stateBackendUrl,
    });
  }
}
