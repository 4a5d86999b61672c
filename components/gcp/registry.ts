import * as gcp from "@pulumi/gcp";
import * as pulumi from "@pulumi/pulumi";
import { GCP } from "../../lib/constants.js";

/** Versions (snapshots) kept per image, i.e. per project: 5, the default of `tenants.snapshotsKept`. */
export const KEEP_VERSIONS = 5;
/** A version is never deleted before it is this old, so a push in progress is never raced. */
export const DELETE_GRACE = "3600s";

/** Arguments of {@link SandboxRegistry}. */
export interface SandboxRegistryArgs {
  readonly project: string;
  readonly location: string;
  readonly labels: Record<string, string>;
  readonly keepVersions?: number;
}

export function validateSandboxRegistryArgs(args: SandboxRegistryArgs): string[] {
  const keep = args.keepVersions ?? KEEP_VERSIONS;
  return Number.isInteger(keep) && keep >= 1 ? [] : [`keepVersions: ${keep} must be a whole number ≥ 1`];
}

/**
 * Cleanup policies: keep the most recent versions of every package (one package per project's snapshots,
 * plus the sandbox image), delete the rest. KEEP wins over DELETE in Artifact Registry.
 */
export function registryCleanupPolicies(keep: number = KEEP_VERSIONS) {
  return [
    { id: `keep-${keep}-most-recent`, action: "KEEP", mostRecentVersions: { keepCount: keep } },
    { id: "delete-the-rest", action: "DELETE", condition: { tagState: "ANY", olderThan: DELETE_GRACE } },
  ];
}

/** The Artifact Registry repository `sandboxes` (Docker format) of sandbox images and snapshots. */
export class SandboxRegistry extends pulumi.ComponentResource {
  public readonly repositoryId: pulumi.Output<string>;
  /** `<location>-docker.pkg.dev/<project>/sandboxes`: what `docker push` and the runtime use. */
  public readonly path: pulumi.Output<string>;
  public readonly repository: gcp.artifactregistry.Repository;

  constructor(name: string, args: SandboxRegistryArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:gcp:SandboxRegistry", name, {}, opts);
    const problems = validateSandboxRegistryArgs(args);
    if (problems.length > 0) throw new pulumi.ResourceError(problems.join("; "), this);
    this.repository = new gcp.artifactregistry.Repository(
      `${name}-repo`,
      {
        project: args.project,
        location: args.location,
        repositoryId: GCP.registryRepository,
        format: "DOCKER",
        description: "Sandbox images and container snapshots",
        labels: args.labels,
        cleanupPolicyDryRun: false,
        cleanupPolicies: registryCleanupPolicies(args.keepVersions),
      },
      { parent: this },
    );
    this.repositoryId = this.repository.repositoryId;
    this.path = pulumi.interpolate`${this.repository.location}-docker.pkg.dev/${this.repository.project}/${this.repository.repositoryId}`;
    this.registerOutputs({ repositoryId: this.repositoryId, path: this.path });
  }
}
