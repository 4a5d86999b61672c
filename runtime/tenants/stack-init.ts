import { createHash, randomBytes } from "node:crypto";
import { promises as fs } from "node:fs";
import * as path from "node:path";
import { writeFileAtomic } from "../../lib/files.js";
import { fileBackendDir, fileStateLayout } from "../stack-state.js";
import { sealWithStackKey, STACK_KEY_NAME, STACK_KEY_PROVIDER, stackKey } from "./stack-keys.js";

/**
 * A new tenant stack made as `pulumi stack init --secrets-provider hashivault://agent-sandbox-tenants` makes it
 * in a `file://` backend, without running the CLI: every create ran one more CLI process for it (0.08 s of
 * CPU and 0.1 s of wall here, and a fork of the runtime), to write two small files this writes directly
 * (docs/tenant-stacks.md, "A stack made without the CLI"):
 *
 * - the stack's config, `Pulumi.<stack>.yaml` in its work directory: the secrets provider's URL and the
 *   stack's data key (32 random bytes) sealed by the key service's key, base64 as the CLI keeps it;
 * - its checkpoint, `<stack>.json` in the backend's project directory: no resources, a manifest (the time,
 *   the CLI's version and the magic the engine checks, sha256 of that version) and the same secrets
 *   provider state, with the `.attrs` beside it that the CLI's blob store writes.
 *
 * Only where the CLI has laid out the backend already (`.pulumi/meta.yaml` of version 1, which its first
 * stack writes) and the stack's secrets are the key service's; anything else (the first stack of a backend,
 * a passphrase or `gcpkms://` stack, a `gs://` backend) is made by the CLI as before. The config is written
 * first and the checkpoint, the stack's existence, last, each to a temporary file renamed into place: a
 * create killed between them leaves no stack and is made again whole. The caller holds the project's lease,
 * as for every operation of its stack.
 */
export async function initTenantStackFiles(options: {
  readonly backendUrl: string;
  readonly project: string;
  readonly stack: string;
  readonly workDir: string;
  readonly passphrase: string;
  /** The CLI's version (`LocalWorkspace.pulumiVersion`), which its manifest records. */
  readonly cliVersion: string;
}): Promise<boolean> {
  const dir = fileBackendDir(options.backendUrl);
  if (dir === undefined || !(await laidOut(dir))) return false;
  const layout = fileStateLayout(dir, options.project, options.stack);
  const key = await stackKey(options.passphrase, STACK_KEY_NAME);
  const encryptedKey = Buffer.from(sealWithStackKey(key, STACK_KEY_NAME, randomBytes(32))).toString("base64");
  await writeFileAtomic(
    path.join(options.workDir, `Pulumi.${options.stack}.yaml`),
    `secretsprovider: ${STACK_KEY_PROVIDER}\nencryptedkey: ${encryptedKey}\n`,
    "0600",
  );
  const version = options.cliVersion.startsWith("v") ? options.cliVersion : `v${options.cliVersion}`;
  const checkpoint = JSON.stringify({
    version: 3,
    checkpoint: {
      stack: `organization/${options.project}/${options.stack}`,
      latest: {
        manifest: {
          time: new Date().toISOString(),
          magic: createHash("sha256").update(version).digest("hex"),
          version,
        },
        secrets_providers: { type: "cloud", state: { url: STACK_KEY_PROVIDER, encryptedkey: encryptedKey } },
        metadata: {},
      },
    },
  });
  await writeFileAtomic(`${layout.checkpoint}.attrs`, blobAttributes(checkpoint), "0600");
  await writeFileAtomic(layout.checkpoint, checkpoint, "0600");
  return true;
}

const laidOutDirs = new Set<string>();

/** Whether the CLI has laid out the backend in `dir` by projects (`.pulumi/meta.yaml`, `version: 1`). */
async function laidOut(dir: string): Promise<boolean> {
  if (laidOutDirs.has(dir)) return true;
  const meta = await fs.readFile(path.join(dir, ".pulumi", "meta.yaml"), "utf8").catch(() => "");
  if (!/^version: 1$/m.test(meta)) return false;
  laidOutDirs.add(dir);
  return true;
}

/** The sidecar gocloud.dev's file blob store keeps beside each object (`<file>.attrs`): its type and MD5. */
function blobAttributes(content: string): string {
  return JSON.stringify({
    "user.cache_control": "",
    "user.content_disposition": "",
    "user.content_encoding": "",
    "user.content_language": "",
    "user.content_type": "text/plain; charset=utf-8",
    "user.metadata": null,
    md5: createHash("md5").update(content).digest("base64"),
  });
}
