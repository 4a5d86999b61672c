import * as gcp from "@pulumi/gcp";
import * as pulumi from "@pulumi/pulumi";

/**
 * Every API the platform calls, each enabled here rather than assumed to be on: IAM for tenant service
 * accounts, IAM Credentials for the runtime's impersonation of the Project Service account, Cloud KMS for the
 * tenant stacks' secrets, Compute for the host VM; Container only when the GKE cluster is enabled.
 */
export const PLATFORM_APIS = [
  "iam.googleapis.com",
  "iamcredentials.googleapis.com",
  "storage.googleapis.com",
  "artifactregistry.googleapis.com",
  "compute.googleapis.com",
  "cloudkms.googleapis.com",
] as const;

export const GKE_API = "container.googleapis.com";
/** Only with a budget (`gcp.budget`). */
export const BUDGET_API = "billingbudgets.googleapis.com";

/** Arguments of {@link ProjectServices}. */
export interface ProjectServicesArgs {
  readonly project: string;
  /** Also enable the Kubernetes Engine API. */
  readonly gke: boolean;
  /** Also enable the Cloud Billing Budget API. */
  readonly budget?: boolean;
}

/**
 * Enables the platform's APIs. Destroying the stack leaves them enabled (`disableOnDestroy: false`): other
 * workloads of the project may use them, and disabling an API deletes its resources.
 */
export class ProjectServices extends pulumi.ComponentResource {
  /** The enabled services, for `dependsOn` of everything that calls them. */
  public readonly services: gcp.projects.Service[];
  public readonly serviceNames: pulumi.Output<string[]>;

  constructor(name: string, args: ProjectServicesArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:gcp:ProjectServices", name, {}, opts);
    const apis = [...PLATFORM_APIS, ...(args.gke ? [GKE_API] : []), ...(args.budget ? [BUDGET_API] : [])];
    this.services = apis.map(
      (api) =>
        new gcp.projects.Service(
          `${name}-${api.split(".")[0]}`,
          { project: args.project, service: api, disableOnDestroy: false, disableDependentServices: false },
          { parent: this },
        ),
    );
    this.serviceNames = pulumi.all(this.services.map((service) => service.service));
    this.registerOutputs({ serviceNames: this.serviceNames });
  }
}
