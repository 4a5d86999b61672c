import type * as pulumi from "@pulumi/pulumi";

/**
 * What `pulumi up` of the platform stack prints, on either target (stack outputs of stacks/platform/index.ts).
 * The runtime and the README read these names; do not rename them.
 */
export interface PlatformOutputs {
  /** Base URL of the REST API, e.g. `https://sandboxes.example.com` (gcp), `http://127.0.0.1:8000` (local). */
  readonly apiUrl: pulumi.Input<string>;
  /** Base of every project's `terminal_url`, e.g. `wss://sandboxes.example.com/terminal`. */
  readonly terminalUrlBase: pulumi.Input<string>;
  /** The GCP host's static address: point `gcp.domain` and `*.<domain>` at it (A records). */
  readonly hostAddress?: pulumi.Input<string>;
  /** Where sandbox images and snapshots are pushed (`<region>-docker.pkg.dev/<p>/sandboxes`, `127.0.0.1:5000`). */
  readonly registry: pulumi.Input<string>;
  /** The bucket holding tenant data and tenant stack state (gcp); the local backup remote's directory (local). */
  readonly bucket: pulumi.Input<string>;
  /** The tenant stacks' Pulumi state backend (`gs://<bucket>/state`, `file:///var/lib/agent-sandbox/state`). */
  readonly stateBackendUrl: pulumi.Input<string>;
}
