// The README's commands themselves: what they say without root, and that a repeated set-up is a no-op.
import { execFile } from "node:child_process";
import {
  chmodSync,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { cacheRoot, REPO_ROOT, toolchain } from "../../lib/toolchain.js";

const run = promisify(execFile);

async function asNobody(script: string): Promise<{ code: number; stderr: string }> {
  try {
    await run("setpriv", ["--reuid=65534", "--regid=65534", "--clear-groups", "bash", script], {
      cwd: REPO_ROOT,
    });
    return { code: 0, stderr: "" };
  } catch (error) {
    const e = error as { code: number; stderr: string };
    return { code: e.code, stderr: e.stderr };
  }
}

describe("the README's commands", () => {
  it.each([
    ["scripts/local.sh", "npm run local"],
    ["scripts/test.sh", "npm test"],
  ])("%s without root stops at once and says what needs root", async (script, command) => {
    const { code, stderr } = await asNobody(script);
    expect(code).toBe(1);
    expect(stderr).toContain(`${command} must run as root, because it: installs Debian packages`);
    expect(stderr).toContain("starts the Docker daemon, Squid and the registry");
    expect(stderr).toContain("SANDBOX-INPUT, SANDBOX-FORWARD");
  });

  it("a second set-up reuses everything it built", async () => {
    const { stdout } = await run("bash", ["scripts/setup.sh"], { cwd: REPO_ROOT, timeout: 120_000 });
    expect(stdout).toContain("up to date");
    expect(stdout).toMatch(
      new RegExp(`v${toolchain().pulumiVersion.replace(/\./g, "\\.")} \\((cached at|installed at)`),
    );
    expect(stdout).not.toContain("building v");
    expect(stdout).toContain(`cached at ${toolchain().pulumiRoot}/bin/pulumi-language-nodejs`);
    expect(stdout).not.toMatch(/language host[\s\S]*built in/);
  });

  it("npm run local's set-up skips the tools only the tests use, where npm test's would build them", async () => {
    // A cache holding the Pulumi CLI and its language host (linked), and none of the test-only tools.
    const cache = mkdtempSync(path.join(os.tmpdir(), "local-toolchain-"));
    try {
      const pulumiDir = `pulumi-v${toolchain().pulumiVersion}`;
      symlinkSync(path.join(cacheRoot(), pulumiDir), path.join(cache, pulumiDir));
      const local = await run("bash", ["scripts/setup.sh"], {
        cwd: REPO_ROOT,
        timeout: 120_000,
        env: { ...process.env, AGENT_SANDBOX_CACHE: cache, AGENT_SANDBOX_SKIP_TEST_TOOLS: "1" },
      });
      for (const tool of ["actionlint", "fake-gcs-server", "kubernetes control plane", "kubelet", "kwok"])
        expect(local.stdout).toMatch(
          new RegExp(`==> ${tool}\\S*\\s+\\S*ok\\S* skipped: only the tests use it \\(npm test builds it\\)`),
        );
      // Pulumi's Kubernetes provider (7.5 min to build) only when the stack's config names a cluster.
      expect(local.stdout).toMatch(
        /==> Pulumi's Kubernetes provider\S*\s+\S*ok\S* skipped: no cluster in Pulumi\.\S+\.yaml/,
      );
      expect(local.stdout).not.toMatch(/building v/);
      expect(readdirSync(cache).sort()).toEqual([pulumiDir]);
      // scripts/local.sh is what sets it, for its set-up alone.
      expect(readFileSync(path.join(REPO_ROOT, "scripts/local.sh"), "utf8")).toContain(
        "AGENT_SANDBOX_SKIP_TEST_TOOLS=1 prepare_local_platform",
      );
    } finally {
      rmSync(cache, { recursive: true, force: true });
    }
  }, 180_000);

  it("npm test's set-up leaves the test tools to its background build, which builds each of them", async () => {
    // The set-up's own part, as scripts/test.sh runs it (AGENT_SANDBOX_TEST_TOOLS=background): no test tool
    // built or skipped there, and none in its cache.
    const cache = mkdtempSync(path.join(os.tmpdir(), "test-toolchain-"));
    try {
      const pulumiDir = `pulumi-v${toolchain().pulumiVersion}`;
      symlinkSync(path.join(cacheRoot(), pulumiDir), path.join(cache, pulumiDir));
      const setup = await run("bash", ["scripts/setup.sh"], {
        cwd: REPO_ROOT,
        timeout: 120_000,
        env: { ...process.env, AGENT_SANDBOX_CACHE: cache, AGENT_SANDBOX_TEST_TOOLS: "background" },
      });
      expect(setup.stdout).toMatch(/==> test tools' Go builds\S*\s+\S*ok\S* building in the background/);
      for (const tool of ["actionlint", "fake-gcs-server", "kubernetes control plane", "kubelet", "kwok"])
        expect(setup.stdout).not.toContain(`==> ${tool}`);
      expect(readdirSync(cache).sort()).toEqual([pulumiDir]);
      // The background's script, against the machine's cache (npm test's set-up built it): every tool is there.
      const tools = await run("bash", ["scripts/test-tools.sh"], { cwd: REPO_ROOT, timeout: 120_000 });
      for (const tool of [
        "actionlint",
        "fake-gcs-server",
        "pebble",
        "kubernetes control plane",
        "kubelet",
        "kwok",
      ])
        expect(tools.stdout).toMatch(
          new RegExp(`==> ${tool}\\S*\\s+\\S*ok\\S* v[\\d.]+ \\((cached|installed) at`),
        );
      expect(tools.stdout).toMatch(/==> Pulumi's Kubernetes provider\S*\s+\S*ok\S* v[\d.]+ \(cached at/);
      expect(tools.stdout).not.toContain("building");
      // scripts/test.sh starts it before the rest of its set-up and waits for it before the tests.
      const testSh = readFileSync(path.join(REPO_ROOT, "scripts/test.sh"), "utf8");
      expect(testSh.indexOf("scripts/test-tools.sh")).toBeLessThan(
        testSh.indexOf("AGENT_SANDBOX_TEST_TOOLS=background prepare_local_platform"),
      );
      expect(testSh.indexOf('wait "$tools_pid"')).toBeLessThan(testSh.indexOf('step "tests"'));
    } finally {
      rmSync(cache, { recursive: true, force: true });
    }
  }, 180_000);

  it("the GCP host's set-up: Pulumi's own distribution (CLI and language host) and no Go is enough", async () => {
    // What the startup script leaves before `npm run setup`: get.pulumi.com's CLI and language host in the
    // cache's pulumi-v<version>/bin (no stamp of the project's build), Debian's Node.js, and no Go.
    const cache = mkdtempSync(path.join(os.tmpdir(), "gcp-host-toolchain-"));
    try {
      const bin = path.join(cache, `pulumi-v${toolchain().pulumiVersion}`, "bin");
      mkdirSync(bin, { recursive: true });
      for (const command of ["pulumi", "pulumi-language-nodejs"])
        copyFileSync(path.join(toolchain().pulumiRoot, "bin", command), path.join(bin, command));
      chmodSync(path.join(bin, "pulumi-language-nodejs"), 0o755);
      chmodSync(path.join(bin, "pulumi"), 0o755);
      const { stdout } = await run("bash", ["scripts/setup.sh"], {
        cwd: REPO_ROOT,
        timeout: 120_000,
        env: { ...process.env, AGENT_SANDBOX_CACHE: cache, PATH: "/usr/bin:/bin" },
      });
      expect(stdout).toContain(`Pulumi's own, installed with the CLI at ${bin}/pulumi-language-nodejs`);
      expect(stdout).toMatch(/skipped: no Go toolchain to build fake-gcs-server/);
      expect(stdout).toContain("==> toolchain ready");
    } finally {
      rmSync(cache, { recursive: true, force: true });
    }
  }, 180_000);

  it("the Pulumi CLI built here decodes no password lists at its start, and still refuses a password in plaintext config", async () => {
    const pulumi = path.join(toolchain().pulumiRoot, "bin", "pulumi");
    // Each package's init, with what it allocated: zxcvbn-go's frequency lists were ~10 MB apiece at every start.
    const { stderr } = await run(pulumi, ["version"], { env: { ...process.env, GODEBUG: "inittrace=1" } });
    const inits = [...stderr.matchAll(/^init (\S+) @.* clock, (\d+) bytes/gm)];
    expect(inits.length).toBeGreaterThan(100);
    const frequency = inits.filter(([, name]) => name!.endsWith("zxcvbn-go/frequency"));
    expect(frequency.map(([, name]) => name).sort()).toEqual([
      "github.com/ccojocar/zxcvbn-go/frequency",
      "github.com/nbutton23/zxcvbn-go/frequency",
    ]);
    for (const [line, , bytes] of frequency) expect(Number(bytes), line).toBeLessThan(64 * 1024);
    // `pulumi config set` asks zxcvbn-go whether a value of a password-like key looks like one: as before.
    const project = mkdtempSync(path.join(os.tmpdir(), "pulumi-config-"));
    try {
      writeFileSync(path.join(project, "Pulumi.yaml"), "name: config-check\nruntime: nodejs\n");
      mkdirSync(path.join(project, "state"));
      const env = {
        ...process.env,
        PULUMI_BACKEND_URL: `file://${project}/state`,
        PULUMI_CONFIG_PASSPHRASE: "test",
        PULUMI_SKIP_UPDATE_CHECK: "1",
      };
      const pulumiIn = (...args: string[]) =>
        run(pulumi, args, { cwd: project, env }).then(
          () => "stored",
          (error: { stderr: string }) => error.stderr,
        );
      expect(await pulumiIn("stack", "init", "check", "--non-interactive")).toBe("stored");
      expect(await pulumiIn("config", "set", "dbPassword", "x8Kd93jLq0PzVb27")).toContain(
        "config value for 'config-check:dbPassword' looks like a secret",
      );
      expect(await pulumiIn("config", "set", "apiToken", "Zq8!vR2#mK9@pL4w")).toContain(
        "looks like a secret",
      );
      expect(await pulumiIn("config", "set", "dbPassword", "hunter2")).toBe("stored");
      expect(await pulumiIn("config", "set", "region", "x8Kd93jLq0PzVb27")).toBe("stored");
    } finally {
      rmSync(project, { recursive: true, force: true });
    }
  });

  it("without a Pulumi CLI and without Go, set-up names both and how to install them", async () => {
    const emptyCache = mkdtempSync(path.join(os.tmpdir(), "no-toolchain-"));
    try {
      const result = await run("bash", ["scripts/setup.sh"], {
        cwd: REPO_ROOT,
        env: { ...process.env, AGENT_SANDBOX_CACHE: emptyCache, PATH: "/usr/bin:/bin" },
      }).then(
        () => ({ code: 0, stderr: "" }),
        (error: { code: number; stderr: string }) => error,
      );
      expect(result.code).toBe(1);
      expect(result.stderr).toContain("the Pulumi CLI v");
      expect(result.stderr).toContain("is not installed and there is no Go toolchain to build it");
      expect(result.stderr).toMatch(/curl -fsSL https:\/\/get\.pulumi\.com \| sh -s -- --version \d/);
      expect(result.stderr).toContain("https://go.dev/doc/install");
    } finally {
      rmSync(emptyCache, { recursive: true, force: true });
    }
  });
});
