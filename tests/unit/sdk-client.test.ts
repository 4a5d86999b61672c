// The SDK's Client as a browser runs it: window.fetch refuses a `this` other than the window.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Client } from "../../sdk/src/index.js";

let server: Server;
let api: string;

beforeAll(async () => {
  server = createServer((request, response) => {
    response.setHeader("content-type", "application/json");
    response.end(
      JSON.stringify({ accessToken: "a", refreshToken: "r", expiresIn: 900, tokenType: "Bearer" }),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  api = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

describe("the SDK's Client", () => {
  it("calls the global fetch unbound, as a browser's window.fetch requires", async () => {
    const realFetch = globalThis.fetch;
    // What Chromium's fetch does when called as a method of another object.
    globalThis.fetch = function (this: unknown, ...args: Parameters<typeof fetch>) {
      if (this !== undefined && this !== globalThis)
        throw new TypeError("Failed to execute 'fetch' on 'Window': Illegal invocation");
      return realFetch(...args);
    } as typeof fetch;
    try {
      const client = new Client({ api });
      await expect(client.login("a@example.test", "correct horse battery staple")).resolves.toMatchObject({
        accessToken: "a",
      });
    } finally {
      globalThis.fetch = realFetch;
    }
  });
});
