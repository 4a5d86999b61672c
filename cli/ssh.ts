// The project's SSH, host-initiated: the sandbox's sshd on its host port, the project's own key, and
// nothing of the user's: no ~/.ssh/config (-F /dev/null), no agent, no forwarding of any kind, no
// environment sent. The sandbox gets new host keys at every container start: the CLI reads the current
// one through the API (an exec of the project's owner, over the API's own authenticated channel) into a
// known_hosts file of the project's, and ssh checks it strictly.
import { spawn, type SpawnOptions } from "node:child_process";
import type { ProjectView } from "../sdk/src/client.js";
import type { CliClient } from "./client.js";
import { CliError, EXIT } from "./errors.js";

export interface SshTarget {
  readonly host: string;
  readonly port: number;
  readonly user: string;
  readonly keyFile: string;
  /** The project's known_hosts (its sandbox's host key, as the API read it) and the name it is under. */
  readonly knownHostsFile: string;
  readonly hostKeyAlias: string;
}

/**
 * The project's SSH address as the API gave it, checked before it reaches an ssh command line or an
 * `~/.ssh/config` block: a host name or IP address, a user name and a port, each plain (a space or a newline
 * there would add options of its own to the block `sbx ssh-config` prints).
 */
export function checkSshAddress(
  ssh: Record<"host" | "port" | "user", unknown>,
): Pick<SshTarget, "host" | "port" | "user"> {
  const { host, port, user } = ssh;
  if (
    typeof host !== "string" ||
    !/^(?:[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,252})|\[?[0-9A-Fa-f:.]{2,45}\]?)$/.test(host) ||
    typeof user !== "string" ||
    !/^[A-Za-z_][A-Za-z0-9_.-]{0,31}$/.test(user) ||
    typeof port !== "number" ||
    !Number.isInteger(port) ||
    port < 1 ||
    port > 65535
  )
    throw new CliError(
      EXIT.refused,
      `the project's SSH address is not a plain host, user and port, so sbx does not use it: ${JSON.stringify({ host, port, user })}`,
    );
  return { host, port, user };
}

/** Options for `ssh` (also in GIT_SSH_COMMAND and `sbx ssh-config`'s block). */
export function sshOptions(target: SshTarget): string[] {
  return [
    "-F",
    "/dev/null",
    "-i",
    target.keyFile,
    "-o",
    "IdentitiesOnly=yes",
    "-o",
    "IdentityAgent=none",
    "-o",
    "ForwardAgent=no",
    "-o",
    "ForwardX11=no",
    "-o",
    "ClearAllForwardings=yes",
    "-o",
    "StrictHostKeyChecking=yes",
    "-o",
    `UserKnownHostsFile=${target.knownHostsFile}`,
    "-o",
    "GlobalKnownHostsFile=/dev/null",
    "-o",
    `HostKeyAlias=${target.hostKeyAlias}`,
    "-o",
    "CheckHostIP=no",
    "-o",
    "LogLevel=ERROR",
    "-o",
    "BatchMode=yes",
    "-o",
    "ConnectTimeout=10",
  ];
}

/** One word for the remote shell, whatever it holds. */
export function shellQuote(word: string): string {
  return `'${word.replace(/'/g, `'\\''`)}'`;
}

/** GIT_SSH_COMMAND for git on the host. */
export function gitSshCommand(target: SshTarget): string {
  return ["ssh", ...sshOptions(target)]
    .map((word) => (/^[\w@%+=:,./-]+$/.test(word) ? word : shellQuote(word)))
    .join(" ");
}

export function sshUrl(target: SshTarget, remotePath: string): string {
  return `ssh://${target.user}@${target.host}:${target.port}${remotePath}`;
}

export interface Captured {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Runs `command`; resolves with its output whatever its exit (spawn failures reject). */
export function capture(
  command: string,
  args: readonly string[],
  options: SpawnOptions & { input?: string | Buffer } = {},
): Promise<Captured> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { ...options, stdio: ["pipe", "pipe", "pipe"] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout!.on("data", (chunk: Buffer) => out.push(chunk));
    child.stderr!.on("data", (chunk: Buffer) => err.push(chunk));
    child.once("error", reject);
    child.once("close", (code) =>
      resolve({
        code: code ?? 1,
        stdout: Buffer.concat(out).toString("utf8"),
        stderr: Buffer.concat(err).toString("utf8"),
      }),
    );
    child.stdin!.on("error", () => undefined);
    child.stdin!.end(options.input ?? "");
  });
}

/** A shell script run in the sandbox as the agent (bash -l: the profile, direnv's hook, secrets). */
export async function remote(target: SshTarget, script: string, input?: string | Buffer): Promise<Captured> {
  return capture(
    "ssh",
    [
      ...sshOptions(target),
      "-p",
      String(target.port),
      `${target.user}@${target.host}`,
      `bash -c ${shellQuote(script)}`,
    ],
    input === undefined ? {} : { input },
  );
}

/** {@link remote}, failing with the script's stderr. */
export async function remoteOk(
  target: SshTarget,
  script: string,
  what: string,
  input?: string | Buffer,
): Promise<string> {
  const result = await remote(target, script, input);
  if (result.code === 255)
    throw new CliError(EXIT.remote, `${what}: cannot reach the sandbox over SSH: ${result.stderr.trim()}`);
  if (result.code !== 0)
    throw new CliError(EXIT.remote, `${what}: ${result.stderr.trim() || `exit ${result.code}`}`);
  return result.stdout;
}

/** Waits until sshd in the sandbox answers (it starts a moment after the container). */
export async function waitForSsh(target: SshTarget, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  while (Date.now() < deadline) {
    const result = await remote(target, "true");
    if (result.code === 0) return;
    last = result.stderr.trim();
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  throw new CliError(EXIT.remote, `the sandbox's SSH did not answer within ${timeoutMs / 1000} s: ${last}`);
}

/**
 * The sandbox's SSH host key (`type base64`), read through the API: the container makes new keys at every
 * start, a moment before sshd listens, so a just-started one is asked again for a while. A kubernetes
 * project's Pod runs no sshd: its key is the runtime's SSH gateway's, which the project's view carries once
 * the gateway listens for it.
 */
export async function sandboxHostKey(
  api: Pick<CliClient, "call" | "project">,
  project: ProjectView,
  timeoutMs = 30_000,
): Promise<string> {
  const id = project.project_id;
  const deadline = Date.now() + timeoutMs;
  let why = "";
  if (project.backend === "kubernetes")
    for (let view: ProjectView | undefined = project; ; view = await api.project(id)) {
      const key = /^(ssh-ed25519 [A-Za-z0-9+/=]+)/.exec(view?.ssh.host_key ?? "")?.[1];
      if (key) return key;
      if (Date.now() > deadline)
        throw new CliError(
          EXIT.remote,
          "the project's SSH gateway has not listened for it yet (no ssh.host_key)",
        );
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
  for (;;) {
    const read = await api
      .call("POST", "/projects/{id}/exec", {
        params: { id },
        body: { command: ["cat", "/etc/ssh/ssh_host_ed25519_key.pub"], timeout_s: 10 },
      })
      .then(
        // 202 is a background process's answer, which this exec does not ask for.
        (answer) => (answer.status === 200 ? answer.data : undefined),
        (error: unknown) => {
          if (error instanceof CliError && error.code === EXIT.conflict) return undefined; // not running yet
          throw error;
        },
      );
    const key = /^(ssh-ed25519 [A-Za-z0-9+/=]+)/.exec(read?.stdout ?? "")?.[1];
    if (key) return key;
    why = read ? read.stderr.trim() || `exit ${read.exit_code}` : "the sandbox is not running";
    if (Date.now() > deadline)
      throw new CliError(EXIT.remote, `cannot read the sandbox's SSH host key through the API: ${why}`);
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

/** The Host block `sbx ssh-config` prints: the project's key and pinned host key, nothing forwarded. */
export function sshConfigBlock(alias: string, target: SshTarget): string {
  return [
    `Host ${alias}`,
    `  HostName ${target.host}`,
    `  Port ${target.port}`,
    `  User ${target.user}`,
    `  IdentityFile ${target.keyFile}`,
    "  IdentitiesOnly yes",
    "  IdentityAgent none",
    "  ForwardAgent no",
    "  ClearAllForwardings yes",
    // The sandbox gets a new host key at every start; sbx commands (sbx status, for one) rewrite this file.
    `  UserKnownHostsFile ${target.knownHostsFile}`,
    `  HostKeyAlias ${target.hostKeyAlias}`,
    "  StrictHostKeyChecking yes",
    "  CheckHostIP no",
  ].join("\n");
}
