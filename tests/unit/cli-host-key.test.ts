// How `sbx` learns the host key it pins (cli/ssh.ts `sandboxHostKey`): a container's or microVM's sandbox is asked
// for its sshd's key through the API's exec; a kubernetes project's Pod runs no sshd, so its key is the runtime's
// SSH gateway's, which the project's view carries (`ssh.host_key`) once the gateway listens for it.
import { describe, expect, it } from "vitest";
import type { ProjectView } from "../../sdk/src/client.js";
import { CliError, EXIT } from "../../cli/errors.js";
import { sandboxHostKey } from "../../cli/ssh.js";

const KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGatewayKeyOfTheProjectxxxxxxxxxxxxxxxxxxxxx";
const view = (backend: string, hostKey?: string) =>
  ({
    project_id: "p1",
    name: "p",
    status: "running",
    error: null,
    backend,
    ssh: { host: "127.0.0.1", port: 10001, user: "agent", ...(hostKey ? { host_key: hostKey } : {}) },
    terminal_url: null,
    operation: null,
  }) as Partial<ProjectView> as ProjectView;

/** An API that answers the project's view from `views` in turn and records every exec it is asked for. */
function fakeApi(views: ProjectView[], execStdout = `${KEY} root@sandbox\n`) {
  const execs: unknown[] = [];
  return {
    execs,
    project: async () => views.shift() ?? views.at(-1)!,
    call: async (_method: string, _path: string, init: { body?: unknown }) => {
      execs.push(init.body);
      return { status: 200, data: { exit_code: 0, stdout: execStdout, stderr: "" } };
    },
  };
}

describe("the host key sbx pins", () => {
  it("a container's: its sshd's key, read through the API's exec", async () => {
    const api = fakeApi([]);
    expect(await sandboxHostKey(api as never, view("container"))).toBe(KEY);
    expect(api.execs).toEqual([{ command: ["cat", "/etc/ssh/ssh_host_ed25519_key.pub"], timeout_s: 10 }]);
  });

  it("a kubernetes project's: the gateway's, from the view, without asking the Pod", async () => {
    const api = fakeApi([]);
    expect(await sandboxHostKey(api as never, view("kubernetes", `${KEY} sbx-p1`))).toBe(KEY);
    expect(api.execs).toEqual([]);
  });

  it("waits for the gateway's first listen, then takes its key; says why when it never comes", async () => {
    const later = fakeApi([view("kubernetes"), view("kubernetes", KEY)]);
    expect(await sandboxHostKey(later as never, view("kubernetes"), 5_000)).toBe(KEY);
    const never = fakeApi([view("kubernetes")]);
    const error = await sandboxHostKey(never as never, view("kubernetes"), 600).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CliError);
    expect((error as CliError).code).toBe(EXIT.remote);
    expect(String(error)).toContain(
      "the project's SSH gateway has not listened for it yet (no ssh.host_key)",
    );
    expect(never.execs).toEqual([]);
  });
});
