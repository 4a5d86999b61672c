// The import direction (eslint.layers.js): every layer refuses an import from a layer above it, allows the
// ones below, and the tree as it stands has no import that goes back up; the same inside runtime/, between
// its folders.
import * as path from "node:path";
import { ESLint } from "eslint";
import tseslint from "typescript-eslint";
import { describe, expect, it } from "vitest";
import { LAYERS, layerRules, RUNTIME_FOUNDATIONS, RUNTIME_LAYERS } from "../../eslint.layers.js";

const root = path.resolve(import.meta.dirname, "../..");
// Only the layer rules, with the TypeScript parser and no type information: fast, and exactly the rule.
const eslint = new ESLint({
  cwd: root,
  overrideConfigFile: true,
  overrideConfig: [{ files: ["**/*.ts"], languageOptions: { parser: tseslint.parser } }, ...layerRules],
});

/** The layer-rule messages for a file at `file` (relative to the root) that imports `specifier`. */
async function violations(file: string, specifier: string): Promise<string[]> {
  const [result] = await eslint.lintText(
    `import { probe } from "${specifier}";\nexport const again = probe;\n`,
    {
      filePath: path.join(root, file),
    },
  );
  return result!.messages.filter((m) => m.ruleId === "no-restricted-imports").map((m) => m.message);
}

const ALL = [...new Set(LAYERS.flatMap(({ layer, forbidden }) => [layer, ...forbidden]))];

describe("imports go down the layers only", () => {
  for (const { layer, forbidden } of LAYERS) {
    it(`${layer}/ may not import ${forbidden.join(", ")}; may import the rest`, async () => {
      for (const folder of forbidden) {
        expect(await violations(`${layer}/probe.ts`, `../${folder}/x.js`), `${layer} → ${folder}`).toEqual([
          expect.stringContaining(`${layer}/ may not import ${folder}/, a layer above or beside it`),
        ]);
        expect(await violations(`${layer}/deep/probe.ts`, `../../${folder}/deep/x.js`)).toHaveLength(1);
      }
      for (const folder of ALL.filter((f) => !forbidden.includes(f) && f !== layer))
        expect(await violations(`${layer}/probe.ts`, `../${folder}/x.js`), `${layer} → ${folder}`).toEqual(
          [],
        );
      expect(await violations(`${layer}/deep/probe.ts`, "../sibling.js")).toEqual([]);
    });
  }

  const RUNTIME_ALL = [...new Set(RUNTIME_LAYERS.flatMap(({ layer }) => layer.slice("runtime/".length)))];
  for (const { layer, forbidden } of RUNTIME_LAYERS) {
    it(`${layer}/ may not import runtime's ${forbidden.join(", ") || "nothing"}; may import the rest`, async () => {
      for (const folder of forbidden) {
        expect(await violations(`${layer}/probe.ts`, `../${folder}/x.js`), `${layer} → ${folder}`).toEqual([
          expect.stringContaining(`${layer}/ may not import ${folder}/, a layer above or beside it`),
        ]);
        expect(await violations(`${layer}/deep/probe.ts`, `../../${folder}/x.js`)).toHaveLength(1);
      }
      const own = layer.slice("runtime/".length);
      for (const folder of RUNTIME_ALL.filter((f) => !forbidden.includes(f) && f !== own))
        expect(await violations(`${layer}/probe.ts`, `../${folder}/x.js`), `${layer} → ${folder}`).toEqual(
          [],
        );
      // runtime/'s foundations, and the layers below runtime/, are anyone's there.
      expect(await violations(`${layer}/probe.ts`, "../errors.js")).toEqual([]);
      expect(await violations(`${layer}/probe.ts`, "../../lib/host/squid.js")).toEqual([]);
    });
  }

  it("runtime/'s foundations import none of its folders but the store", async () => {
    for (const file of RUNTIME_FOUNDATIONS) {
      for (const folder of RUNTIME_ALL.filter((f) => f !== "store"))
        expect(await violations(`runtime/${file}.ts`, `./${folder}/x.js`), `${file} → ${folder}`).toEqual([
          expect.stringContaining(`runtime/'s foundations may not import ${folder}/`),
        ]);
      expect(await violations(`runtime/${file}.ts`, "./store/x.js"), `${file} → store`).toEqual([]);
    }
    expect(await violations("runtime/main.ts", "./api/x.js")).toEqual([]);
  });

  it("no file of the tree imports from a layer above its own", async () => {
    const results = await eslint.lintFiles(
      [...LAYERS, ...RUNTIME_LAYERS].map(({ layer }) => `${layer}/**/*.ts`),
    );
    const found = results.flatMap((r) =>
      r.messages
        .filter((m) => m.ruleId === "no-restricted-imports")
        .map((m) => `${path.relative(root, r.filePath)}:${m.line}: ${m.message}`),
    );
    expect(found).toEqual([]);
    expect(results.length).toBeGreaterThan(50);
    expect(results.filter((r) => r.filePath.includes("/runtime/")).length).toBeGreaterThan(50);
  });
});
