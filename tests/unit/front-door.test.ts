import { describe, expect, it } from "vitest";
import {
  frontDoorHost,
  frontDoorLabel,
  validateFrontDoorPorts,
  frontDoorRoutes,
  frontDoorUrl,
} from "../../lib/front-door.js";

describe("front-door ports and host names", () => {
  it("accepts declared ports with and without names", () => {
    expect(validateFrontDoorPorts([{ port: 3000 }, { port: 5173, name: "feature-x" }])).toEqual([
      { port: 3000 },
      { port: 5173, name: "feature-x" },
    ]);
  });

  it.each([
    [{ ports: "3000" }, /^ports: must be an array/],
    [[{ port: 80 }], /^ports\[0\]\.port: must be an integer from 1024 to 65535/],
    [[{ port: 3000 }, { port: 70000 }], /^ports\[1\]\.port/],
    [[{ port: 2222 }], /^ports\[0\]\.port: 2222 is the sandbox's SSH port/],
    [[{ port: 3000, name: "Bad_Name" }], /^ports\[0\]\.name: must be a DNS label/],
    [[{ port: 3000, name: "a;rm" }], /^ports\[0\]\.name/],
    [[{ port: 3000, host: "x" }], /^ports\[0\]\.host: unknown field/],
    [[{ port: 3000 }, { port: 3000 }], /^ports\[1\]: port 3000 is declared twice/],
    [Array.from({ length: 11 }, (_, i) => ({ port: 3000 + i })), /^ports: at most 10/],
  ])("refuses %j naming the field", (input, message) => {
    expect(() => validateFrontDoorPorts((input as { ports?: unknown }).ports ?? input)).toThrow(message);
  });

  it("gives the first port of a name the short host, and every port its p<port>- host", () => {
    const id = "0f3a9c2b-7d41-4e5f-8a9b-0c1d2e3f4a5b";
    expect(frontDoorRoutes(id, [{ port: 3000 }, { port: 3001 }, { port: 5173, name: "feat" }], 8080)).toEqual(
      [
        {
          port: 3000,
          hosts: ["0f3a9c2b7d41.sandbox.localhost", "p3000-0f3a9c2b7d41.sandbox.localhost"],
          url: "http://0f3a9c2b7d41.sandbox.localhost:8080/",
        },
        {
          port: 3001,
          hosts: ["p3001-0f3a9c2b7d41.sandbox.localhost"],
          url: "http://p3001-0f3a9c2b7d41.sandbox.localhost:8080/",
        },
        {
          port: 5173,
          name: "feat",
          hosts: ["0f3a9c2b7d41-feat.sandbox.localhost", "p5173-0f3a9c2b7d41-feat.sandbox.localhost"],
          url: "http://0f3a9c2b7d41-feat.sandbox.localhost:8080/",
        },
      ],
    );
  });

  it("on the GCP target's TLS front door the URLs are https://, without the port where it is 443", () => {
    const id = "0f3a9c2b-7d41-4e5f-8a9b-0c1d2e3f4a5b";
    expect(frontDoorRoutes(id, [{ port: 3000 }], 443, "sandboxes.example.com", true)[0]!.url).toBe(
      "https://0f3a9c2b7d41.sandboxes.example.com/",
    );
    expect(frontDoorRoutes(id, [{ port: 3000 }], 8443, "sandboxes.example.com", true)[0]!.url).toBe(
      "https://0f3a9c2b7d41.sandboxes.example.com:8443/",
    );
    expect(frontDoorUrl("h.sandbox.localhost", 80)).toBe("http://h.sandbox.localhost/");
    expect(frontDoorUrl("h.sandbox.localhost", 443)).toBe("http://h.sandbox.localhost:443/");
  });

  it("labels a project by the first 12 hex characters of its UUID", () => {
    const id = "0F3A9C2B-7D41-4e5f-8a9b-0c1d2e3f4a5b";
    expect(frontDoorLabel(id)).toBe("0f3a9c2b7d41");
    expect(frontDoorHost(id, undefined)).toBe("0f3a9c2b7d41.sandbox.localhost");
    expect(frontDoorHost(id, "feature")).toBe("0f3a9c2b7d41-feature.sandbox.localhost");
    expect(() => frontDoorLabel("../etc")).toThrow(/not a project id/);
  });
});
