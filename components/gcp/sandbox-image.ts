import * as docker from "@pulumi/docker";
import * as gcp from "@pulumi/gcp";
import * as pulumi from "@pulumi/pulumi";
import { existsSync, readFileSync } from "node:fs";
import * as path from "node:path";
import { contentDigest } from "./content-digest.js";

/** The image's name in the repository: `<registry path>/sandbox:<content digest>`. */
export const SANDBOX_IMAGE_NAME = "sandbox";

/** Arguments of {@link SandboxImage}. */
export interface SandboxImageArgs {
  /** A build context holding the sandbox Dockerfile (sandbox-image/ with its vendor/ staged). */
  readonly context: string;
  /** The repository path, `<location>-docker.pkg.dev/<project>/sandboxes`. */
  readonly repositoryPath: pulumi.Input<string>;
  /** `BASE_IMAGE` build argument (the seed's ubuntu:24.04 in production). */
  readonly baseImage: string;
  readonly platform?: string;
}

/** Local sources of the Dockerfile's COPY instructions (not `--from=` stages). */
export function dockerfileCopySources(dockerfile: string): string[] {
  return dockerfile
    .split("\n")
    .filter((line) => /^COPY\s/i.test(line) && !/--from=/.test(line))
    .flatMap((line) => {
      const words = line
        .trim()
        .split(/\s+/)
        .slice(1)
        .filter((word) => !word.startsWith("--"));
      return words.slice(0, -1);
    });
}

export function validateSandboxImageArgs(args: SandboxImageArgs): string[] {
  const dockerfile = path.join(args.context, "Dockerfile");
  if (!existsSync(dockerfile)) return [`context: ${args.context} has no Dockerfile`];
  const missing = dockerfileCopySources(readFileSync(dockerfile, "utf8")).filter(
    (source) => !existsSync(path.join(args.context, source)),
  );
  return missing.length === 0
    ? []
    : [
        `context: ${args.context} lacks ${missing.join(", ")} that the Dockerfile copies ` +
          "(stage vendor/ as sandbox-image/build.ts does: Node.js and npm, the build host's extra CA certificates, " +
          "git-delta where the base has no package of it, else an empty vendor/git-delta/)",
      ];
}

/** The content tag: every file of the context and the build arguments. */
export function sandboxImageTag(args: Pick<SandboxImageArgs, "context" | "baseImage" | "platform">): string {
  return contentDigest(
    args.context,
    ["."],
    JSON.stringify({ base: args.baseImage, platform: args.platform }),
  );
}

/**
 * The sandbox image, built from the one sandbox Dockerfile and pushed to Artifact Registry, tagged by
 * content: an unchanged context is neither rebuilt nor pushed, and a tenant pinned to a tag keeps it.
 */
export class SandboxImage extends pulumi.ComponentResource {
  /** `<registry path>/sandbox:<digest>` as pushed. */
  public readonly imageName: pulumi.Output<string>;
  /** The registry's digest of what was pushed (`<name>@sha256:...`). */
  public readonly repoDigest: pulumi.Output<string>;
  public readonly tag: string;

  constructor(name: string, args: SandboxImageArgs, opts?: pulumi.ComponentResourceOptions) {
    super("sandbox:gcp:SandboxImage", name, {}, opts);
    const problems = validateSandboxImageArgs(args);
    if (problems.length > 0) throw new pulumi.ResourceError(problems.join("; "), this);
    this.tag = sandboxImageTag(args);
    const registryHost = pulumi.output(args.repositoryPath).apply((p) => p.split("/")[0]!);
    // A short-lived token of whoever runs `pulumi up` (gcloud auth application-default login).
    const client = gcp.organizations.getClientConfigOutput({ parent: this });
    const image = new docker.Image(
      `${name}-image`,
      {
        imageName: pulumi.interpolate`${args.repositoryPath}/${SANDBOX_IMAGE_NAME}:${this.tag}`,
        build: {
          context: args.context,
          dockerfile: path.join(args.context, "Dockerfile"),
          platform: args.platform ?? "linux/amd64",
          args: { BASE_IMAGE: args.baseImage, IMAGE_VERSION: this.tag },
        },
        registry: {
          server: registryHost,
          username: "oauth2accesstoken",
          password: pulumi.secret(client.accessToken),
        },
      },
      { parent: this },
    );
    this.imageName = image.imageName;
    this.repoDigest = image.repoDigest;
    this.registerOutputs({ imageName: this.imageName, repoDigest: this.repoDigest });
  }
}
