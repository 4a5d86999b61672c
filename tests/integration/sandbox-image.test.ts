// The sandbox image, built here from scratch (cached by content afterwards), tested inside real containers
// run the way the tenant stacks run them: every capability dropped but the entrypoint's, no new privileges.
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../../lib/process.js";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { buildSandboxImage, dockerfileArgs, resolveVersions } from "../../sandbox-image/build.js";
import { buildRepoImage, initRepoImage } from "../../sandbox-image/repo-image.js";
import { docker, execIn, sshOptions, uniqueName } from "../helpers/containers.js";

const run = promisify(execFile);
const BACKUP_INTERVAL_SECONDS = 2;

let image: string;
let network: string;
let workDir: string;
let privateKey: string;
let publicKey: string;
const containers: string[] = [];
const volumes: string[] = [];

interface SandboxOptions {
  readonly env?: Record<string, string>;
  readonly mounts?: readonly string[];
  readonly volume?: string;
}

/** Starts a sandbox container and waits until its supervisor reports every program running. */
async function startSandbox(
  options: SandboxOptions = {},
): Promise<{ name: string; ip: string; volume: string }> {
  const name = uniqueName("sbx-image-test");
  const volume = options.volume ?? uniqueName("sbx-image-home");
  if (!volumes.includes(volume)) volumes.push(volume);
  const caps = (
    await docker(
      "image",
      "inspect",
      "--format",
      '{{index .Config.Labels "dev.agent-sandbox.required-capabilities"}}',
      image,
    )
  ).split(",");
  const env = {
    SSH_PUBLIC_KEY: publicKey,
    BACKUP_INTERVAL_SECONDS: String(BACKUP_INTERVAL_SECONDS),
    ...options.env,
  };
  containers.push(name);
  await docker(
    "run",
    "--detach",
    "--name",
    name,
    "--network",
    network,
    "--cap-drop",
    "ALL",
    ...caps.flatMap((cap) => ["--cap-add", cap]),
    "--security-opt",
    "no-new-privileges",
    "--memory",
    "1g",
    "--cpus",
    "1",
    "--pids-limit",
    "512",
    "--dns",
    "127.0.0.1",
    "--mount",
    `type=volume,src=${volume},dst=/home/agent`,
    ...(options.mounts ?? []).flatMap((mount) => ["--mount", mount]),
    ...Object.entries(env).flatMap(([key, value]) => ["--env", `${key}=${value}`]),
    image,
  );
  await waitFor(`${name} healthy`, 60_000, async () =>
    (await execIn(name, "/usr/local/sbin/sandbox-healthcheck", "root")).code === 0 ? true : undefined,
  );
  const ip = await docker(
    "inspect",
    "--format",
    `{{(index .NetworkSettings.Networks "${network}").IPAddress}}`,
    name,
  );
  return { name, ip, volume };
}

async function ssh(
  ip: string,
  extra: string[],
  command: string,
  user = "agent",
): Promise<{ code: number; stdout: string; stderr: string }> {
  const args = ["-p", "2222", ...sshOptions(10), ...extra, `${user}@${ip}`, command];
  try {
    const { stdout, stderr } = await run("ssh", args, { timeout: 30_000 });
    return { code: 0, stdout: stdout.trim(), stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

const backupStatus = async (container: string) =>
  JSON.parse((await execIn(container, "sandbox-backup status")).stdout);

beforeAll(async () => {
  const built = await buildSandboxImage({ base: "local", log: () => undefined });
  image = built.tag;
  network = uniqueName("sbx-image-net");
  await docker("network", "create", network);
  workDir = mkdtempSync(path.join(os.tmpdir(), "sbx-image-"));
  privateKey = path.join(workDir, "id_ed25519");
  await run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "test", "-f", privateKey]);
  publicKey = (await fs.readFile(`${privateKey}.pub`, "utf8")).trim();
}, 1_800_000);

afterAll(async () => {
  for (const name of containers) await docker("rm", "--force", "--volumes", name).catch(() => undefined);
  for (const volume of volumes) await docker("volume", "rm", "--force", volume).catch(() => undefined);
  if (network) await docker("network", "rm", network).catch(() => undefined);
  if (workDir) await fs.rm(workDir, { recursive: true, force: true });
});

describe("the sandbox image", () => {
  let sandbox: { name: string; ip: string; volume: string };
  let backupDir: string;

  beforeAll(async () => {
    backupDir = path.join(workDir, "backup");
    await fs.mkdir(backupDir, { mode: 0o777 });
    await fs.chmod(backupDir, 0o777); // written by the agent user (uid 1000) inside the container
    sandbox = await startSandbox({
      env: { BACKUP_REMOTE: "/mnt/backup/workspace" },
      mounts: [`type=bind,src=${backupDir},dst=/mnt/backup`],
    });
  });

  it("carries the marker file, the agent user and the pinned tools", async () => {
    const args = await dockerfileArgs();
    const versions = await execIn(
      sandbox.name,
      "cat /.agent-sandbox; id -un; tmux -V; node --version; claude --version; codex --version; gemini --version; git --version; rg --version | head -1; jq --version; rclone version | head -1; python3 --version; direnv version; supervisord -v",
    );
    expect(versions.code, versions.stderr).toBe(0);
    const lines = versions.stdout.split("\n");
    expect(JSON.parse(lines[0]!)).toMatchObject({ image: "agent-sandbox" });
    expect(lines[1]).toBe("agent");
    expect(lines[2]).toMatch(/^tmux \d/);
    expect(lines[3]).toBe(`v${args.NODE_VERSION}`);
    expect(lines[4]).toContain(args.CLAUDE_CODE_VERSION);
    expect(lines[5]).toContain(args.CODEX_VERSION);
    expect(lines[6]).toContain(args.GEMINI_CLI_VERSION);
    expect(lines.slice(7).join("\n")).toMatch(
      /git version[\s\S]*ripgrep[\s\S]*jq-[\s\S]*rclone v[\s\S]*Python 3[\s\S]*\d+\.\d+[\s\S]*\d+\.\d+/,
    );
  });

  it("runs its processes as the agent with no capabilities left to gain", async () => {
    const result = await execIn(sandbox.name, "grep -E '^(CapEff|NoNewPrivs)' /proc/self/status");
    expect(result.stdout).toMatch(/CapEff:\s+0000000000000000/);
    expect(result.stdout).toMatch(/NoNewPrivs:\s+1/);
    const processes = await execIn(sandbox.name, "ps -eo user=,args=", "root");
    const backupDaemon = processes.stdout
      .split("\n")
      .filter((line) => line.includes("/usr/local/sbin/sandbox-backup daemon"));
    // The daemon is root's, so that the state the platform reads back is out of the agent's reach
    // (issue 22.2); rclone drops to the agent, so what it writes is the agent's (see the backup test).
    expect(backupDaemon).toEqual([expect.stringMatching(/^root\s/)]);
  });

  it("sshd accepts the project's key and refuses passwords and root", async () => {
    const login = await ssh(
      sandbox.ip,
      ["-i", privateKey],
      "whoami && test -f /.agent-sandbox && echo sandboxed",
    );
    expect(login).toMatchObject({ code: 0, stdout: "agent\nsandboxed" });
    const password = await ssh(
      sandbox.ip,
      ["-o", "PubkeyAuthentication=no", "-o", "PreferredAuthentications=password,keyboard-interactive"],
      "true",
    );
    expect(password.code).toBe(255);
    expect(password.stderr).toContain("Permission denied (publickey)");
    const effective = await execIn(
      sandbox.name,
      "/usr/sbin/sshd -T | grep -E '^(passwordauthentication|permitrootlogin|kbdinteractiveauthentication) '",
      "root",
    );
    expect(effective.stdout.split("\n").sort()).toEqual([
      "kbdinteractiveauthentication no",
      "passwordauthentication no",
      "permitrootlogin forced-commands-only",
    ]);
    // Root only with a key held to a forced command, and a container has no root key at all.
    const root = await ssh(sandbox.ip, ["-i", privateKey], "id", "root");
    expect(root.code).toBe(255);
    expect(root.stderr).toContain("Permission denied (publickey)");
    expect((await execIn(sandbox.name, "ls -A /etc/ssh/authorized_keys", "root")).stdout).toBe("agent");
    // The key file is outside the home volume and not the agent's to change.
    expect((await execIn(sandbox.name, "echo extra >> /etc/ssh/authorized_keys/agent")).code).not.toBe(0);
  });

  it("gives an SSH login with a terminal its shell (sshd's audit record of it is allowed)", async () => {
    // `ssh host` from a terminal, `sbx ssh`, VS Code's terminal: sshd allocates a pty and records the login in
    // the kernel's audit log, and ends the session (exit 255, "closed by remote host") if the kernel refuses.
    const login = await ssh(sandbox.ip, ["-tt", "-i", privateKey], 'tty && echo "shell of $(id -un)"');
    expect(login.code, login.stderr).toBe(0);
    expect(login.stdout.replace(/\r/g, "").split("\n")).toEqual([
      expect.stringMatching(/^\/dev\/pts\/\d+$/),
      "shell of agent",
    ]);
  });

  it("has one host key of its own, ed25519, and sshd offers that one alone", async () => {
    const keys = await execIn(
      sandbox.name,
      "ls /etc/ssh/ | grep -E '^ssh_host_'; stat -c '%U %a' /etc/ssh/ssh_host_ed25519_key",
      "root",
    );
    expect(keys.stdout.split("\n")).toEqual(["ssh_host_ed25519_key", "ssh_host_ed25519_key.pub", "root 600"]);
    const offered = await execIn(sandbox.name, "/usr/sbin/sshd -T | grep -E '^hostkey '", "root");
    expect(offered.stdout).toBe("hostkey /etc/ssh/ssh_host_ed25519_key");
    // What a client is shown is that key (ssh-keyscan asks for every type).
    const scanned = await run("ssh-keyscan", ["-p", "2222", "-T", "10", sandbox.ip]);
    const pub = (await execIn(sandbox.name, "cut -d' ' -f1,2 /etc/ssh/ssh_host_ed25519_key.pub")).stdout;
    expect(
      scanned.stdout
        .trim()
        .split("\n")
        .map((line) => line.split(" ").slice(1).join(" ")),
    ).toEqual([pub]);
  });

  it("backs a new file up within one interval, and records the success time", async () => {
    await execIn(sandbox.name, "mkdir -p notes && echo 'remember this' > notes/todo.txt");
    await waitFor("backup of notes/todo.txt", (BACKUP_INTERVAL_SECONDS + 20) * 1000, async () =>
      existsSync(path.join(backupDir, "workspace", "notes", "todo.txt")) ? true : undefined,
    );
    expect(await fs.readFile(path.join(backupDir, "workspace", "notes", "todo.txt"), "utf8")).toBe(
      "remember this\n",
    );
    const status = await backupStatus(sandbox.name);
    expect(status).toMatchObject({
      last_result: "ok",
      remote: "/mnt/backup/workspace",
      interval_seconds: BACKUP_INTERVAL_SECONDS,
    });
    expect(Date.parse(status.last_success_at)).toBeGreaterThan(Date.now() - 60_000);
    // Written by rclone running as the agent (uid 1000), not by the root daemon that started it.
    expect((await fs.stat(path.join(backupDir, "workspace", "notes", "todo.txt"))).uid).toBe(1000);
    const log = await execIn(sandbox.name, "cat /var/log/supervisor/backup.log", "root");
    expect(log.stdout).toMatch(/backup: OK to \/mnt\/backup\/workspace in \d+ ms/);
  });

  it("keeps the backup's state out of the agent's reach: the agent can read the status, not run the platform's backup", async () => {
    const once = await execIn(sandbox.name, "sandbox-backup once --deadline 10");
    expect(once.code).toBe(2);
    expect(once.stderr).toContain(
      "sandbox-backup once runs as root (its state in /var/lib/agent-sandbox is root's)",
    );
    expect((await execIn(sandbox.name, "touch /var/lib/agent-sandbox/backup-status.json")).code).not.toBe(0);
    expect((await execIn(sandbox.name, "sandbox-backup status")).code).toBe(0);
  });

  it("never runs two backups at once: the platform's own run waits for one under way, within its deadline", async () => {
    // Three at once: one runs, the others wait for it in turn (the final backup before a stop must not be
    // skipped because the daemon's sync, begun before the latest change, holds the lock).
    const three = await execIn(
      sandbox.name,
      "for i in 1 2 3; do (sandbox-backup once >/tmp/once-$i.log 2>&1; echo rc=$?) & done; wait; cat /tmp/once-*.log",
      "root",
    );
    expect(three.stdout.split("\n").filter((line) => line.startsWith("rc="))).toEqual([
      "rc=0",
      "rc=0",
      "rc=0",
    ]);
    expect(three.stdout.match(/waited [\d.]+ s for the backup under way/g)?.length).toBeGreaterThanOrEqual(1);
    expect(three.stdout.match(/backup: OK to /g)).toHaveLength(3);
    // A lock held past the deadline: it gives up with 75 (EX_TEMPFAIL) once the deadline has passed.
    const held = await execIn(
      sandbox.name,
      "flock /var/lib/agent-sandbox/backup.lock sleep 8 & sleep 0.5; s=$(date +%s); sandbox-backup once --deadline 3; echo rc=$? after=$(( $(date +%s) - s ))",
      "root",
    );
    expect(held.stdout).toMatch(/another backup is running; skipped/);
    expect(held.stdout).toMatch(/rc=75 after=[23]$/m);
  });

  it("restores the backup into an empty home volume on first boot", async () => {
    const restored = await startSandbox({
      env: { BACKUP_REMOTE: "/mnt/backup/workspace" },
      mounts: [`type=bind,src=${backupDir},dst=/mnt/backup`],
    });
    const file = await execIn(
      restored.name,
      "cat notes/todo.txt && test -f .sandbox_initialized && echo initialized",
    );
    expect(file.stdout).toBe("remember this\ninitialized");
    expect(await docker("logs", restored.name)).toMatch(
      /restoring \/mnt\/backup\/workspace into \/home\/agent/,
    );
  });

  it("with BACKUP_AFTER_CHANGE_SECONDS, backs a change up that long after it, and leaves an unchanged home alone", async () => {
    const remote = path.join(backupDir, "after-change");
    const changed = await startSandbox({
      env: {
        BACKUP_REMOTE: "/mnt/backup/after-change",
        BACKUP_INTERVAL_SECONDS: "3600",
        BACKUP_AFTER_CHANGE_SECONDS: "3",
      },
      mounts: [`type=bind,src=${backupDir},dst=/mnt/backup`],
    });
    const okLines = async () =>
      (
        await execIn(changed.name, "grep -c 'backup: OK' /var/log/supervisor/backup.log; true", "root")
      ).stdout.trim();
    // The start's backup is the interval's (the next interval is an hour away); what the start itself wrote
    // in the home may make one more, a delay later. Then the home is quiet.
    const first = await waitFor("the first backup", 30_000, async () => {
      const status = await backupStatus(changed.name);
      return status.last_result === "ok" ? status : undefined;
    });
    expect(first).toMatchObject({ interval_seconds: 3600, after_change_seconds: 3 });
    // A new project's first boot: its local remote not made yet is a fresh start, seen without rclone.
    expect(await docker("logs", changed.name)).toMatch(
      /no backup at \/mnt\/backup\/after-change \(directory not found\); fresh start/,
    );
    await new Promise((resolve) => setTimeout(resolve, 8_000));
    // Unchanged, the home is walked every 3 s and nothing is synced.
    const quiet = await backupStatus(changed.name);
    const before = await okLines();
    await new Promise((resolve) => setTimeout(resolve, 8_000));
    expect(await okLines()).toBe(before);
    expect((await backupStatus(changed.name)).last_attempt_at).toBe(quiet.last_attempt_at);
    // A new file deep in the home, then its deletion: each reaches the remote within the delay and a sync.
    await execIn(changed.name, "mkdir -p a/b/c && echo deep > a/b/c/file.txt");
    const added = Date.now();
    await waitFor("the change backed up", 30_000, async () =>
      existsSync(path.join(remote, "a", "b", "c", "file.txt")) ? true : undefined,
    );
    console.log(
      `after-change backup: the new file was on the remote ${Date.now() - added} ms after it was written`,
    );
    expect(await backupStatus(changed.name)).toMatchObject({ last_result: "ok", last_trigger: "change" });
    await execIn(changed.name, "rm a/b/c/file.txt");
    await waitFor("the deletion backed up", 30_000, async () =>
      existsSync(path.join(remote, "a", "b", "c", "file.txt")) ? undefined : true,
    );
  });
});

describe("a developer's tools and shell", () => {
  let sandbox: { name: string; ip: string; volume: string };
  /** An interactive shell of the agent's (`bash -i`, reading its commands from stdin as from a terminal). */
  const interactive = (container: string, commands: string[], dir = "/home/agent") =>
    execIn(
      container,
      `cd ${dir} && printf '%s\\n' ${commands.map((c) => `'${c}'`).join(" ")} | bash -i 2>/dev/null`,
    );
  const plain = (text: string) => text.replace(/\x1b\[[0-9;]*m|[\x01\x02]/g, "");

  beforeAll(async () => {
    sandbox = await startSandbox();
  });

  it("has the tools a developer expects, each answering its version; ast-grep and git-delta at their pins", async () => {
    const args = await dockerfileArgs();
    const versions = await execIn(
      sandbox.name,
      [
        "gh --version | head -1",
        "ast-grep --version",
        "sg --version",
        "fzf --version",
        "vim --version | head -1",
        "unzip -v | head -1",
        "man --version",
        "wget --version | head -1",
        "pip3 --version",
        "python3 -m venv /tmp/venv-test && /tmp/venv-test/bin/python -m pip --version",
        "delta --version",
      ].join("; "),
    );
    expect(versions.code, versions.stderr).toBe(0);
    const lines = versions.stdout.split("\n");
    expect(lines).toHaveLength(11);
    const expected = [
      /^gh version \d+\.\d+/,
      new RegExp(`^ast-grep ${args.AST_GREP_VERSION!.replace(/\./g, "\\.")}$`),
      new RegExp(`^ast-grep ${args.AST_GREP_VERSION!.replace(/\./g, "\\.")}$`),
      /^\d+\.\d+/,
      /^VIM - Vi IMproved \d/,
      /^UnZip \d/,
      /^man \d/,
      /^GNU Wget \d/,
      /^pip \d+.* \(python 3\.\d+\)$/,
      /^pip \d+.*\/tmp\/venv-test\/lib\/python3/,
      new RegExp(`^delta ${args.GIT_DELTA_VERSION!.replace(/\./g, "\\.")}$`),
    ];
    lines.forEach((line, i) => expect(line).toMatch(expected[i]!));
    // ast-grep does its job: a structural match in a TypeScript file.
    const match = await execIn(
      sandbox.name,
      "printf 'const answer = 42;\\nlet other = 1;\\n' >/tmp/a.ts && ast-grep run --pattern 'const $NAME = $VALUE' /tmp/a.ts",
    );
    expect(match.stdout).toContain("const answer = 42;");
    expect(match.stdout).not.toContain("other");
  });

  it("records the versions it was built with, as labels and in /etc/agent-sandbox/versions.json", async () => {
    const args = await dockerfileArgs();
    const labels = JSON.parse(
      await docker("image", "inspect", "--format", "{{json .Config.Labels}}", image),
    ) as Record<string, string>;
    expect(labels).toMatchObject({
      "dev.agent-sandbox.versions.node": args.NODE_VERSION,
      "dev.agent-sandbox.versions.claude-code": args.CLAUDE_CODE_VERSION,
      "dev.agent-sandbox.versions.codex": args.CODEX_VERSION,
      "dev.agent-sandbox.versions.gemini-cli": args.GEMINI_CLI_VERSION,
      "dev.agent-sandbox.versions.ast-grep": args.AST_GREP_VERSION,
    });
    const owner = await execIn(sandbox.name, "stat -c '%U %a' /etc/agent-sandbox/versions.json");
    expect(owner.stdout).toBe("root 644");
    const json = (await execIn(sandbox.name, "cat /etc/agent-sandbox/versions.json")).stdout;
    // What npm and the binaries report as installed, not what was asked: the two agree.
    expect(JSON.parse(json)).toEqual({
      image: image.split(":").pop(),
      node: args.NODE_VERSION,
      "git-delta": args.GIT_DELTA_VERSION,
      npm: {
        npm: args.NPM_VERSION,
        "@anthropic-ai/claude-code": args.CLAUDE_CODE_VERSION,
        "@openai/codex": args.CODEX_VERSION,
        "@google/gemini-cli": args.GEMINI_CLI_VERSION,
        "@ast-grep/cli": args.AST_GREP_VERSION,
      },
    });
  });

  it("has the English man pages of what it installs (sections 1, 5, 7), not their translations or other sections", async () => {
    const pages = await execIn(
      sandbox.name,
      "man -w git-rebase gitignore gitglossary vim tmux; MANWIDTH=80 man git-status | grep -m1 -o 'Show the working tree status'",
    );
    expect(pages.code, pages.stderr).toBe(0);
    expect(pages.stdout.split("\n")).toEqual([
      "/usr/share/man/man1/git-rebase.1.gz",
      "/usr/share/man/man5/gitignore.5.gz",
      "/usr/share/man/man7/gitglossary.7.gz",
      "/usr/share/man/man1/vim.1.gz",
      "/usr/share/man/man1/tmux.1.gz",
      "Show the working tree status",
    ]);
    // vim's pages come in eight languages and openssh-server's sshd is in section 8: dpkg installed only the
    // English 1, 5 and 7 of them (what the debootstrap base brought before the filter is the base's).
    const installed = await execIn(
      sandbox.name,
      'for f in $(dpkg -L vim-common openssh-server | grep \'^/usr/share/man/.*[.]gz$\'); do [ -e "$f" ] && echo "$f"; done',
    );
    const listed = await execIn(
      sandbox.name,
      "dpkg -L vim-common openssh-server | grep '^/usr/share/man/.*[.]gz$'",
    );
    expect(listed.stdout).toMatch(/\/usr\/share\/man\/de\/man1\/vim\.1\.gz/);
    expect(listed.stdout).toMatch(/\/usr\/share\/man\/man8\/sshd\.8\.gz/);
    expect(installed.stdout.split("\n")).toContain("/usr/share/man/man5/sshd_config.5.gz");
    expect(
      installed.stdout.split("\n").filter((page) => !/^\/usr\/share\/man\/man[157]\//.test(page)),
    ).toEqual([]);
  });

  it("a shell in a git repository shows the branch in its prompt, and the common aliases", async () => {
    const setup = await execIn(
      sandbox.name,
      "mkdir -p workspace/prompt-demo && cd workspace/prompt-demo && git init -q -b feature/prompt && git -c user.name=t -c user.email=t@t commit -q --allow-empty -m one && hostname",
    );
    expect(setup.code, setup.stderr).toBe(0);
    const host = setup.stdout;
    // The prompt as bash shows it (PS1 expanded, colours taken out), a bar marking its end.
    const prompt = async (dir: string) =>
      plain(
        (await execIn(sandbox.name, `cd ${dir} && bash -ic 'printf "%s|" "\${PS1@P}"' 2>/dev/null`)).stdout,
      );
    expect(await prompt("workspace/prompt-demo")).toBe(
      `agent@${host}:~/workspace/prompt-demo (feature/prompt)$ |`,
    );
    expect(await prompt("workspace")).toBe(`agent@${host}:~/workspace$ |`);
    await execIn(sandbox.name, "cd workspace/prompt-demo && git switch -q -c other");
    expect(await prompt("workspace/prompt-demo")).toBe(`agent@${host}:~/workspace/prompt-demo (other)$ |`);
    const aliases = await execIn(sandbox.name, "bash -ic 'alias ll la gs gd' 2>/dev/null");
    expect(aliases.stdout.split("\n")).toEqual([
      "alias ll='ls -alF'",
      "alias la='ls -A'",
      "alias gs='git status'",
      "alias gd='git diff'",
    ]);
    const status = await interactive(sandbox.name, ["gs --short --branch"], "workspace/prompt-demo");
    expect(status.stdout).toContain("## other");
  });

  it("keeps history in the home volume: each command as it runs, across shells and containers", async () => {
    const settings = await execIn(
      sandbox.name,
      "bash -ic 'echo $HISTFILE $HISTSIZE $HISTFILESIZE' 2>/dev/null",
    );
    expect(settings.stdout).toBe("/home/agent/.local/state/bash/history 50000 100000");
    // The first shell is killed after its command: nothing is written at its exit, the command is kept anyway.
    await interactive(sandbox.name, ["echo remembered-$((6*7))", "kill -9 $$"]);
    const second = await interactive(sandbox.name, ["history 5"]);
    expect(second.stdout).toContain("remembered-$((6*7))");
    // A new container on the same home: the history is there. The home is made to look like one an older
    // image left (no line in ~/.bashrc): the entrypoint adds it, once.
    await execIn(sandbox.name, "sed -i '/etc\\/agent-sandbox\\/bashrc/d' ~/.bashrc");
    expect((await execIn(sandbox.name, "grep -c agent-sandbox/bashrc ~/.bashrc")).stdout).toBe("0");
    await docker("rm", "--force", sandbox.name);
    const next = await startSandbox({ volume: sandbox.volume });
    expect((await execIn(next.name, "grep -c agent-sandbox/bashrc ~/.bashrc")).stdout).toBe("1");
    const third = await interactive(next.name, ["history"]);
    expect(third.stdout).toContain("remembered-$((6*7))");
    expect(third.stdout).toContain("history 5");
    // A home that turned the defaults off (the line commented out) keeps them off across a restart.
    await execIn(next.name, "sed -i 's|^\\[ -r /etc/agent-sandbox/bashrc|# &|' ~/.bashrc");
    await docker("restart", next.name);
    await waitFor(`${next.name} healthy`, 60_000, async () =>
      (await execIn(next.name, "/usr/local/sbin/sandbox-healthcheck", "root")).code === 0 ? true : undefined,
    );
    expect((await execIn(next.name, "grep -c agent-sandbox/bashrc ~/.bashrc")).stdout).toBe("1");
    expect((await execIn(next.name, "bash -ic 'echo $HISTSIZE' 2>/dev/null")).stdout).toBe("1000");
  });
});

describe("image:build's version flags", () => {
  const buildCli = async (...argv: string[]) => {
    try {
      const { stdout, stderr } = await run("node", ["--import", "tsx", "sandbox-image/build.ts", ...argv], {
        cwd: REPO_ROOT,
        maxBuffer: 16 << 20,
        timeout: 1_200_000,
      });
      return { code: 0, stdout, stderr };
    } catch (error) {
      const e = error as { code: number; stdout: string; stderr: string };
      return { code: e.code, stdout: e.stdout, stderr: e.stderr };
    }
  };

  it("asks the npm registry what a dist-tag names", async () => {
    const resolved = await resolveVersions({ AST_GREP_VERSION: "latest", CODEX_VERSION: "0.169.0" });
    expect(resolved.AST_GREP_VERSION).toMatch(/^\d+\.\d+\.\d+$/);
    expect(resolved.CODEX_VERSION).toBe("0.169.0");
  });

  it("refuses an unknown flag and a version npm does not have, naming them, before building anything", async () => {
    const unknown = await buildCli("--claude-versoin", "2.1.330");
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain('unknown argument "--claude-versoin"');
    const missing = await buildCli("--codex-version", "0.0.0-no-such-version", "--gemini-version", "latest");
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain(
      "--codex-version 0.0.0-no-such-version: @openai/codex@0.0.0-no-such-version does not exist on npm",
    );
    expect(missing.stderr).not.toContain("--gemini-version");
    expect(missing.stdout).not.toMatch(/building|debootstrap/);
  });

  it("without cargo and git-delta's build in the cache, a build on Debian says what is missing, before building", async () => {
    const emptyCache = mkdtempSync(path.join(os.tmpdir(), "no-delta-"));
    try {
      const result = await run(process.execPath, ["--import", "tsx", "sandbox-image/build.ts"], {
        cwd: REPO_ROOT,
        env: {
          ...process.env,
          AGENT_SANDBOX_CACHE: emptyCache,
          CARGO_HOME: path.join(emptyCache, "no-cargo"),
          PATH: "/usr/bin:/bin",
        },
      }).then(
        (done) => ({ code: 0, ...done }),
        (error: { code: number; stdout: string; stderr: string }) => error,
      );
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(
        "is not packaged for this image's base and there is no cargo to build it",
      );
      expect(result.stderr).toContain("https://rustup.rs");
      expect(result.stdout).not.toMatch(/building agent-sandbox|fetching node/);
    } finally {
      await fs.rm(emptyCache, { recursive: true, force: true });
    }
  });

  it("builds with the version asked for under the name given, records it, and leaves latest alone", async () => {
    const args = await dockerfileArgs();
    // A version other than the pin, so the image cannot be the default one.
    const version = args.AST_GREP_VERSION === "0.51.0" ? "0.50.0" : "0.51.0";
    const name = uniqueName("flags-test");
    const built = await buildCli("--tag", name, "--ast-grep-version", version);
    const contentTag = /sandbox image (agent-sandbox\/sandbox:[0-9a-f]{12})/.exec(built.stdout)?.[1];
    try {
      expect(built.code, built.stderr).toBe(0);
      expect(built.stdout).toContain(`@ast-grep/cli@${version}: ${version}`);
      expect(built.stdout).toMatch(new RegExp(`versions .*ast-grep ${version.replace(/\./g, "\\.")}`));
      const tagged = `agent-sandbox/sandbox:${name}`;
      const labels = JSON.parse(
        await docker("image", "inspect", "--format", "{{json .Config.Labels}}", tagged),
      ) as Record<string, string>;
      expect(labels["dev.agent-sandbox.versions.ast-grep"]).toBe(version);
      expect(labels["dev.agent-sandbox.versions.claude-code"]).toBe(args.CLAUDE_CODE_VERSION);
      const inside = await docker(
        "run",
        "--rm",
        "--entrypoint",
        "sh",
        tagged,
        "-c",
        "ast-grep --version; jq -r '.npm[\"@ast-grep/cli\"]' /etc/agent-sandbox/versions.json",
      );
      expect(inside).toBe(`ast-grep ${version}\n${version}`);
      const id = (ref: string) => docker("image", "inspect", "--format", "{{.Id}}", ref);
      expect(await id(`agent-sandbox/sandbox:latest`)).not.toBe(await id(tagged));
    } finally {
      await docker("rmi", `agent-sandbox/sandbox:${name}`).catch(() => undefined);
      if (contentTag) await docker("rmi", contentTag).catch(() => undefined);
    }
  }, 1_500_000);
});

describe("git guardrails", () => {
  let sandbox: { name: string };
  beforeAll(async () => {
    sandbox = await startSandbox();
    const setup = await execIn(
      sandbox.name,
      [
        "set -e",
        "git config --global user.email agent@example.test && git config --global user.name agent",
        "git init -q --bare remote.git",
        "git clone -q remote.git work 2>/dev/null && cd work",
        // A quality gate the agent must not skip.
        "printf '#!/bin/sh\\nif git diff --cached | grep -q FORBIDDEN; then echo \"pre-commit: FORBIDDEN found\" >&2; exit 1; fi\\n' > .git/hooks/pre-commit",
        "chmod +x .git/hooks/pre-commit",
        "echo one > file.txt && git add file.txt && git commit -qm one && git push -q origin main",
      ].join("\n"),
    );
    expect(setup.code, setup.stderr).toBe(0);
  });

  it("normal commit and push work, and the hooks they run are real", async () => {
    const ok = await execIn(
      sandbox.name,
      "cd work && echo two >> file.txt && git commit -qam two && git push -q origin main && git -C ../remote.git log --oneline | wc -l",
    );
    expect(ok).toMatchObject({ code: 0, stdout: "2" });
    const gated = await execIn(sandbox.name, "cd work && echo FORBIDDEN >> file.txt && git commit -qam bad");
    expect(gated.code).not.toBe(0);
    expect(gated.stderr).toContain("pre-commit: FORBIDDEN found");
    await execIn(sandbox.name, "cd work && git checkout -q -- file.txt");
  });

  it.each([
    ["commit --no-verify", "echo FORBIDDEN >> file.txt && git commit --no-verify -qam bypass"],
    ["commit --no-veri (prefix)", "echo FORBIDDEN >> file.txt && git commit --no-veri -qam bypass"],
    ["commit -n", "echo FORBIDDEN >> file.txt && git commit -n -qam bypass"],
    ["commit -anm (cluster)", "echo FORBIDDEN >> file.txt && git commit -anm bypass"],
    ["push --force", "git push --force origin main"],
    ["push -f", "git push -f origin main"],
    ["push -uf (cluster)", "git push -uf origin main"],
    ["push --force-with-lease", "git push --force-with-lease origin main"],
    ["push --force-if-includes", "git push --force-with-lease --force-if-includes origin main"],
    ["push +refspec", "git push origin +main:main"],
    ["push --mirror", "git push --mirror origin"],
    ["-c core.hooksPath", "echo FORBIDDEN >> file.txt && git -c core.hooksPath=/dev/null commit -qam bypass"],
    ["-c core.hookspath (any case)", "git -c Core.HooksPath=/tmp commit -qam bypass"],
    ["config core.hooksPath", "git config core.hooksPath /tmp/hooks"],
    [
      "GIT_CONFIG_* core.hooksPath",
      "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.hooksPath GIT_CONFIG_VALUE_0=/tmp git commit -qam bypass",
    ],
  ])("refuses %s", async (_name, command) => {
    const before = await execIn(sandbox.name, "git -C remote.git rev-parse main; git -C work rev-parse HEAD");
    const result = await execIn(sandbox.name, `cd work && ${command}`);
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/^agent-sandbox: git .* is blocked in this sandbox/);
    expect(
      await execIn(sandbox.name, "git -C remote.git rev-parse main; git -C work rev-parse HEAD"),
    ).toEqual(before);
    expect((await execIn(sandbox.name, "git -C work config --get core.hooksPath")).stdout).toBe("");
    await execIn(sandbox.name, "cd work && git checkout -q -- file.txt");
  });
});

describe("protected paths", () => {
  it("the repo's hooks, .husky and the sandbox's own config cannot be written", async () => {
    // A home volume with a repo in it, then the sandbox (re)created with the repo's protected paths
    // bound read-only over themselves, as the tenant stack does.
    const first = await startSandbox();
    await execIn(
      first.name,
      "git init -q work && mkdir -p work/.husky && echo 'exit 0' > work/.husky/pre-commit",
    );
    await docker("rm", "--force", first.name);
    const mountpoint = await docker("volume", "inspect", "--format", "{{.Mountpoint}}", first.volume);
    const sandbox = await startSandbox({
      volume: first.volume,
      mounts: [".git/hooks", ".husky"].map(
        (p) => `type=bind,src=${mountpoint}/work/${p},dst=/home/agent/work/${p},readonly`,
      ),
    });
    for (const attempt of [
      "touch work/.git/hooks/pre-commit",
      "rm -f work/.husky/pre-commit",
      "echo 'exit 0' > work/.husky/pre-commit",
      "mv work/.git/hooks work/.git/hooks-moved",
      "echo '{}' > /etc/agent-sandbox/sandbox.json",
      "touch /etc/agent-sandbox/extra",
      "touch /.agent-sandbox",
    ]) {
      const result = await execIn(sandbox.name, attempt);
      expect(result.code, attempt).not.toBe(0);
      expect(result.stderr, attempt).toMatch(
        /Read-only file system|Permission denied|Device or resource busy/,
      );
    }
    expect((await execIn(sandbox.name, "cat work/.husky/pre-commit")).stdout).toBe("exit 0");
  });
});

/** A repository's own reference-transaction hook: logs its state and the refs of each call. */
const OWN_REFERENCE_TRANSACTION =
  '#!/bin/sh\necho "$1 $(cut -d" " -f3 | tr "\\n" " ")" >> /tmp/own-reference-transaction\n';

describe("kept repositories", () => {
  // A repository whose hooks the platform protects is kept (docs/security.md, "Kept repositories"): its .git
  // is gitkeeper's and git runs there only through sandbox-git-keeper. The developer's workflow must not
  // notice; the agent's own git, or anything else of its, cannot write .git.
  let sandbox: { name: string };
  const inRepo = (script: string) => execIn(sandbox.name, `cd work && ${script}`);
  beforeAll(async () => {
    const first = await startSandbox();
    const made = await execIn(
      first.name,
      [
        "set -e",
        "git config --global user.email agent@example.test && git config --global user.name agent",
        "git init -q work && cd work && mkdir -p .husky src",
        "printf '#!/bin/sh\\nif git diff --cached | grep -q FORBIDDEN; then echo \"pre-commit: FORBIDDEN found\" >&2; exit 1; fi\\n[ ! -e /tmp/slow-hook ] || sleep 60\\n' > .git/hooks/pre-commit",
        "chmod +x .git/hooks/pre-commit",
        // A reference-transaction hook of the repository's own: the keeper runs protect-refs for it, never the gate.
        `echo ${Buffer.from(OWN_REFERENCE_TRANSACTION).toString("base64")} | base64 -d > .git/hooks/reference-transaction`,
        "chmod +x .git/hooks/reference-transaction",
        "echo one > file.txt && echo 'echo hi' > src/run.sh && git add -A && git commit -qm one",
        // Planted before the repository is kept: keeping it must take these out of .git/config.
        "git config core.fsmonitor 'touch /tmp/planted-fsmonitor' && git config alias.st '!touch /tmp/planted-alias'",
      ].join("\n"),
    );
    expect(made.code, made.stderr).toBe(0);
    await docker("rm", "--force", first.name);
    const mountpoint = await docker("volume", "inspect", "--format", "{{.Mountpoint}}", first.volume);
    sandbox = await startSandbox({
      volume: first.volume,
      mounts: [".git/hooks", ".husky"].map(
        (p) => `type=bind,src=${mountpoint}/work/${p},dst=/home/agent/work/${p},readonly`,
      ),
    });
    await waitFor("the git keeper's socket", 30_000, async () =>
      (await execIn(sandbox.name, "test -S /run/agent-sandbox/git-keeper.sock")).code === 0
        ? true
        : undefined,
    );
  });

  it("is the keeper's at boot: .git and the worktree root, the agent's configuration taken out", async () => {
    expect((await inRepo("stat -c '%U %a' . .git .git/config .git/HEAD")).stdout.split("\n")).toEqual([
      "gitkeeper 1775",
      "gitkeeper 755",
      "gitkeeper 644",
      "gitkeeper 644",
    ]);
    const config = await inRepo("cat .git/config");
    expect(config.stdout).not.toMatch(/fsmonitor|alias/);
    expect(config.stdout).toMatch(/denyNonFastForwards = true/);
    expect((await inRepo("git status --short && ls /tmp")).stdout).not.toMatch(/planted/);
  });

  // The keeper's reference-transaction hook where a repository has none of its own: it hands protect-refs the
  // calls that can be refused (a "prepared" transaction moving a branch) and ends the rest itself. Run here
  // as the agent in a repository of its own, as git would run it: the same answers protect-refs gives.
  it("the reference-transaction gate hands protect-refs every prepared branch move and ends the rest", async () => {
    const zero = "0".repeat(40);
    const result = await execIn(
      sandbox.name,
      [
        "set -e",
        'cd "$(mktemp -d)" && /usr/bin/git init -q -b main && echo a > a && /usr/bin/git add a && /usr/bin/git commit -qm a',
        "base=$(/usr/bin/git rev-parse HEAD)",
        "mkdir .agent-sandbox && echo '# the defaults' > .agent-sandbox/protected && /usr/bin/git add -A && /usr/bin/git commit -qm p",
        'moved=$(/usr/bin/git rev-parse HEAD) && /usr/bin/git reset -q --hard "$base"',
        "gate() { printf '%s\\n' \"$2\" | /usr/local/lib/agent-sandbox/reference-transaction-gate \"$1\" 2>&1 | tr '\\n' ' '; echo \"$1 $3: ${PIPESTATUS[1]}\"; }",
        'gate prepared "$base $moved refs/heads/main" branch',
        'gate committed "$base $moved refs/heads/main" branch',
        'gate aborted "$base $moved refs/heads/main" branch',
        'gate prepared "$base $moved ORIG_HEAD" orig-head',
        'gate prepared "$base $moved refs/tags/v1" tag',
        `gate prepared "$moved ${zero} refs/heads/main" deleted`,
        // A branch left where it is (a reset to HEAD) is ended in the shell: with a Python that cannot start,
        // protect-refs would fail it, as it fails the same call with a move (the control).
        'PYTHONHOME=/nonexistent gate prepared "$moved $moved refs/heads/main" unmoved',
        'PYTHONHOME=/nonexistent gate prepared "$base $moved refs/heads/main" moved-without-python | grep -o "moved-without-python: [0-9]*"',
        // Among other lines, and without its newline: still checked.
        `printf '%s\\n%s' "$base $moved ORIG_HEAD" "${zero} $moved refs/heads/other" | /usr/local/lib/agent-sandbox/reference-transaction-gate prepared >/dev/null 2>&1 || echo "prepared second-line: $?"`,
      ].join("\n"),
    );
    expect(result.code, result.stderr).toBe(0);
    const lines = result.stdout.split("\n");
    expect(lines[0]).toMatch(
      /agent-sandbox: refused: .*main: \.agent-sandbox\/protected .*prepared branch: 1$/,
    );
    expect(lines.slice(1)).toEqual([
      "committed branch: 0",
      "aborted branch: 0",
      "prepared orig-head: 0",
      "prepared tag: 0",
      "prepared deleted: 0",
      "prepared unmoved: 0",
      "moved-without-python: 1",
      "prepared second-line: 1",
    ]);
  });

  // Where a repository has a reference-transaction hook of its own, the keeper links protect-refs (which runs it
  // after its check on every call), not the gate (which ends the calls it has nothing to check, and would end
  // the hook's with them): the hook sees each state of a commit's transaction, and only the abort of a refused one.
  it("a repository's own reference-transaction hook runs at every state, after protect-refs' check", async () => {
    const seen = async () =>
      (await execIn(sandbox.name, "cat /tmp/own-reference-transaction 2>/dev/null || true")).stdout
        .split("\n")
        .map((line) => line.trim())
        .filter(Boolean);
    const before = (await seen()).length;
    const head = (await inRepo("git rev-parse HEAD")).stdout;
    try {
      expect((await inRepo("echo own >> file.txt && git commit -qam own")).code).toBe(0);
      expect((await seen()).slice(before)).toEqual([
        "prepared HEAD refs/heads/main",
        "committed HEAD refs/heads/main",
      ]);
      const refused = await inRepo(
        "mkdir -p .agent-sandbox && echo x > .agent-sandbox/protected && git add .agent-sandbox && git commit -qm protected",
      );
      expect(refused.code, refused.stderr).not.toBe(0);
      expect(refused.stderr).toMatch(/agent-sandbox: refused: [^]*\n {2}main: \.agent-sandbox\/protected/);
      expect((await seen()).slice(before + 2)).toEqual(["aborted HEAD refs/heads/main"]);
    } finally {
      await inRepo(
        `git rm -rq --cached --ignore-unmatch .agent-sandbox; rm -rf .agent-sandbox; git reset -q --hard ${head}`,
      );
    }
    expect((await inRepo("git rev-parse HEAD")).stdout).toBe(head);
  });

  it("the developer's workflow works through the keeper, and what git writes stays the agent's", async () => {
    const script = [
      "set -e",
      "echo two >> file.txt && git add file.txt && git commit -qm two",
      "git checkout -q -b feature && echo f > feature.txt && mkdir -p deep/er && echo d > deep/er/x && git add -A && git commit -qm feature",
      "git checkout -q main && git merge -q --no-edit feature",
      "echo wip >> file.txt && git stash -q && git stash pop -q && git checkout -q -- file.txt",
      "git worktree add -q -b side .worktrees/side && (cd .worktrees/side && echo s > s.txt && git add s.txt && git commit -qm side)",
      "git log --oneline | wc -l",
      "git -C .worktrees/side log --oneline -1 --format=%s",
      // Authored and logged as the agent's own configuration says (the keeper is told it), and git's reads,
      // which record no identity, go without the lookup.
      "git -C .worktrees/side log -1 --format='%an <%ae>, %cn'",
      "git status --short >/dev/null && echo read && git reflog -1 --format=%gn",
      // Files git wrote are the agent's: it can chmod, edit and delete them.
      "chmod +x src/run.sh deep/er/x && echo more >> feature.txt && rm deep/er/x && git checkout -q -- deep feature.txt",
      "find . -path '*/.git' -prune -o -user gitkeeper -print | sort | tr '\\n' ' '",
    ].join("\n");
    const result = await inRepo(script);
    expect(result.code, result.stderr).toBe(0);
    const [commits, side, author, status, reflog, owned] = result.stdout.split("\n");
    expect(commits).toBe("3");
    expect(side).toBe("side");
    expect(author).toBe("agent <agent@example.test>, agent");
    expect([status, reflog]).toEqual(["read", "agent"]);
    // Only the worktree roots are the keeper's.
    expect(owned!.trim().split(" ").sort()).toEqual([".", "./.worktrees", "./.worktrees/side"]);
  });

  it("the hooks run and gate, as the keeper, with their output on the agent's terminal", async () => {
    const before = (await inRepo("git rev-parse HEAD")).stdout;
    const gated = await inRepo("echo FORBIDDEN >> file.txt && git commit -qam bad");
    expect(gated.code).toBe(1);
    expect(gated.stderr).toContain("pre-commit: FORBIDDEN found");
    expect((await inRepo("git rev-parse HEAD")).stdout).toBe(before);
    await inRepo("git checkout -q -- file.txt");
  });

  it.each([
    ["/usr/bin/git commit --no-verify", "/usr/bin/git commit -q --no-verify -am bypass", /Permission denied/],
    ["a ref written by hand", "git rev-parse HEAD~1 > .git/refs/heads/main", /Permission denied/],
    ["moving .git aside", "mv .git .git-aside", /Operation not permitted|Permission denied/],
    ["git commit -n", "git commit -n -qam bypass", /agent-sandbox: git commit -n is blocked/],
    [
      "-c core.fsmonitor",
      "git -c core.fsmonitor='touch /tmp/x' status",
      /git -c core.fsmonitor is refused in a kept repository/,
    ],
    ["config alias", "git config alias.x '!sh'", /git config alias.x is refused in a kept repository/],
    ["--git-dir", "git --git-dir=.git status", /git --git-dir is refused in a kept repository/],
    ["log --output", "git log --output=.git/config", /git log --output is refused in a kept repository/],
  ])("refuses %s, naming why", async (_name, command, why) => {
    const before = (await inRepo("git rev-parse HEAD; cat .git/config")).stdout;
    const result = await inRepo(`echo FORBIDDEN >> file.txt && ${command}`);
    expect(result.code).not.toBe(0);
    expect(result.stderr).toMatch(why);
    expect((await inRepo("git rev-parse HEAD; cat .git/config")).stdout).toBe(before);
    await inRepo("git checkout -q -- file.txt");
  });

  it("no editor runs as the keeper: a commit without a message says how to give one", async () => {
    const result = await inRepo("echo e >> file.txt && git commit -qa; git checkout -q -- file.txt");
    expect(result.stderr).toContain("no editor runs in a kept repository: give the message with -m or -F");
  });

  it("bad input to the keeper's socket is answered and the keeper serves on", async () => {
    const garbage = await execIn(
      sandbox.name,
      `python3 -c 'import socket; s=socket.socket(socket.AF_UNIX,socket.SOCK_SEQPACKET); s.connect("/run/agent-sandbox/git-keeper.sock"); socket.send_fds(s,[b"{not json"],[0,1,2]); print(s.recv(99).decode())'`,
    );
    expect(garbage.stdout).toBe('{"exit": 1}');
    expect(garbage.stderr).toMatch(/the git keeper failed/);
    const outside = await execIn(
      sandbox.name,
      `python3 -c 'import json,socket; s=socket.socket(socket.AF_UNIX,socket.SOCK_SEQPACKET); s.connect("/run/agent-sandbox/git-keeper.sock"); socket.send_fds(s,[json.dumps({"op":"git","argv":["status"],"cwd":"/tmp"}).encode()],[0,1,2]); print(s.recv(99).decode())'`,
    );
    expect(outside.stderr).toContain("/tmp is not in a kept repository the git keeper serves");
    expect((await inRepo("git status --short >/dev/null && echo ok")).stdout).toBe("ok");
  });

  it("follows no link above a worktree root: git worktree add outside .worktrees refused; a root whose parent became a link to / left alone, at a command and at boot", async () => {
    const etc = async () =>
      (await execIn(sandbox.name, "stat -c '%U:%G %a' /etc /etc/ld.so.preload 2>&1", "root")).stdout;
    const before = await etc();
    // The reproduction: a worktree at ~/x/etc, ~/x moved aside and linked to /, then a writing command.
    const outside = await execIn(
      sandbox.name,
      "mkdir -p x && chmod 777 x && cd work && git worktree add -q --detach ../x/etc",
    );
    expect(outside.code).not.toBe(0);
    expect(outside.stderr).toContain(
      "agent-sandbox: a kept repository's worktrees go below /home/agent/work/.worktrees",
    );
    const swap = [
      "set -e",
      "mkdir -p .worktrees/up && chmod 777 .worktrees/up && git worktree add -q --detach .worktrees/up/etc",
      "mv .worktrees/up .worktrees/up.old && ln -s / .worktrees/up",
      "git checkout -q -b swapped && git checkout -q main && git branch -q -D swapped && echo served",
    ].join("\n");
    const swapped = await inRepo(swap);
    expect(swapped.stdout, swapped.stderr).toBe("served");
    expect(await etc()).toBe(before);
    // The entrypoint keeps every repository at boot, the linked worktrees' roots with it.
    await docker("restart", sandbox.name);
    // /run outlives a restart here (no tmpfs): the keeper answers once it serves again.
    await waitFor("the git keeper serving after the restart", 60_000, async () =>
      (await inRepo("git status --short")).code === 0 ? true : undefined,
    );
    expect(await etc()).toBe(before);
    const undone = await inRepo(
      "rm .worktrees/up && mv .worktrees/up.old .worktrees/up && git worktree remove --force .worktrees/up/etc && rmdir .worktrees/up && git worktree list | wc -l",
    );
    expect(undone.stdout, undone.stderr).toBe("2");
  });

  it("gives back no file with a second name: a hard link to .git/config in the worktree stays the keeper's", async () => {
    // Root makes the link: what the agent can do where the kernel does not refuse it a hard link to a file it
    // does not own (fs.protected_hardlinks=0, a bare kernel's default).
    await execIn(sandbox.name, "ln /home/agent/work/.git/config /home/agent/work/config-link", "root");
    const result = await inRepo(
      "git checkout -q -b linked && git checkout -q main && git branch -q -D linked && stat -c %U .git/config config-link",
    );
    expect(result.stdout.split("\n"), result.stderr).toEqual(["gitkeeper", "gitkeeper"]);
    await execIn(sandbox.name, "rm -f /home/agent/work/config-link", "root");
  });

  it("an interrupted git (Ctrl-C on the agent's side) ends the keeper's command and its hook", async () => {
    await execIn(sandbox.name, "touch /tmp/slow-hook");
    const interrupted = await inRepo("echo i >> file.txt && timeout -s INT 3 git commit -qam slow; echo $?");
    expect(interrupted.stdout).toBe("124");
    await waitFor("the hook's sleep gone", 15_000, async () =>
      (await execIn(sandbox.name, "pgrep -u gitkeeper -f 'sleep 60'", "root")).code === 1 ? true : undefined,
    );
    await execIn(sandbox.name, "rm -f /tmp/slow-hook");
    // The interrupted commit left no lock behind: git works on.
    expect(
      (await inRepo("git checkout -q -- file.txt && git status --short >/dev/null && echo ok")).stdout,
    ).toBe("ok");
  });
});

describe("bad input", () => {
  it("a malformed SSH key: the container still starts, says why, and nobody logs in", async () => {
    const sandbox = await startSandbox({ env: { SSH_PUBLIC_KEY: "ssh-ed25519 not-a-key" } });
    expect(await docker("logs", sandbox.name)).toContain(
      "SSH_PUBLIC_KEY is not a valid public key; SSH login is disabled",
    );
    expect((await ssh(sandbox.ip, ["-i", privateKey], "true")).code).toBe(255);
  });

  it("a missing SSH key: the container still starts and says so", async () => {
    const sandbox = await startSandbox({ env: { SSH_PUBLIC_KEY: "" } });
    expect(await docker("logs", sandbox.name)).toContain("no SSH_PUBLIC_KEY; SSH login is disabled");
  });

  it("an unreachable backup remote: logged, visible in the status, the sandbox keeps running", async () => {
    // A WebDAV remote on the container's own loopback, where nothing listens.
    const sandbox = await startSandbox({
      env: { BACKUP_REMOTE: ":webdav,url='http://127.0.0.1:9/':workspace" },
    });
    await waitFor("a failed backup attempt", 60_000, async () =>
      (await backupStatus(sandbox.name)).last_result === "error" ? true : undefined,
    );
    const status = await backupStatus(sandbox.name);
    expect(status.last_error).toMatch(/connection refused|127\.0\.0\.1:9/i);
    expect(status.last_success_at ?? null).toBeNull();
    expect((await execIn(sandbox.name, "/usr/local/sbin/sandbox-healthcheck", "root")).code).toBe(0);
  });

  it("the health check: every supervised program running, else the ones that are not by name; supervisord gone is unhealthy", async () => {
    const sandbox = await startSandbox();
    const check = () => execIn(sandbox.name, "/usr/local/sbin/sandbox-healthcheck", "root");
    await waitFor("healthy", 60_000, async () => ((await check()).code === 0 ? true : undefined));
    expect((await execIn(sandbox.name, "supervisorctl stop git-keeper", "root")).code).toBe(0);
    expect(await check()).toMatchObject({ code: 1, stdout: "git-keeper STOPPED" });
    expect((await execIn(sandbox.name, "supervisorctl start git-keeper", "root")).code).toBe(0);
    expect((await check()).code).toBe(0);
    // No supervisor to ask (its socket moved away): unhealthy, saying so.
    await execIn(sandbox.name, "mv /run/supervisor.sock /run/supervisor.sock.away", "root");
    const gone = await check();
    expect(gone.code).toBe(1);
    expect(gone.stdout).toMatch(/^supervisord did not answer on \/run\/supervisor\.sock: /);
  });

  it("a full disk during backup: the failure is recorded and what was backed up stays", async () => {
    const sandbox = await startSandbox({
      env: { BACKUP_REMOTE: "/mnt/backup/workspace" },
      mounts: ["type=tmpfs,dst=/mnt/backup,tmpfs-size=1m,tmpfs-mode=1777"],
    });
    await execIn(sandbox.name, "echo precious > precious.txt");
    await waitFor("the small file backed up", 30_000, async () =>
      (await execIn(sandbox.name, "cat /mnt/backup/workspace/precious.txt")).stdout === "precious"
        ? true
        : undefined,
    );
    await execIn(sandbox.name, "head -c 3000000 /dev/urandom > big.bin");
    await waitFor("a failed backup", 60_000, async () =>
      (await backupStatus(sandbox.name)).last_result === "error" ? true : undefined,
    );
    expect((await backupStatus(sandbox.name)).last_error).toMatch(
      /no space left on device|too big for remaining disk space/i,
    );
    expect((await execIn(sandbox.name, "cat /mnt/backup/workspace/precious.txt")).stdout).toBe("precious");
    expect((await execIn(sandbox.name, "cat precious.txt")).stdout).toBe("precious");
  });
});

describe("without root (issue 20: the kubernetes backend's Pod runs as the agent, uid 1000)", () => {
  it("starts as the agent with no capability at all, backs up, and runs the terminal's tmux; nothing runs as root", async () => {
    const name = uniqueName("sbx-image-nonroot");
    const volume = uniqueName("sbx-image-home");
    containers.push(name);
    volumes.push(volume);
    // What the Pod has (components/tenant/kubernetes/kubernetes-tenant.ts): uid and gid 1000, every capability
    // dropped, no privilege escalation, the home on its own volume, the backup state on a writable emptyDir.
    await docker(
      "run",
      "--detach",
      "--name",
      name,
      "--network",
      network,
      "--user",
      "1000:1000",
      "--cap-drop",
      "ALL",
      "--security-opt",
      "no-new-privileges",
      "--dns",
      "127.0.0.1",
      "--mount",
      `type=volume,src=${volume},dst=/home/agent`,
      "--mount",
      "type=tmpfs,dst=/var/lib/agent-sandbox,tmpfs-mode=1777",
      "--mount",
      "type=tmpfs,dst=/mnt/backup,tmpfs-mode=1777",
      "--env",
      `SSH_PUBLIC_KEY=${publicKey}`,
      "--env",
      "BACKUP_REMOTE=/mnt/backup/workspace",
      "--env",
      `BACKUP_INTERVAL_SECONDS=${BACKUP_INTERVAL_SECONDS}`,
      image,
    );
    await waitFor(`${name} healthy as the agent`, 60_000, async () =>
      (await execIn(name, "/usr/local/sbin/sandbox-healthcheck")).code === 0 ? true : undefined,
    );
    const logs = await docker("logs", name);
    expect(logs).toContain("running as agent (uid 1000) without root: no SSH daemon");
    expect(logs).not.toMatch(/entrypoint: ERROR/);
    // Every process is the agent's: no sshd, no root supervisor.
    const processes = (await execIn(name, "ps -eo uid=,comm=")).stdout
      .split("\n")
      .map((l) => l.trim().split(/\s+/));
    expect(new Set(processes.map(([uid]) => uid))).toEqual(new Set(["1000"]));
    const commands = processes.map(([, command]) => command);
    expect(commands).toContain("supervisord");
    expect(commands).not.toContain("sshd");
    expect((await execIn(name, "grep -E '^Cap(Eff|Prm)' /proc/1/status")).stdout).toMatch(
      /CapPrm:\s+0{16}\nCapEff:\s+0{16}/,
    );
    // The backup daemon runs as the agent and keeps its state where the Pod lets it.
    await execIn(name, "echo kept > ~/work.txt");
    await waitFor("the home backed up", 30_000, async () =>
      (await execIn(name, "cat /mnt/backup/workspace/work.txt")).stdout === "kept" ? true : undefined,
    );
    expect(await backupStatus(name)).toMatchObject({ last_result: "ok", remote: "/mnt/backup/workspace" });
    // The platform's final backup before a stop (root's in a container) runs as the Pod's user here.
    const final = await execIn(name, "sandbox-backup once --deadline 30");
    expect(final.code, final.stderr).toBe(0);
    // The terminal's session, as the platform's exec starts it.
    expect(
      (await execIn(name, "tmux new-session -d -s main && tmux has-session -t main && echo ok")).stdout,
    ).toBe("ok");
  });
});

describe("a kubernetes tenant's egress proxy: the image's Squid as `proxy` on the tenant's rendered config", () => {
  // What the proxy Deployment runs (components/tenant/kubernetes/egress-proxy.ts): the ConfigMap's files mounted
  // read-only, `squid -N -f`, uid and gid 13, every capability dropped, no new privileges, a read-only root.
  // The origin sits at a public-looking address (TEST-NET-2) so only the config's rules decide; the names the
  // proxy resolves come from its /etc/hosts (the Pod's resolver stands in for them here).
  const SUBNET = "198.51.100";
  let proxyNet: string;
  let origin: string;
  let proxy: string;
  let client: string;
  let configDir: string;
  /** The HTTP status curl got through the proxy (000: no answer), and the body. */
  const through = async (...args: string[]) => {
    const result = await execIn(
      client,
      `curl -s -m 10 -o /tmp/body -w '%{http_code}' -x http://${SUBNET}.10:3128 ${args.join(" ")}; echo " $(cat /tmp/body 2>/dev/null | head -c 40)"`,
    );
    const [status, ...body] = result.stdout.split(" ");
    return { status, body: body.join(" ") };
  };

  beforeAll(async () => {
    const { tenantProxyConfig, EGRESS_PROXY } =
      await import("../../components/tenant/kubernetes/egress-proxy.js");
    configDir = await fs.mkdtemp(path.join(workDir, "proxy-config-"));
    await fs.chmod(configDir, 0o755);
    const data = tenantProxyConfig("sbx-proxy-test", ["origin.example.com", "inward.example.com"]);
    for (const [file, text] of Object.entries(data))
      await fs.writeFile(path.join(configDir, file), text, { mode: 0o644 });
    proxyNet = uniqueName("sbx-proxy-net");
    await docker("network", "create", "--subnet", `${SUBNET}.0/24`, proxyNet);
    origin = uniqueName("sbx-proxy-origin");
    proxy = uniqueName("sbx-proxy");
    client = uniqueName("sbx-proxy-client");
    containers.push(origin, proxy, client);
    await docker(
      "run",
      "--detach",
      "--name",
      origin,
      "--network",
      proxyNet,
      "--ip",
      `${SUBNET}.20`,
      "--entrypoint",
      "node",
      image,
      "-e",
      "require('http').createServer((q, r) => r.end('origin-ok ' + q.url)).listen(80)",
    );
    await docker(
      "run",
      "--detach",
      "--name",
      proxy,
      "--network",
      proxyNet,
      "--ip",
      `${SUBNET}.10`,
      "--user",
      `${EGRESS_PROXY.uid}:${EGRESS_PROXY.uid}`,
      "--cap-drop",
      "ALL",
      "--security-opt",
      "no-new-privileges",
      "--read-only",
      "--add-host",
      `origin.example.com:${SUBNET}.20`,
      "--add-host",
      "inward.example.com:10.1.2.3",
      "--add-host",
      `unlisted.example.com:${SUBNET}.20`,
      "--mount",
      `type=bind,src=${configDir},dst=${EGRESS_PROXY.configDir},readonly`,
      "--entrypoint",
      "squid",
      image,
      "-N",
      "-f",
      `${EGRESS_PROXY.configDir}/${EGRESS_PROXY.mainFile}`,
    );
    await docker(
      "run",
      "--detach",
      "--name",
      client,
      "--network",
      proxyNet,
      "--user",
      "1000:1000",
      "--entrypoint",
      "sleep",
      image,
      "infinity",
    );
    await waitFor("the proxy listening", 30_000, async () =>
      (await execIn(client, `curl -s -m 2 -o /dev/null http://${SUBNET}.10:3128/`)).code === 0
        ? true
        : undefined,
    ).catch(async (error: Error) => {
      throw new Error(`${error.message}; proxy's log: ${await docker("logs", proxy).catch(String)}`);
    });
  }, 120_000);

  afterAll(async () => {
    // The network goes after its containers (the file's own cleanup would remove them only later).
    for (const name of [client, proxy, origin].filter(Boolean))
      await docker("rm", "--force", name).catch(() => undefined);
    if (proxyNet) await docker("network", "rm", proxyNet).catch(() => undefined);
  });

  it("runs as `proxy` with no capability, on a read-only root", async () => {
    const status = (await execIn(proxy, "grep -E '^(Uid|Gid|CapEff|CapPrm|NoNewPrivs)' /proc/1/status", "13"))
      .stdout;
    expect(status).toMatch(/^Uid:\s+13\s+13\s+13\s+13$/m);
    expect(status).toMatch(/^Gid:\s+13\s+13\s+13\s+13$/m);
    expect(status).toMatch(/^CapPrm:\s+0{16}$/m);
    expect(status).toMatch(/^CapEff:\s+0{16}$/m);
    expect(status).toMatch(/^NoNewPrivs:\s+1$/m);
    expect((await execIn(proxy, "touch /etc/x 2>&1; touch /tmp/x 2>&1", "13")).stdout).toMatch(
      /Read-only file system/,
    );
  });

  it("lets the allowlisted name through, and only on 80/443", async () => {
    expect(await through("http://origin.example.com/hello")).toEqual({
      status: "200",
      body: "origin-ok /hello",
    });
    expect((await through("http://ORIGIN.example.com./again")).status).toBe("200");
    expect((await through("http://origin.example.com:8080/")).status).toBe("403");
  });

  it("refuses a name not on the list, IP literals, and an allowed name that resolves inward", async () => {
    // unlisted.example.com resolves to the same origin: the name decides, not the address.
    expect((await through("http://unlisted.example.com/")).status).toBe("403");
    expect((await through(`http://${SUBNET}.20/`)).status).toBe("403");
    expect((await through("-p", `https://${SUBNET}.20/`)).status).toMatch(/^(403|000)$/);
    expect((await through("-p", "https://origin.example.com:8443/")).status).toMatch(/^(403|000)$/);
    expect((await through("http://inward.example.com/")).status).toBe("403");
    expect((await through("http://169.254.169.254/computeMetadata/v1/")).status).toBe("403");
  });

  it("logs every request on stdout, where the cluster's logging reads it", async () => {
    const logs = await docker("logs", proxy);
    expect(logs).toMatch(/TCP_MISS\/200 .* GET http:\/\/origin\.example\.com\/hello/);
    expect(logs).toMatch(/TCP_DENIED\/403 .* GET http:\/\/unlisted\.example\.com\//);
    expect(logs).toMatch(/TCP_DENIED\/403 .* GET http:\/\/inward\.example\.com\//);
  });
});

describe("per-repo images", () => {
  it("init writes a Dockerfile FROM the sandbox image; build adds the repo's package and keeps the rest", async () => {
    const repo = path.join(workDir, "my-repo");
    await fs.mkdir(repo);
    const file = await initRepoImage(repo, { aptPackages: ["file"], npmPackages: [] });
    expect(file).toBe(path.join(repo, ".agent-sandbox", "Dockerfile"));
    const tag = await buildRepoImage(repo, image);
    expect(tag).toMatch(/^agent-sandbox\/repo-my-repo:[0-9a-f]{12}$/);
    try {
      const inspect = (ref: string) =>
        docker(
          "image",
          "inspect",
          "--format",
          "{{json .Config.Entrypoint}} {{.Config.WorkingDir}} {{.Config.Healthcheck.Test}}",
          ref,
        );
      expect(await inspect(tag)).toBe(await inspect(image));
      const output = await docker(
        "run",
        "--rm",
        "--entrypoint",
        "sh",
        tag,
        "-c",
        "file --version | head -1; claude --version; cat /.agent-sandbox",
      );
      expect(output).toMatch(/^file-\d[\s\S]*Claude Code[\s\S]*"image":"agent-sandbox"/);
    } finally {
      await docker("rmi", tag).catch(() => undefined);
    }
  });
});
