// A loopback TCP relay a test can cut and restore: a server gone as its clients see it (every connection
// through the relay reset, new ones refused) while the server itself runs on, as when the network to a
// cluster's API server goes away and comes back.
import { connect, createServer, type Socket } from "node:net";
import { freePort } from "./ports.js";

export interface TcpRelay {
  /** `127.0.0.1:<port>` relays to the target. */
  readonly port: number;
  /** Resets every connection through the relay and stops listening: connects are refused until `restore`. */
  cut(): Promise<void>;
  /** Listens again on the same port (one of the tests' own, which nothing else takes meanwhile). */
  restore(): Promise<void>;
  close(): Promise<void>;
}

export async function tcpRelay(target: { readonly host: string; readonly port: number }): Promise<TcpRelay> {
  const sockets = new Set<Socket>();
  const keep = (socket: Socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => undefined); // the other side's close ends it
  };
  const server = createServer((client) => {
    const upstream = connect(target.port, target.host);
    keep(client);
    keep(upstream);
    client.pipe(upstream);
    upstream.pipe(client);
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  });
  const port = await freePort();
  const listen = () =>
    new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, "127.0.0.1", () => {
        server.off("error", reject);
        resolve();
      });
    });
  await listen();
  let listening = true;
  const cut = async () => {
    if (!listening) return;
    listening = false;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    for (const socket of sockets) socket.resetAndDestroy();
    await closed;
  };
  return {
    port,
    cut,
    async restore() {
      if (listening) return;
      await listen();
      listening = true;
    },
    close: cut,
  };
}
