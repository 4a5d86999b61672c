// What `sbx start` makes of a devcontainer.json (US5) and of the names it passes to a shell: honoured keys,
// the unsupported ones listed (never silently ignored), and refusals that name the file and the key.
import { execFileSync } from "node:child_process";
import * as fs from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { vscodeCommand, withSshConfigBlock } from "../../cli/commands/open-vscode.js";
import { sshConfigBlock } from "../../cli/ssh.js";
import {
  featureOptionEnvName,
  orderFeatures,
  readDevContainer,
  renderEnvFile,
  renderFeatureEnvFile,
  renderFeaturesDockerfile,
  renderRemoteEnvFile,
  stripJsonc,
} from "../../cli/devcontainer.js";
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

/** What bash makes of `file` when it sources it with `set -a`, given `env`: `names`' values, one a line. */
function sourced(file: string, names: string[], env: Record<string, string> = {}): string[] {
  return execFileSync(
    "bash",
    [
      "-c",
      `set -u; set -a; eval "$1"; set +a; for n in ${names.join(" ")}; do printf '%s\\n' "\${!n}"; done`,
      "-",
      file,
    ],
    { encoding: "utf8", env: { PATH: process.env.PATH, ...env } },
  )
    .split("\n")
    .slice(0, -1);
}

/** A local feature folder's files: devcontainer-feature.json from `meta`, and an install.sh. */
const feature = (dir: string, meta: object) => ({
  [`${dir}/devcontainer-feature.json`]: JSON.stringify(meta),
  [`${dir}/install.sh`]: "#!/bin/sh\nexit 0\n",
});

describe("features", () => {
  it("reads local features: options given or defaulted under their environment names, containerEnv, installsAfter order", async () => {
    const dir = await repoWith({
      ".devcontainer/devcontainer.json": JSON.stringify({
        features: {
          "./features/tools": { "install-jq": true },
          "./features/hello": { greeting: "it's me" },
        },
      }),
      ...feature(".devcontainer/features/hello", {
        id: "hello",
        version: "1.0.0",
        options: {
          greeting: { type: "string", default: "hi" },
          loud: { type: "boolean", default: false },
          "no-default": { type: "string" },
        },
        containerEnv: { HELLO_HOME: "/opt/hello", PATH: "/opt/hello/bin:${PATH}" },
      }),
      ...feature(".devcontainer/features/tools", {
        id: "tools",
        options: { "install-jq": { type: "boolean", default: false } },
        installsAfter: ["ghcr.io/example/features/hello:1"],
      }),
    });
    const dc = readDevContainer(dir)!;
    expect(dc.unsupported).toEqual([]);
    expect(dc.features.map((f) => [f.ref, f.id])).toEqual([
      ["./features/hello", "hello"],
      ["./features/tools", "tools"],
    ]);
    expect(dc.features[0]).toMatchObject({
      dir: path.join(dir, ".devcontainer/features/hello"),
      options: { GREETING: "it's me", LOUD: "false" },
      containerEnv: { HELLO_HOME: "/opt/hello", PATH: "/opt/hello/bin:${PATH}" },
    });
    expect(dc.features[1]!.options).toEqual({ INSTALL_JQ: "true" });
    // What install.sh sees: each option, and the users the spec names.
    expect(
      sourced(renderFeatureEnvFile(dc.features[0]!), [
        "GREETING",
        "LOUD",
        "_REMOTE_USER",
        "_REMOTE_USER_HOME",
      ]),
    ).toEqual(["it's me", "false", "agent", "/home/agent"]);
  });

  it.each([
    ["install-tools", "INSTALL_TOOLS"],
    ["version", "VERSION"],
    ["1st.option", "_ST_OPTION"],
    ["camelCase", "CAMELCASE"],
  ])("names option %s %s in install.sh's environment", (option, name) => {
    expect(featureOptionEnvName(option)).toBe(name);
  });

  it("orders by installsAfter among the features present, else as declared; a cycle keeps the declared order", () => {
    const f = (id: string, ...installsAfter: string[]) => ({ id, installsAfter });
    const ids = (list: ReturnType<typeof f>[]) => orderFeatures(list).map((x) => x.id);
    expect(ids([f("a", "b"), f("b", "c"), f("c")])).toEqual(["c", "b", "a"]);
    expect(ids([f("a", "not-here"), f("b")])).toEqual(["a", "b"]);
    expect(ids([f("a", "b"), f("b", "a")])).toEqual(["a", "b"]);
  });

  it.each([
    [
      '{ "ghcr.io/devcontainers/features/node:1": {} }',
      /feature "ghcr\.io\/devcontainers\/features\/node:1" is not a local feature: only local features .* are supported here/,
    ],
    [
      '{ "https://example.com/f.tgz": {} }',
      /feature "https:\/\/example\.com\/f\.tgz" is not a local feature/,
    ],
    ['{ "./features/missing": {} }', /feature "\.\/features\/missing" does not exist/],
    ['{ "./features/no-install": {} }', /feature "\.\/features\/no-install" has no install\.sh/],
    ['{ "./features/hello": { "colour": "red" } }', /feature "\.\/features\/hello" has no option "colour"/],
    ['{ "../../outside": {} }', /feature "\.\.\/\.\.\/outside" is outside the repository/],
    ['["./features/hello"]', /features must be an object/],
  ])("refuses features %s naming the feature, before anything is made", async (features, why) => {
    const dir = await repoWith({
      ".devcontainer/devcontainer.json": `{ "features": ${features} }`,
      ...feature(".devcontainer/features/hello", { id: "hello", options: {} }),
      ".devcontainer/features/no-install/devcontainer-feature.json": '{ "id": "no-install" }',
    });
    const error = refusal(() => readDevContainer(dir));
    expect(error.code).toBe(EXIT.badInput);
    expect(error.message).toMatch(why);
    expect(error.message).toMatch(/^\.devcontainer\/devcontainer\.json: .*; nothing was created$/);
  });

  it("renders the image's Dockerfile: each feature copied in and run as root with its env file, its containerEnv, then the base's user", async () => {
    const dir = await repoWith({
      ".devcontainer.json": '{ "features": { "./f/x y": {} } }',
      ...feature("f/x y", { id: "x y", containerEnv: { A: 'say "$HOME"' } }),
    });
    const [x] = readDevContainer(dir)!.features;
    const dockerfile = renderFeaturesDockerfile("base:1", "agent", [x!]);
    expect(dockerfile.split("\n")).toEqual([
      "FROM base:1",
      "USER root",
      "COPY 00-x-y /tmp/sbx-features/00-x-y",
      expect.stringMatching(
        /^RUN cd \/tmp\/sbx-features\/00-x-y && .*\. \.\/devcontainer-features\.env.*\.\/install\.sh \|\| \{ echo "sbx-feature-failed 0: /,
      ),
      'ENV A="say \\"$HOME\\""',
      `RUN env -i A="$A" sh -c 'export -p' | grep -E '^export (A)=' >/etc/profile.d/00-devcontainer-features.sh`,
      "USER agent",
      "",
    ]);
    expect(renderFeaturesDockerfile("base:1", "", [x!])).toMatch(/\nUSER root\n$/);
  });
});

describe("remoteEnv and postStartCommand", () => {
  it("substitutes ${localEnv:...} here and leaves ${containerEnv:...} to the agent's shell; everything else is literal", async () => {
    const dir = await repoWith({
      ".devcontainer.json": JSON.stringify({
        remoteEnv: {
          FROM_HOST: "${localEnv:SBX_UNIT_HOST_VAR}-x",
          DEFAULTED: "${localEnv:SBX_UNIT_UNSET:fallback}",
          INSIDE: "${containerEnv:HOME}/bin:${containerEnv:NOPE:none}:${containerEnv:UNSET}",
          LITERAL: 'a "$(id)" `x` \\ $HOME',
        },
      }),
    });
    const dc = readDevContainer(dir, { SBX_UNIT_HOST_VAR: "from-the-host" })!;
    expect(dc.remoteEnv).toMatchObject({ FROM_HOST: "from-the-host-x", DEFAULTED: "fallback" });
    expect(dc.unsupported).toEqual([]);
    expect(
      sourced(renderRemoteEnvFile(dc.remoteEnv), ["FROM_HOST", "DEFAULTED", "INSIDE", "LITERAL"], {
        HOME: "/home/agent",
      }),
    ).toEqual(["from-the-host-x", "fallback", "/home/agent/bin:none:", 'a "$(id)" `x` \\ $HOME']);
  });

  it("refuses a remoteEnv that is not variable names with string values", async () => {
    const dir = await repoWith({ ".devcontainer.json": '{ "remoteEnv": { "A": 1 } }' });
    expect(refusal(() => readDevContainer(dir)).message).toMatch(
      /remoteEnv "A" must be a variable name with a string value/,
    );
  });

  it.each([
    ['"echo started >> log"', "echo started >> log", []],
    ['["touch", "it\'s"]', "'touch' 'it'\\''s'", []],
    [
      '{ "a": "x", "b": "y" }',
      undefined,
      ["postStartCommand as an object (parallel commands are not supported)"],
    ],
  ])("reads postStartCommand %s", async (value, command, unsupported) => {
    const dc = readDevContainer(
      await repoWith({ ".devcontainer.json": `{ "postStartCommand": ${value} }` }),
    )!;
    expect(dc.postStartCommand).toBe(command);
    expect(dc.unsupported).toEqual(unsupported);
  });
});

describe("open-vscode", () => {
  const target = {
    host: "127.0.0.1",
    port: 2222,
    user: "agent",
    keyFile: "/c/keys/p",
    knownHostsFile: "/c/keys/p.known_hosts",
    hostKeyAlias: "sbx-p",
  };

  it("opens the folder through the ssh alias", () => {
    expect(vscodeCommand("sbx-app", "/workspace/app/.worktrees/feat__x")).toEqual([
      "code",
      "--remote",
      "ssh-remote+sbx-app",
      "/workspace/app/.worktrees/feat__x",
    ]);
  });

  it("puts the ssh-config block first in ~/.ssh/config, and replaces only its own on the next run", () => {
    const mine = "Host other\n  HostName example.com\n";
    const first = withSshConfigBlock(mine, "sbx-app", sshConfigBlock("sbx-app", target));
    expect(first.startsWith("# >>> sbx sbx-app")).toBe(true);
    expect(first).toContain("Host sbx-app\n  HostName 127.0.0.1\n  Port 2222\n");
    expect(first.endsWith(mine)).toBe(true);
    const moved = withSshConfigBlock(first, "sbx-app", sshConfigBlock("sbx-app", { ...target, port: 2300 }));
    expect(moved.match(/Host sbx-app/g)).toHaveLength(1);
    expect(moved).toContain("Port 2300");
    expect(moved.endsWith(mine)).toBe(true);
    expect(withSshConfigBlock("", "sbx-app", "Host sbx-app")).toBe(
      "# >>> sbx sbx-app (written by sbx open-vscode)\nHost sbx-app\n# <<< sbx sbx-app\n",
    );
  });
});
