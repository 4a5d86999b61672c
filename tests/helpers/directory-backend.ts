// A fourth backend, of the tests' own, registered beside the platform's (runtime/backends/registry.ts) and
// known to no other file of the runtime: a project's "sandbox" is a directory on this host, made and removed
// by its own stack program through the real engine and the platform's provider (sandbox:host:Directory and
// sandbox:host:File), its commands and terminal plain child processes of the test there, its final backup
// and snapshots copies of its home. No isolation at all: it shows the seam, nothing else.
import { spawn } from "node:child_process";
import { existsSync, promises as fs } from "node:fs";
import { constants } from "node:os";
import * as path from "node:path";
import { Duplex } from "node:stream";
import { HostDirectory } from "../../components/resources/host-directory.js";
import { HostFile } from "../../components/resources/host-file.js";
import type { TenantSpec } from "../../components/tenant/spec.js";
import type { BackendTraits, SandboxBackend } from "../../runtime/backends/backend.js";
import { SandboxNotRunningError, type ExecResult } from "../../runtime/sandbox/exec.js";
import { EXEC_MARKER, type SandboxProcess } from "../../runtime/sandbox/process.js";
import type { SandboxRunner } from "../../runtime/sandbox/runner.js";
import type { TerminalAttachment } from "../../runtime/terminal/attach.js";
import { snapshotTag } from "../../runtime/tenants/snapshots.js";
import { dockerClient } from "../../lib/docker-client.js";
import { platformBackends, type SandboxBackends } from "../../runtime/backends/registry.js";
import type { StackConfig } from "../../stacks/config.js";
import { apiHarness, type ApiHarness } from "./api.js";
import { testDatabase } from "./postgres.js";
import type { SnapshotRecord } from "../../runtime/store/snapshots.js";

export const DIRECTORY_TRAITS: BackendTraits = {
  sandboxNoun: "directory",
  snapshots: true,
  backupDaemonInside: false,
  tokenCopiedIn: false,
  warmPool: false,
};

/** Where the backend keeps a project: its sandbox (made by its stack) and its snapshots (by the backend). */
export function directoryPaths(root: string, projectId: string) {
  const sandbox = path.join(root, projectId);
  return {
    sandbox,
    home: path.join(sandbox, "home"),
    state: path.join(sandbox, "state"),
    backup: path.join(sandbox, "backup"),
    snapshots: path.join(root, ".snapshots", projectId),
  };
}

export function directoryBackend(root: string): SandboxBackend {
  /** The project's paths, once its stack has made it and says it runs. */
  const running = async (projectId: string) => {
    const paths = directoryPaths(root, projectId);
    const state = await fs.readFile(paths.state, "utf8").catch(() => "absent");
    if (state !== "running") throw new SandboxNotRunningError(`directory ${projectId}`);
    return paths;
  };
  /** Each exec's process groups, by exec id. */
  const groups = new Map<string, number[]>();
  const env = (home: string, extra: Readonly<Record<string, string>> = {}) => ({
    PATH: "/usr/local/bin:/usr/bin:/bin",
    HOME: home,
    ...extra,
  });

  const runner = async (projectId: string): Promise<SandboxRunner> => {
    const { home } = await running(projectId);
    return {
      async start(id, command, onOutput): Promise<SandboxProcess> {
        const cwd = command.cwd ? path.resolve(home, command.cwd) : home;
        const child = spawn(command.argv[0]!, command.argv.slice(1), {
          cwd,
          env: env(home, { ...command.env, [EXEC_MARKER]: id }),
          detached: true,
          stdio: [command.stdin === undefined ? "ignore" : "pipe", "pipe", "pipe"],
        });
        groups.set(id, [...(groups.get(id) ?? []), child.pid!]);
        child.stdout!.on("data", (chunk: Buffer) => onOutput("stdout", chunk));
        child.stderr!.on("data", (chunk: Buffer) => onOutput("stderr", chunk));
        if (Buffer.isBuffer(command.stdin)) child.stdin!.end(command.stdin);
        const exited = new Promise<number>((resolve, reject) => {
          child.once("error", reject);
          child.once("close", (code, signal) =>
            resolve(code ?? 128 + (signal ? constants.signals[signal] : 0)),
          );
        });
        return {
          id,
          input: command.stdin === "stream" ? child.stdin! : undefined,
          exited,
          pause: () => (child.stdout!.pause(), child.stderr!.pause()),
          resume: () => (child.stdout!.resume(), child.stderr!.resume()),
          detach: () => (child.stdout!.destroy(), child.stderr!.destroy()),
        };
      },
      async signal(id, signal) {
        let found = 0;
        for (const group of groups.get(id) ?? [])
          try {
            process.kill(-group, `SIG${signal}`);
            found++;
          } catch {
            // that group has ended
          }
        return found;
      },
      run: (argv, options = {}) =>
        new Promise<ExecResult>((resolve, reject) => {
          const child = spawn(argv[0]!, argv.slice(1), { cwd: home, env: env(home) });
          const out: Buffer[] = [];
          const err: Buffer[] = [];
          child.stdout.on("data", (chunk: Buffer) => out.push(chunk));
          child.stderr.on("data", (chunk: Buffer) => err.push(chunk));
          child.stdin.end(options.stdin ?? Buffer.alloc(0));
          const timer = options.timeoutMs
            ? setTimeout(() => child.kill("SIGKILL"), options.timeoutMs)
            : undefined;
          child.once("error", reject);
          child.once("close", (code) => {
            clearTimeout(timer);
            resolve({
              exitCode: code ?? 137,
              stdout: Buffer.concat(out).toString("utf8"),
              stderr: Buffer.concat(err).toString("utf8"),
            });
          });
        }),
    };
  };

  return {
    kind: "directory",
    traits: DIRECTORY_TRAITS,
    admit: () => ({ backend: "directory" }),
    // The stack makes the sandbox: its directory and home, and a file saying whether it runs.
    program: async (spec) => async () => {
      const paths = directoryPaths(root, spec.projectId);
      const [uid, gid] = [process.getuid!(), process.getgid!()];
      const sandbox = new HostDirectory("sandbox", {
        path: paths.sandbox,
        uid,
        gid,
        mode: "0700",
        deleteContents: true,
      });
      const home = new HostDirectory(
        "home",
        { path: paths.home, uid, gid, mode: "0700", deleteContents: true },
        { dependsOn: sandbox },
      );
      const state = new HostFile(
        "state",
        { path: paths.state, content: spec.running === false ? "stopped" : "running" },
        { dependsOn: sandbox },
      );
      return { home: home.path, state: state.content };
    },
    runner: ({ projectId }) => runner(projectId),
    async attach({ projectId }, session): Promise<TerminalAttachment> {
      const { home } = await running(projectId);
      // A real PTY (util-linux script) around an interactive shell; each attach is a shell of its own.
      const shell = spawn("script", ["-q", "-f", "-c", "bash --norc --noprofile -i", "/dev/null"], {
        cwd: home,
        env: env(home, { TERM: "xterm-256color", PS1: `${session}$ ` }),
      });
      const stream = new Duplex({
        read() {},
        write(chunk: Buffer, _encoding, done) {
          shell.stdin.write(chunk, done);
        },
        final(done) {
          shell.stdin.end(done);
        },
      });
      shell.stdout.on("data", (chunk: Buffer) => stream.push(chunk));
      const ended = new Promise<{ sandboxRunning: boolean }>((resolve) =>
        shell.once("close", () => {
          stream.push(null);
          resolve({ sandboxRunning: existsSync(directoryPaths(root, projectId).state) });
        }),
      );
      return {
        stream,
        resize: async () => undefined,
        ended,
        detach: () => void shell.kill("SIGHUP"),
      };
    },
    async finalBackup(_db, spec: TenantSpec) {
      const paths = directoryPaths(root, spec.projectId);
      try {
        await running(spec.projectId);
      } catch {
        return "skipped: the directory is not running";
      }
      await fs.rm(paths.backup, { recursive: true, force: true });
      await fs.cp(paths.home, paths.backup, { recursive: true });
      return "ok";
    },
    beforeRestart: async () => undefined,
    sshSessions: async () => 0,
    diedAt: async () => undefined,
    prepareImage: async () => undefined,
    snapshots: {
      async take(db, spec): Promise<SnapshotRecord> {
        const { home, snapshots } = directoryPaths(root, spec.projectId);
        const tag = snapshotTag(new Date());
        await fs.mkdir(snapshots, { recursive: true });
        await fs.cp(home, path.join(snapshots, tag), { recursive: true });
        const { rows } = await db.query<SnapshotRecord>(
          "insert into snapshots (project_id, tag, image, digest) values ($1, $2, $3, $4) returning *",
          [spec.projectId, tag, path.join(snapshots, tag), `directory:${tag}`],
        );
        return rows[0]!;
      },
      async deleteAll(db, spec) {
        const { snapshots } = directoryPaths(root, spec.projectId);
        const { rows } = await db.query<{ tag: string }>(
          "delete from snapshots where project_id = $1 returning tag",
          [spec.projectId],
        );
        await fs.rm(snapshots, { recursive: true, force: true });
        return rows.map((row) => row.tag);
      },
    },
  };
}

/**
 * An API harness for Alice whose every part (the reconciler, the terminal proxy, the project routes) goes
 * through the platform's backends with `backend` registered beside them, on a test database of its own.
 */
export async function harnessWithBackend(
  config: StackConfig,
  backend: SandboxBackend,
): Promise<{ h: ApiHarness<"alice">; backends: SandboxBackends }> {
  const database = await testDatabase("postgres", { under: config.host.dataDir });
  // The registration: the platform's backends and the tests' own, one registry for every part.
  const backends = platformBackends({ docker: () => dockerClient() }).register(backend);
  const h = await apiHarness({
    database,
    config,
    users: ["alice"],
    reconciler: { backends },
    terminal: { attacher: backends.attacher(database.db) },
    server: { projects: { backends } },
  });
  return { h, backends };
}
