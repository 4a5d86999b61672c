// sdk/src/openapi.ts is generated from the runtime's OpenAPI document (`npm run sdk:types`): a route
// whose schema changed without the file being regenerated fails here.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { SDK_TYPES_FILE, sdkTypes } from "../../scripts/sdk-types.js";

describe("the SDK's generated types", () => {
  it("sdk/src/openapi.ts is what `npm run sdk:types` generates now (run it when this fails)", async () => {
    const generated = await sdkTypes();
    expect(generated).toContain('"/projects/{id}/exec/stream": {');
    expect(readFileSync(SDK_TYPES_FILE, "utf8") === generated, "sdk/src/openapi.ts is stale").toBe(true);
  }, 60_000);
});
