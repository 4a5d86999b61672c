// `npm run image:build`'s command line: flags parsed, versions resolved before anything is built (the registry
// is the injected resolver here; tests/integration/sandbox-image.test.ts asks the real one and builds).
import { readFileSync } from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { REPO_ROOT } from "../../lib/toolchain.js";
import {
  dockerfileArgs,
  NPM_TOOLS,
  parseBuildArgs,
  resolveVersions,
  type VersionResolver,
} from "../../sandbox-image/build.js";

describe("image:build's flags", () => {
  it("defaults to the debootstrap base, no version overridden and no name but latest", () => {
    expect(parseBuildArgs([])).toEqual({ base: "local", tag: undefined, requested: {} });
  });

  it("maps each version flag to the Dockerfile ARG it overrides, as `--flag value` or `--flag=value`", () => {
    expect(
      parseBuildArgs([
        "--tag",
        "2026-12-04",
        "--claude-version",
        "latest",
        "--codex-version=0.170.0",
        "--gemini-version",
        "next",
        "--ast-grep-version",
        "0.51.0",
        "--base",
        "ubuntu:24.04",
      ]),
    ).toEqual({
      base: "ubuntu:24.04",
      tag: "2026-12-04",
      requested: {
        CLAUDE_CODE_VERSION: "latest",
        CODEX_VERSION: "0.170.0",
        GEMINI_CLI_VERSION: "next",
        AST_GREP_VERSION: "0.51.0",
      },
    });
  });

  it("overrides ARGs the Dockerfile declares, with the packages its RUN lines install", async () => {
    const args = await dockerfileArgs();
    const dockerfile = readFileSync(path.join(REPO_ROOT, "sandbox-image", "Dockerfile"), "utf8");
    for (const [arg, tool] of Object.entries(NPM_TOOLS)) {
      expect(args[arg], arg).toMatch(/^\d+\.\d+\.\d+$/);
      expect(dockerfile).toContain(`"${tool.pkg}@\${${arg}}"`);
      expect(dockerfile).toContain(`dev.agent-sandbox.versions.${tool.label}="\${${arg}}"`);
    }
  });

  it.each([
    [["--claude"], /unknown argument "--claude"/],
    [["--versions", "x"], /unknown argument "--versions"/],
    [["latest"], /unknown argument "latest"/],
    [["--codex-version"], /--codex-version needs a value/],
    [["--codex-version", "--tag", "x"], /--codex-version needs a value/],
    [["--tag="], /--tag needs a value/],
    [["--tag", "has space"], /--tag "has space" is not a valid image tag/],
    [["--tag", "-dash"], /not a valid image tag/],
    [["--gemini-version", "^0.61"], /--gemini-version "\^0\.61" is neither a version nor a dist-tag/],
    [["--claude-version", "1.0.0; rm -rf /"], /is neither a version nor a dist-tag/],
  ])("refuses %j", (argv, message) => {
    expect(() => parseBuildArgs(argv)).toThrow(message);
  });
});

describe("resolving the requested versions", () => {
  /** A registry of two packages: dist-tags and versions as npm's would answer them. */
  const asked: string[] = [];
  const registry: VersionResolver = async (pkg, spec) => {
    asked.push(`${pkg}@${spec}`);
    const known: Record<string, { tags: Record<string, string>; versions: string[] }> = {
      "@anthropic-ai/claude-code": {
        tags: { latest: "2.1.400", next: "2.2.0-beta.1" },
        versions: ["2.1.330", "2.1.400"],
      },
      "@openai/codex": { tags: { latest: "0.170.0" }, versions: ["0.169.0", "0.170.0"] },
    };
    const entry = known[pkg];
    const version = entry?.tags[spec] ?? (entry?.versions.includes(spec) ? spec : undefined);
    if (!version) throw new Error(`${pkg}@${spec} does not exist on npm`);
    return version;
  };

  it("turns a dist-tag into the version it names and keeps a version that exists", async () => {
    asked.length = 0;
    expect(
      await resolveVersions({ CLAUDE_CODE_VERSION: "latest", CODEX_VERSION: "0.169.0" }, registry),
    ).toEqual({ CLAUDE_CODE_VERSION: "2.1.400", CODEX_VERSION: "0.169.0" });
    expect(asked.sort()).toEqual(["@anthropic-ai/claude-code@latest", "@openai/codex@0.169.0"]);
  });

  it("asks nothing when no version flag is given", async () => {
    asked.length = 0;
    expect(await resolveVersions({}, registry)).toEqual({});
    expect(asked).toEqual([]);
  });

  it("fails naming every flag whose version does not exist, and the package", async () => {
    const failure = resolveVersions(
      { CLAUDE_CODE_VERSION: "9.9.9", CODEX_VERSION: "latest", GEMINI_CLI_VERSION: "0.61.0" },
      registry,
    );
    await expect(failure).rejects.toThrow(
      /--claude-version 9\.9\.9: @anthropic-ai\/claude-code@9\.9\.9 does not exist on npm/,
    );
    await expect(failure).rejects.toThrow(
      /--gemini-version 0\.61\.0: @google\/gemini-cli@0\.61\.0 does not exist/,
    );
    await expect(failure).rejects.not.toThrow(/--codex-version/);
  });
});
