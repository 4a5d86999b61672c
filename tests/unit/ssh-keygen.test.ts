// lib/ssh-keygen.ts makes OpenSSH keys in the process; ssh-keygen (the real one) must read them as its own:
// the public key it derives from the private one, and the fingerprint it prints, are ours.
import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { generateSshKeyPair } from "../../lib/ssh-keygen.js";

const run = promisify(execFile);
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), "keygen-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("generateSshKeyPair", () => {
  it("writes keys ssh-keygen reads as its own, for comments of every length (padding)", async () => {
    for (const comment of [
      "agent@p",
      "agent@0f3c2a1e-5d8b-4c39-9a51-7e0d2b6f4c18",
      "a",
      "",
      "x".repeat(13),
    ]) {
      const keys = await generateSshKeyPair(comment);
      const file = path.join(dir, "key");
      await writeFile(file, keys.privateKey, { mode: 0o600 });
      // ssh-keygen -y prints the key (and, in newer OpenSSH, the comment after it).
      const derived = (await run("ssh-keygen", ["-y", "-f", file])).stdout.trim().split(" ");
      const ours = keys.publicKey.split(" ");
      expect(ours.slice(0, 2)).toEqual(derived.slice(0, 2));
      expect(ours.slice(2).join(" ")).toBe(comment);
      await writeFile(`${file}.pub`, `${keys.publicKey}\n`);
      const listed = (await run("ssh-keygen", ["-l", "-f", `${file}.pub`])).stdout;
      expect(listed.split(" ")[1]).toBe(keys.fingerprint);
      // The comment is in the private key too, as ssh-keygen writes it.
      expect(
        (await run("ssh-keygen", ["-l", "-f", file])).stdout.trim().endsWith(`${comment} (ED25519)`),
      ).toBe(true);
    }
  });

  it("makes a new key each time, and refuses a comment of two lines", async () => {
    const [a, b] = await Promise.all([generateSshKeyPair("c"), generateSshKeyPair("c")]);
    expect(a.publicKey).not.toBe(b.publicKey);
    await expect(generateSshKeyPair("a\nb")).rejects.toThrow(/one line/);
  });
});
