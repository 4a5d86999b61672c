import { describe, expect, it } from "vitest";
import { frontDoorHost, frontDoorLabel, validateFrontDoorPorts } from "../../lib/front-door.js";

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
    // One host per name: two unnamed ports (or two of one name) would share `<label>[-<name>]`.
    [[{ port: 3000 }, { port: 3001 }], /^ports\[1\]\.name: no name already routes to port 3000/],
    [
      [
        { port: 3000, name: "web" },
        { port: 3001, name: "web" },
      ],
      /^ports\[1\]\.name: 'web' already routes/,
    ],
    [Array.from({ length: 11 }, (_, i) => ({ port: 3000 + i })), /^ports: at most 10/],
  ])("refuses %j naming the field", (input, message) => {
    expect(() => validateFrontDoorPorts((input as { ports?: unknown }).ports ?? input)).toThrow(message);
  });

  it("labels a project by the first 12 hex characters of its UUID", () => {
    const id = "0F3A9C2B-7D41-4e5f-8a9b-0c1d2e3f4a5b";
    expect(frontDoorLabel(id)).toBe("0f3a9c2b7d41");
    expect(frontDoorHost(id, undefined)).toBe("0f3a9c2b7d41.sandbox.localhost");
    expect(frontDoorHost(id, "feature")).toBe("0f3a9c2b7d41-feature.sandbox.localhost");
    expect(() => frontDoorLabel("../etc")).toThrow(/not a project id/);
  });
});
