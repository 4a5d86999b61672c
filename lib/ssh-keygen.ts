import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";

const execFileAsync = promisify(execFile);

export interface SshKeyPairFiles {
  readonly publicKey: string;
  readonly privateKey: string;
  readonly fingerprint: string;
}

/** A fresh ed25519 keypair in OpenSSH formats, made by ssh-keygen in a private temporary directory. */
export async function generateSshKeyPair(comment: string): Promise<SshKeyPairFiles> {
  const dir = await mkdtemp(path.join(os.tmpdir(), "sshkey-"));
  try {
    const file = path.join(dir, "key");
    await execFileAsync("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", file]);
    const [privateKey, publicKey] = await Promise.all([
      readFile(file, "utf8"),
      readFile(`${file}.pub`, "utf8"),
    ]);
    const { stdout } = await execFileAsync("ssh-keygen", ["-l", "-f", `${file}.pub`]);
    return { publicKey: publicKey.trim(), privateKey, fingerprint: stdout.split(" ")[1] ?? "" };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
