import { connect } from "node:net";

/** Resolves when something accepts TCP connections on host:port; rejects after `timeoutMs`. */
export function tcpReachable(host: string, port: number, timeoutMs = 1_000): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port });
    const fail = (why: string) => {
      socket.destroy();
      reject(new Error(`nothing accepts connections on ${host}:${port} (${why})`));
    };
    socket.setTimeout(timeoutMs, () => fail("timed out"));
    socket.once("error", (error) => fail(error.message));
    socket.once("connect", () => {
      socket.end();
      resolve();
    });
  });
}
