import * as gcp from "@pulumi/gcp";
import * as pulumi from "@pulumi/pulumi";
import { existsSync, statSync } from "node:fs";
import * as path from "node:path";
import { GCP } from "../../lib/constants.js";
import { contentDigest } from "./content-digest.js";

/** What the host VM needs of the checkout to run the runtime and its toolchain (`npm run setup`). */
export const RELEASE_ENTRIES = [
  "package.json",
  "package-lock.json",
  "tsconfig.json",
  "Pulumi.yaml",
  "bin",
  "components",
  "host-config",
  "lib",
  "provider",
  "runtime",
  "sandbox-image",
  "scripts",
  "stacks",
  // The web console's sources: `npm run setup` builds dist/web, which the runtime serves; it calls the API
  // through the SDK's client (sdk/src/client.ts).
  "sdk",
  "web",
  // The MCP server's tools, which the runtime serves on /mcp.
  "mcp",
] as const;

/** Arguments of {@link RuntimeRelease}. */
export interface RuntimeReleaseArgs {
  /** The checkout to package. */
  readonly root: string;
  readonly bucket: pulumi.Input<string>;
  readonly entries?: readonly string[];
}

export function validateRuntimeReleaseArgs(args: RuntimeReleaseArgs): string[] {
  return (args.entries ?? RELEASE_ENTRIES)
    .filter((entry) => !existsSync(path.join(args.root, entry)))
    .map((entry) => `root: ${args.root} has no ${entry}`);
}

/**
 * The runtime's source, uploaded to `releases/agent-sandbox-<digest>.zip` of the bucket; the VM's startup
 * script fetches it. Named by content: a new release is a new object (and a new startup script).
 */
export class RuntimeRelease extends pulumi.ComponentResource {
  public readonly digest: string;
  public readonly objectName: string;
  public readonly mediaLink: pulumi.Output<string>;

  constructor(name: string, args: RuntimeReleaseArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:gcp:RuntimeRelease", name, {}, opts);
    const problems = validateRuntimeReleaseArgs(args);
    if (problems.length > 0) throw new pulumi.ResourceError(problems.join("; "), this);
    const entries = args.entries ?? RELEASE_ENTRIES;
    this.digest = contentDigest(args.root, entries);
    this.objectName = `${GCP.releasesPrefix}agent-sandbox-${this.digest}.zip`;
    const assets: Record<string, pulumi.asset.Asset | pulumi.asset.Archive> = {};
    for (const entry of entries) {
      const absolute = path.join(args.root, entry);
      assets[entry] = statSync(absolute).isDirectory()
        ? new pulumi.asset.FileArchive(absolute)
        : new pulumi.asset.FileAsset(absolute);
    }
    const object = new gcp.storage.BucketObject(
      `${name}-object`,
      {
        bucket: args.bucket,
        name: this.objectName,
        source: new pulumi.asset.AssetArchive(assets),
        contentType: "application/zip",
      },
      { parent: this },
    );
    this.mediaLink = object.mediaLink;
    this.registerOutputs({ mediaLink: this.mediaLink });
  }
}
