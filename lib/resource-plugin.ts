// What a Pulumi resource plugin says of itself. Started as the engine starts one (with no engine address it
// logs nowhere), it announces its gRPC port on its first line of output; asked `GetPluginInfo`, it answers
// its version. The answer is kept per file as it is on disk (path, inode, size, modification time), so a
// binary replaced in place is asked again and an unchanged one never twice.
import { spawn } from "node:child_process";
import { stat } from "node:fs/promises";
import { statSync } from "node:fs";
import { Client, credentials, type ServiceError } from "@grpc/grpc-js";
import { ResourceProviderService } from "@pulumi/pulumi/proto/provider_grpc_pb.js";
import type { PluginInfo } from "@pulumi/pulumi/proto/plugin_pb.js";

/** How long a plugin may take to start, announce its port and answer (a 308 MB provider: about a second). */
export const PLUGIN_ANSWER_MS = 30_000;

/**
 * Starts the plugin at `bin`, asks its version over gRPC, and stops it. Throws naming what it did instead:
 * exited before announcing a port, announced something else, or did not answer in `timeoutMs`.
 */
export async function resourcePluginVersion(bin: string, timeoutMs = PLUGIN_ANSWER_MS): Promise<string> {
  // Its own process group, so a wrapper's children go with it.
  const child = spawn(bin, [], { stdio: ["ignore", "pipe", "pipe"], detached: true });
  const exited = new Promise<string>((resolve) => {
    child.once("error", (error) => resolve(`it did not start: ${error.message}`));
    child.once("exit", (code, signal) => resolve(`it exited (${signal ?? `status ${code}`})`));
  });
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr = (stderr + chunk).slice(-2_000)));
  const said = () => (stderr.trim() ? `; it said: ${stderr.trim().split("\n").slice(-3).join(" / ")}` : "");
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`it did not announce its port and answer within ${timeoutMs} ms${said()}`)),
      timeoutMs,
    );
  });
  let client: Client | undefined;
  try {
    const firstLine = new Promise<string>((resolve, reject) => {
      let out = "";
      child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
        out += chunk;
        const end = out.indexOf("\n");
        if (end >= 0) resolve(out.slice(0, end).trim());
      });
      void exited.then((why) => reject(new Error(`${why} before it announced a port${said()}`)));
    });
    const line = await Promise.race([firstLine, late]);
    if (!/^[0-9]{1,5}$/.test(line))
      throw new Error(
        `its first line is not a port, as a Pulumi plugin's is: ${JSON.stringify(line.slice(0, 80))}`,
      );
    const rpc = new Client(`127.0.0.1:${line}`, credentials.createInsecure());
    client = rpc;
    const method = ResourceProviderService.getPluginInfo;
    const info = new Promise<PluginInfo>((resolve, reject) => {
      rpc.makeUnaryRequest(
        method.path,
        () => Buffer.alloc(0), // google.protobuf.Empty
        method.responseDeserialize,
        {},
        { deadline: Date.now() + timeoutMs },
        (error: ServiceError | null, answer?: PluginInfo) =>
          error || !answer
            ? reject(new Error(`it did not answer GetPluginInfo: ${error?.details ?? "no answer"}`))
            : resolve(answer),
      );
    });
    const version = (await Promise.race([info, late])).getVersion();
    if (!version) throw new Error("it answers GetPluginInfo with no version");
    return version.replace(/^v/, "");
  } finally {
    clearTimeout(timer);
    client?.close();
    try {
      if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
    } catch {
      // gone already
    }
    await exited;
  }
}

/** How long a failure to answer is kept before the plugin is asked again (a busy host may have been slow). */
const FAILURE_KEPT_MS = 60_000;

interface Asked {
  readonly key: string;
  readonly answer: Promise<string>;
  settled?: { readonly version: string } | { readonly error: Error; readonly at: number };
}
const asked = new Map<string, Asked>();

function keyOf(file: { ino: number; size: number; mtimeMs: number }): string {
  return `${file.ino}:${file.size}:${file.mtimeMs}`;
}

/** {@link resourcePluginVersion}, asked once per file as it is on disk. */
export async function pluginVersion(bin: string, timeoutMs = PLUGIN_ANSWER_MS): Promise<string> {
  const key = keyOf(await stat(bin));
  const known = asked.get(bin);
  if (known?.key === key && !stale(known)) return known.answer;
  const entry: Asked = { key, answer: resourcePluginVersion(bin, timeoutMs) };
  asked.set(bin, entry);
  entry.answer.then(
    (version) => (entry.settled = { version }),
    (error: Error) => (entry.settled = { error, at: Date.now() }),
  );
  return entry.answer;
}

function stale(entry: Asked): boolean {
  return (
    entry.settled !== undefined && "error" in entry.settled && Date.now() - entry.settled.at > FAILURE_KEPT_MS
  );
}

/**
 * What {@link pluginVersion} has already found for the file as it is now: its version, why it could not be
 * asked, or undefined when it has not been asked (or not answered yet) since it last changed.
 */
export function knownPluginVersion(bin: string): { version: string } | { error: Error } | undefined {
  let key: string;
  try {
    key = keyOf(statSync(bin));
  } catch {
    return undefined;
  }
  const known = asked.get(bin);
  return known?.key === key && !stale(known) ? known.settled : undefined;
}
