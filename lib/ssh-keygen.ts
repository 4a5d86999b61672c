import { createHash, generateKeyPairSync, randomBytes } from "node:crypto";

export interface SshKeyPairFiles {
  readonly publicKey: string;
  readonly privateKey: string;
  readonly fingerprint: string;
}

/** An SSH wire-format string: a 32-bit big-endian length, then the bytes (RFC 4251 §5). */
function sshString(value: Buffer | string): Buffer {
  const bytes = typeof value === "string" ? Buffer.from(value, "utf8") : value;
  const length = Buffer.alloc(4);
  length.writeUInt32BE(bytes.length);
  return Buffer.concat([length, bytes]);
}

const uint32 = (value: number) => {
  const out = Buffer.alloc(4);
  out.writeUInt32BE(value);
  return out;
};

/**
 * A fresh ed25519 keypair in OpenSSH's formats (what `ssh-keygen -t ed25519 -N ''` writes: the public
 * line, the unencrypted `openssh-key-v1` private key, the SHA256 fingerprint), made in the process: no
 * ssh-keygen process and no key on disk, so a create (and a warm-pool claim) pays microseconds for it.
 * tests/unit/ssh-keygen.test.ts checks ssh-keygen reads it back.
 */
export async function generateSshKeyPair(comment: string): Promise<SshKeyPairFiles> {
  if (/[\r\n]/.test(comment)) throw new Error("an SSH key comment must be one line");
  const { publicKey, privateKey } = generateKeyPairSync("ed25519");
  const pub = Buffer.from(publicKey.export({ format: "jwk" }).x!, "base64url");
  const seed = Buffer.from(privateKey.export({ format: "jwk" }).d!, "base64url");
  const publicBlob = Buffer.concat([sshString("ssh-ed25519"), sshString(pub)]);
  // The private section: a repeated check word, the key (seed then public half), the comment, then
  // padding 1, 2, 3... to the cipher's block size (8 for "none").
  const check = randomBytes(4).readUInt32BE();
  let section = Buffer.concat([
    uint32(check),
    uint32(check),
    sshString("ssh-ed25519"),
    sshString(pub),
    sshString(Buffer.concat([seed, pub])),
    sshString(comment),
  ]);
  const padding = (8 - (section.length % 8)) % 8;
  section = Buffer.concat([section, Buffer.from(Array.from({ length: padding }, (_, i) => i + 1))]);
  const body = Buffer.concat([
    Buffer.from("openssh-key-v1\0", "latin1"),
    sshString("none"),
    sshString("none"),
    sshString(""),
    uint32(1),
    sshString(publicBlob),
    sshString(section),
  ]);
  const base64 = body.toString("base64");
  const lines = base64.match(/.{1,70}/g) ?? [];
  return {
    publicKey: `ssh-ed25519 ${publicBlob.toString("base64")} ${comment}`.trim(),
    privateKey: `-----BEGIN OPENSSH PRIVATE KEY-----\n${lines.join("\n")}\n-----END OPENSSH PRIVATE KEY-----\n`,
    fingerprint: `SHA256:${createHash("sha256").update(publicBlob).digest("base64").replace(/=+$/, "")}`,
  };
}
