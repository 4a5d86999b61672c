// What `sbx start` makes of a devcontainer.json (US5) and of the names it passes to a shell: honoured keys,
// the unsupported ones listed (never silently ignored), and refusals that name the file and the key.
import * as fs from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readDevContainer, renderEnvFile, stripJsonc } from "../../cli/devcontainer.js";
import { EXIT } from "../../cli/errors.js";
import { checkWorktreeName } from "../../cli/repo.js";
import { refusal } from "../helpers/refusal.js";

let root: string;
let n = 0;
beforeAll(async () => {
  root = await fs.mkdtemp(path.join(os.tmpdir(), "sbx-devcontainer-"));
});
afterAll(async () => {
  await fs.rm(root, { recursive: true, force: true });
});

/** A repository directory with `files`; returns its path. */
async function repoWith(files: Record<string, string>): Promise<string> {
  const dir = path.join(root, `repo-${n++}`);
  for (const [file, content] of Object.entries(files)) {
    await fs.mkdir(path.dirname(path.join(dir, file)), { recursive: true });
    await fs.writeFile(path.join(dir, file), content);
  }
  return dir;
}

describe("stripJsonc", () => {
  it("drops comments and trailing commas, and leaves strings as they are", () => {
    const text = `{
  // a comment, }
  "a": "x // not a comment, }", /* block */
  "b": [1, 2,],
  "c": "quote \\" and , ]",
}`;
    expect(JSON.parse(stripJsonc(text))).toEqual({
      a: "x // not a comment, }",
      b: [1, 2],
      c: 'quote " and , ]',
    });
  });
});

describe("readDevContainer", () => {
  it("reads the honoured keys and lists every other one", async () => {
    const dir = await repoWith({
      ".devcontainer/devcontainer.json": `{
        "name": "app",
        "build": { "dockerfile": "Dockerfile", "target": "dev" },
        "forwardPorts": [3000, "db:5432"],
        "postCreateCommand": ["npm", "install", "it's"],
        "containerEnv": { "A": "1", "B": "\${localEnv:HOME}" },
        "remoteUser": "root",
        "mounts": [],
      }`,
      ".devcontainer/Dockerfile": "FROM x\n",
    });
    const dc = readDevContainer(dir)!;
    expect(dc.file).toBe(".devcontainer/devcontainer.json");
    expect(dc.build).toEqual({
      dockerfile: path.join(dir, ".devcontainer/Dockerfile"),
      context: path.join(dir, ".devcontainer"),
    });
    expect(dc.forwardPorts).toEqual([3000]);
    expect(dc.postCreateCommand).toBe("'npm' 'install' 'it'\\''s'");
    expect(dc.containerEnv).toEqual({ A: "1", B: "${localEnv:HOME}" });
    expect(dc.unsupported).toEqual(
      expect.arrayContaining([
        "mounts (not supported by sbx)",
        "build.target (not supported by sbx)",
        'forwardPorts entry "db:5432" (only port numbers of the sandbox itself)',
        "containerEnv.B's ${...} substitution (used as written)",
        'remoteUser "root" (the sandbox\'s shells run as agent)',
      ]),
    );
    expect(dc.unsupported).toHaveLength(5);
  });

  it("finds .devcontainer.json at the root too, and nothing when there is none", async () => {
    expect(readDevContainer(await repoWith({ "README.md": "" }))).toBeUndefined();
    const dc = readDevContainer(await repoWith({ ".devcontainer.json": '{ "image": "x/y:1" }' }))!;
    expect(dc).toMatchObject({ file: ".devcontainer.json", image: "x/y:1", unsupported: [] });
  });

  it.each([
    ['{ "image": "x", ', /^\.devcontainer\.json: does not parse: /],
    ["[1]", /is not a JSON object/],
    ['{ "image": "x", "build": { "dockerfile": "D" } }', /build\.dockerfile D does not exist/],
    ['{ "build": "Dockerfile" }', /build must be an object with a dockerfile/],
    ['{ "image": "" }', /image must be a non-empty string/],
    ['{ "forwardPorts": 3000 }', /forwardPorts must be an array/],
    ['{ "containerEnv": { "A-B": "1" } }', /containerEnv "A-B" must be a variable name with a string value/],
  ])("refuses %s naming what is wrong, before anything is made", async (content, why) => {
    const dir = await repoWith({ ".devcontainer.json": content });
    const error = refusal(() => readDevContainer(dir));
    expect(error.code).toBe(EXIT.badInput);
    expect(error.message).toMatch(why);
    expect(error.message).toMatch(/; nothing was created$/);
  });

  it("refuses image and build together", async () => {
    const dir = await repoWith({
      ".devcontainer.json": '{ "image": "x", "build": { "dockerfile": "Dockerfile" } }',
      Dockerfile: "FROM x\n",
    });
    expect(refusal(() => readDevContainer(dir)).message).toMatch(/has both image and build; use one/);
  });
});

describe("names that reach a shell", () => {
  it.each(["wt-a", "Feature_2", "a".repeat(63)])("takes the worktree name %s", (name) => {
    expect(checkWorktreeName(name)).toBe(name);
  });

  it.each(["x;touch /tmp/pwned", "$(id)", "-rf", ".hidden", "a b", "a/b", "x.lock", "a".repeat(64), ""])(
    "refuses the worktree name %j",
    (name) => {
      const error = refusal(() => checkWorktreeName(name));
      expect(error.code).toBe(EXIT.badInput);
      expect(error.message).toContain(`invalid worktree name ${JSON.stringify(name)}`);
    },
  );

  it("renders containerEnv so that a shell reads each value back as written", () => {
    expect(renderEnvFile({ A: "plain", B: "it's $(id) `x`" })).toBe("A='plain'\nB='it'\\''s $(id) `x`'\n");
  });
});
