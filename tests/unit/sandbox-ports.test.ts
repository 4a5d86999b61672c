// The ports listening in a sandbox, from `ss -H -l -n -t -u` (issue 23).
import { describe, expect, it } from "vitest";
import { parseListening } from "../../runtime/sandbox/ports.js";

describe("parseListening", () => {
  it("reads TCP and UDP sockets, v4 and v6, without brackets or interfaces, by port", () => {
    const output = [
      "tcp   LISTEN 0      4096         0.0.0.0:8080       0.0.0.0:*",
      "tcp   LISTEN 0      4096            [::]:8080          [::]:*",
      "tcp   LISTEN 0      5         127.0.0.1:3000       0.0.0.0:*",
      "udp   UNCONN 0      0      127.0.0.11%lo:53         0.0.0.0:*",
      "",
      "garbage",
    ].join("\n");
    expect(parseListening(output)).toEqual([
      { port: 53, address: "127.0.0.11", protocol: "udp" },
      { port: 3000, address: "127.0.0.1", protocol: "tcp" },
      { port: 8080, address: "0.0.0.0", protocol: "tcp" },
      { port: 8080, address: "::", protocol: "tcp" },
    ]);
  });

  it("nothing listening is an empty list", () => {
    expect(parseListening("")).toEqual([]);
  });
});
