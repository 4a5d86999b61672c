// Slow and greedy clients: the limits of `agent-sandbox:runtime.http`, applied to the API's
// Fastify server and to the terminal proxy's HTTP server in the same way.
import type { Server } from "node:http";
import type { Socket } from "node:net";
import type { RuntimeConfig } from "../stacks/config.js";

export type HttpLimits = RuntimeConfig["http"];

export const DEFAULT_HTTP_LIMITS: HttpLimits = {
  headersTimeoutSeconds: 20,
  requestTimeoutSeconds: 300,
  maxConnectionsPerAddress: 256,
};

/** A loopback peer address, IPv4, IPv6 or IPv4-mapped (also what server.ts calls a local request's peer). */
export const LOOPBACK = /^(127\.\d{1,3}\.\d{1,3}\.\d{1,3}|::1|::ffff:127\.\d{1,3}\.\d{1,3}\.\d{1,3})$/;

/**
 * Node's own clocks for the two timeouts: `headersTimeout` and `requestTimeout` on the server, checked
 * every second (Node's default check runs every 30 s, which would let a slow client stay that long).
 * A request that times out is answered 408 and its connection closed.
 */
export function nodeServerOptions(limits: HttpLimits): {
  headersTimeout: number;
  requestTimeout: number;
  connectionsCheckingInterval: number;
} {
  return {
    headersTimeout: limits.headersTimeoutSeconds * 1000,
    requestTimeout: limits.requestTimeoutSeconds * 1000,
    connectionsCheckingInterval: 1000,
  };
}

/**
 * At most `limits.maxConnectionsPerAddress` open connections per peer address on `server`; one more is
 * closed at once (before any byte is read). Loopback peers are not counted.
 */
export function capConnectionsPerAddress(
  server: Server,
  limits: HttpLimits,
  onRefused?: (address: string, open: number) => void,
): void {
  const open = new Map<string, number>();
  server.on("connection", (socket: Socket) => {
    const address = socket.remoteAddress ?? "";
    if (LOOPBACK.test(address)) return;
    const count = open.get(address) ?? 0;
    if (count >= limits.maxConnectionsPerAddress) {
      onRefused?.(address, count);
      socket.destroy();
      return;
    }
    open.set(address, count + 1);
    socket.once("close", () => {
      const left = (open.get(address) ?? 1) - 1;
      if (left > 0) open.set(address, left);
      else open.delete(address);
    });
  });
}
