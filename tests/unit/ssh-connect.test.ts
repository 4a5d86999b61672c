// sshConnect (runtime/sandbox/ssh.ts) against a real SSH server on loopback (ssh2's) whose first connections
// hang before the handshake, as an emulated guest's sshd does on a loaded host: a slow handshake is tried
// again, not taken for a stopped sandbox; one that never finishes is a sandbox this runtime cannot reach,
// saying why; nothing listening is a stopped one.
import { generateKeyPairSync } from "node:crypto";
import { createServer, type Server as NetServer, type Socket } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { Server as SshServer } from "ssh2";
import { sshConnect } from "../../runtime/sandbox/ssh.js";
import { SandboxNotRunningError } from "../../runtime/sandbox/exec.js";

const key = () =>
  generateKeyPairSync("rsa", {
    modulusLength: 2048,
    privateKeyEncoding: { type: "pkcs1", format: "pem" },
    publicKeyEncoding: { type: "pkcs1", format: "pem" },
  }).privateKey;

const opened: { server: NetServer; sockets: Socket[] }[] = [];

/** An SSH server accepting any key, whose first `silent` connections never get a byte. */
async function sshd(silent: number): Promise<{ port: number; connections: () => number }> {
  const ssh = new SshServer({ hostKeys: [key()] }, (client) => {
    client.on("authentication", (context) => context.accept());
    client.on("error", () => undefined);
  });
  let count = 0;
  const sockets: Socket[] = [];
  const server = createServer((socket) => {
    sockets.push(socket);
    socket.on("error", () => undefined);
    if (++count > silent) ssh.injectSocket(socket);
  });
  opened.push({ server, sockets });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { port: (server.address() as { port: number }).port, connections: () => count };
}

afterEach(async () => {
  for (const { server, sockets } of opened.splice(0)) {
    for (const socket of sockets) socket.destroy();
    await new Promise((resolve) => server.close(resolve));
  }
});

describe("sshConnect to a slow sshd", () => {
  it("tries a handshake that timed out again, and logs in once the server answers", async () => {
    const server = await sshd(2);
    const client = await sshConnect(
      { host: "127.0.0.1", port: server.port, privateKey: key() },
      { timeoutMs: 500 },
    );
    client.end();
    expect(server.connections()).toBe(3);
  });

  it("a handshake that never finishes is a sandbox it cannot reach, saying why (not a stopped one)", async () => {
    const server = await sshd(Infinity);
    const error = await sshConnect(
      { host: "127.0.0.1", port: server.port, privateKey: key() },
      { timeoutMs: 300 },
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SandboxNotRunningError);
    expect((error as SandboxNotRunningError).reason).toBe(
      `its sshd at 127.0.0.1:${server.port} did not finish a handshake within 0.3 s, 3 times (busy)`,
    );
    expect(server.connections()).toBe(3);
  });

  it("nothing listening is a stopped sandbox, at once", async () => {
    const server = await sshd(0);
    const { port } = server;
    await new Promise((resolve) => opened.pop()!.server.close(resolve));
    const error = await sshConnect({ host: "127.0.0.1", port, privateKey: key() }, { timeoutMs: 300 }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(SandboxNotRunningError);
    expect((error as SandboxNotRunningError).reason).toBeUndefined();
  });
});
