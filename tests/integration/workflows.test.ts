// The CI workflows (.github/workflows): actionlint (built from Go modules by scripts/setup.sh) passes on them
// and rejects a broken one; their `preview-*` and `drift-*` steps' `run:` text, run with bash as the runner
// runs it, on an isolated local platform with one real tenant: the platform stack's preview with the policy
// pack, the tenant rollout preview and the drift check, each asserted on the Markdown and JSON it writes.
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, promises as fs, readFileSync, symlinkSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { tenantNames } from "../../components/tenant/names.js";
import { squidPaths } from "../../lib/host/squid.js";
import { actionlintBin, REPO_ROOT } from "../../lib/toolchain.js";
import { currentProgramVersion } from "../../stacks/tenant/version.js";
import { tenantDefaults, tenantStackOptions } from "../../runtime/tenants/config.js";
import { createTenant, destroyTenant, type TenantStackOptions } from "../../runtime/tenants/stack.js";
import { writeStackFile } from "../helpers/api.js";
import { docker } from "../helpers/containers.js";
import { tenantLeftovers, testPlatform, type TestPlatform } from "../helpers/host.js";

interface Step {
  readonly id?: string;
  readonly name?: string;
  readonly run?: string;
  readonly uses?: string;
}
interface Job {
  readonly steps: readonly Step[];
  readonly "runs-on": string | string[];
}
interface Workflow {
  readonly on: Record<string, unknown>;
  readonly jobs: Record<string, Job>;
}

interface Result {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

function exec(file: string, args: readonly string[], options: { cwd: string; env?: NodeJS.ProcessEnv }) {
  return new Promise<Result>((resolve) => {
    execFile(file, args, { ...options, maxBuffer: 64 << 20, timeout: 900_000 }, (error, stdout, stderr) =>
      resolve({ code: error ? (typeof error.code === "number" ? error.code : -1) : 0, stdout, stderr }),
    );
  });
}

/** This process's environment without the platform's and Pulumi's settings: each test sets its own. */
function baseEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const key of Object.keys(env)) if (/^(AGENT_SANDBOX_|PULUMI_)/.test(key)) delete env[key];
  return env;
}

const WORKFLOWS = path.join(REPO_ROOT, ".github/workflows");
const workflow = (file: string) => parseYaml(readFileSync(path.join(WORKFLOWS, file), "utf8")) as Workflow;

/** actionlint in `cwd` (it finds `.github/workflows` and `.github/actionlint.yaml` there), one line per error. */
const actionlint = (cwd: string, ...args: string[]) =>
  exec(actionlintBin(), ["-no-color", "-oneline", ...args], { cwd });

/** Every step of the workflows whose id starts with `prefix`, with the file it is in. */
function stepsWithId(prefix: string) {
  return ["ci.yml", "drift.yml"].flatMap((file) =>
    Object.values(workflow(file).jobs).flatMap((job) =>
      job.steps.filter((step) => step.id?.startsWith(prefix)).map((step) => ({ file, ...step })),
    ),
  );
}

function stepRun(id: string): string {
  const step = [...stepsWithId("preview-"), ...stepsWithId("drift-")].find((s) => s.id === id);
  if (!step?.run) throw new Error(`no step with id ${id} and a run: text in .github/workflows`);
  return step.run;
}

describe("actionlint", () => {
  it("passes on every workflow (shellcheck on the run: scripts where it is installed)", async () => {
    const files = (await fs.readdir(WORKFLOWS)).sort();
    expect(files).toEqual(["ci.yml", "drift.yml"]);
    const result = await actionlint(REPO_ROOT);
    expect(result.stdout + result.stderr).toBe("");
    expect(result.code).toBe(0);
  });

  it("rejects broken workflows, naming each mistake", async () => {
    const root = mkdtempSync(path.join(os.tmpdir(), "actionlint-"));
    try {
      // actionlint looks for the project's root by its .git.
      await fs.mkdir(path.join(root, ".git"));
      await fs.mkdir(path.join(root, ".github/workflows"), { recursive: true });
      // This repository's own ci.yml with one step id misspelt where it is read.
      const ci = readFileSync(path.join(WORKFLOWS, "ci.yml"), "utf8");
      const misspelt = ci.replace(
        "steps.preview-tenants.outcome == 'failure'",
        "steps.preview-tenant.outcome == 'failure'",
      );
      expect(misspelt).not.toBe(ci);
      await fs.writeFile(path.join(root, ".github/workflows/ci.yml"), misspelt);
      await fs.writeFile(
        path.join(root, ".github/workflows/broken.yml"),
        [
          "on: pull_request",
          "jobs:",
          "  a:",
          "    runs-on: [self-hosted, agent-sandbox-hots]",
          "    steps:",
          "      - run: echo '${{ github.event.pull_request.title }}'",
          "      - uses: actions/checkout@v4",
          "        with:",
          "          fetch-dept: 1",
          "",
        ].join("\n"),
      );
      await fs.copyFile(
        path.join(REPO_ROOT, ".github/actionlint.yaml"),
        path.join(root, ".github/actionlint.yaml"),
      );
      const result = await actionlint(root, "-shellcheck=");
      expect(result.code).toBe(1);
      const lines = result.stdout.trim().split("\n");
      expect(lines).toEqual(
        expect.arrayContaining([
          expect.stringMatching(/^\.github\/workflows\/ci\.yml:.*property "preview-tenant" is not defined/),
          expect.stringMatching(/broken\.yml:.*label "agent-sandbox-hots" is unknown/),
          expect.stringMatching(
            /broken\.yml:.*"github\.event\.pull_request\.title" is potentially untrusted/,
          ),
          expect.stringMatching(/broken\.yml:.*input "fetch-dept" is not defined/),
        ]),
      );
      expect(lines).toHaveLength(4);
    } finally {
      await fs.rm(root, { recursive: true, force: true });
    }
  });

  it("names the fix when it has not been built", () => {
    expect(() => actionlintBin({ AGENT_SANDBOX_CACHE: "/nonexistent" })).toThrow(
      /actionlint v[\d.]+ not found at \/nonexistent\/actionlint-v[\d.]+\/bin\/actionlint; run 'npm run setup'/,
    );
  });
});

describe("the workflows' shape", () => {
  it("ci runs the README's test command on pull requests and pushes to main, and previews pull requests", () => {
    const ci = workflow("ci.yml");
    expect(Object.keys(ci.on).sort()).toEqual(["pull_request", "push"]);
    expect(ci.on.push).toEqual({ branches: ["main"] });
    expect(ci.jobs.test!.steps.some((step) => step.run?.includes(".ci/run"))).toBe(true);
    expect(stepsWithId("preview-").map(({ file, id }) => `${file} ${id}`)).toEqual([
      "ci.yml preview-platform",
      "ci.yml preview-tenants",
    ]);
  });

  it("drift runs on a schedule and on demand, on the platform's host", () => {
    const drift = workflow("drift.yml");
    expect(Object.keys(drift.on).sort()).toEqual(["schedule", "workflow_dispatch"]);
    expect(drift.jobs.drift!["runs-on"]).toContain("agent-sandbox-host");
    expect(stepsWithId("drift-").map(({ id }) => id)).toEqual(["drift-check"]);
  });

  it("every preview and drift step is a plain npm run command configured by the environment alone", () => {
    for (const step of [...stepsWithId("preview-"), ...stepsWithId("drift-")]) {
      // No expression: what the runner runs is exactly the text this test runs.
      expect(step.run, step.id).not.toContain("${{");
      expect(step.run, step.id).toMatch(/^npm run (preview:platform|preview:tenants|drift:check) -- /);
    }
  });
});

describe("the workflows' preview and drift steps, run on an isolated local platform", () => {
  let platform: TestPlatform;
  let configFile: string;
  let options: TenantStackOptions;
  let reports: string;
  const projectId = `wf-${randomBytes(3).toString("hex")}`;
  const stackName = "workflows-test";

  /** Runs the step's `run:` text as the runner does (`shell: bash`), from the checkout's root. */
  function runStep(id: string) {
    return exec("bash", ["--noprofile", "--norc", "-eo", "pipefail", "-c", stepRun(id)], {
      cwd: REPO_ROOT,
      env: {
        ...baseEnv(),
        AGENT_SANDBOX_CONFIG: configFile,
        AGENT_SANDBOX_STACK: stackName,
        REPORTS: reports,
      },
    });
  }
  const report = (file: string) => readFileSync(path.join(reports, file), "utf8");
  const json = (file: string) => JSON.parse(report(file)) as Record<string, unknown>;

  beforeAll(async () => {
    platform = await testPlatform({ subnetPool: "10.246.12.0/24", sshPortRange: [28830, 28840] });
    const { config } = platform;
    configFile = await writeStackFile(config.host, stackName, {
      target: "local",
      host: config.host,
      tenants: config.tenants,
    });
    reports = await fs.mkdtemp(path.join(os.tmpdir(), "workflow-reports-"));
    options = tenantStackOptions(config);
    await createTenant(
      {
        projectId,
        ownerId: "workflows-test",
        mode: "local",
        image: config.tenants.image,
        subnet: "10.246.12.0/24",
        // Below the kernel's ephemeral range, so nothing else here can be given it.
        sshHostPort: 28835,
        host: tenantDefaults(config).host,
      },
      options,
    );
  }, 900_000);

  afterAll(async () => {
    if (options) await destroyTenant(projectId, options).catch(() => undefined);
    await platform?.stop();
    if (reports) await fs.rm(reports, { recursive: true, force: true });
  }, 300_000);

  it("preview-platform: the platform stack's preview with the policy pack, per resource, host untouched", async () => {
    const squidConf = squidPaths(platform.config.host).config;
    const before = await fs.stat(squidConf);
    const result = await runStep("preview-platform");
    expect(result.code, result.stderr).toBe(0);

    const markdown = report("platform.md");
    expect(result.stdout).toContain(markdown);
    expect(markdown).toMatch(/^## Platform stack preview\n/);
    // A platform stack never applied on this host: the whole baseline is to be created.
    expect(markdown).toMatch(
      new RegExp(
        `Stack \`${stackName}\` \\(target \`local\`, state \`file://${platform.config.host.dataDir}/platform/state\`\\), ` +
          "policy packs `agent-sandbox-platform@[\\d.]+`: 11 to create, 0 to update, 0 to replace, 0 to delete, 0 unchanged\\.",
      ),
    );
    expect(markdown).toContain("| `+` create | `sandbox:host:FirewallBaseline` | `host-firewall` |");
    expect(markdown).toContain("| `+` create | `sandbox:host:File` | `host-squid-conf` |");
    expect(markdown).toContain("No policy violations.");
    expect(markdown).toContain("<details><summary>pulumi preview --diff</summary>");

    const preview = json("platform.json");
    expect(preview).toMatchObject({ stack: stackName, target: "local", status: "ok", violations: [] });
    expect((preview.changes as { op: string; type: string }[]).map((c) => `${c.op} ${c.type}`)).toEqual(
      expect.arrayContaining([
        "create sandbox:host:SquidService",
        "create sandbox:host:RegistryService",
        "create sandbox:host:CaddyService",
      ]),
    );
    // A preview changes nothing: the running Squid's config is the one it had.
    expect((await fs.stat(squidConf)).mtimeMs).toBe(before.mtimeMs);
  }, 600_000);

  it("preview-tenants: the rollout preview of this checkout lists the tenant as unchanged", async () => {
    const result = await runStep("preview-tenants");
    expect(result.code, result.stderr).toBe(0);
    const markdown = report("tenants.md");
    expect(markdown).toMatch(/^## Tenant rollout preview\n/);
    expect(markdown).toContain("against 1 tenant stack(s): 1 unchanged, 0 changing, 0 failed");
    expect(markdown).toContain(`| ${projectId} | \`${currentProgramVersion().version}\` | unchanged |`);
    expect(json("tenants.json")).toMatchObject({
      compiled: true,
      tenants: [{ projectId, status: "unchanged", changes: [] }],
    });
  }, 600_000);

  it("drift-check: clean (exit 0), then a container removed out of band is drift (exit 3)", async () => {
    const clean = await runStep("drift-check");
    expect(clean.code, clean.stderr).toBe(0);
    expect(report("drift.md")).toContain("1 tenant stack(s): 1 clean, 0 drifted, 0 could not be checked.");
    expect(json("drift.json")).toMatchObject({ tenants: [{ projectId, status: "clean", resources: [] }] });

    await docker("rm", "-f", tenantNames(projectId).container);
    const drifted = await runStep("drift-check");
    expect(drifted.code, drifted.stderr).toBe(3);
    const markdown = report("drift.md");
    expect(markdown).toContain(`### ${projectId}: drifted`);
    expect(markdown).toMatch(/- `sandbox:docker:Container` `[^`]+`: deleted out of band/);
    expect(json("drift.json")).toMatchObject({
      tenants: [
        { projectId, status: "drifted", resources: [expect.objectContaining({ change: "deleted" })] },
      ],
    });
  }, 600_000);

  it("the tenant's destroy leaves nothing behind", async () => {
    expect(await destroyTenant(projectId, options)).toBe("deleted");
    expect(await tenantLeftovers(platform.config.host, projectId)).toEqual([]);
  }, 300_000);
});

describe("npm run preview:platform, bad input and a failing policy", () => {
  let root: string;
  beforeAll(() => {
    root = mkdtempSync(path.join(os.tmpdir(), "preview-platform-"));
  });
  afterAll(async () => {
    await fs.rm(root, { recursive: true, force: true });
  });

  const previewPlatform = (env: Record<string, string>, ...args: string[]) =>
    exec("npm", ["run", "--silent", "preview:platform", "--", ...args], {
      cwd: REPO_ROOT,
      env: { ...baseEnv(), AGENT_SANDBOX_STACK: "policy-test", ...env },
    });

  /** A local-target stack file on directories of the test's own (previewed only: nothing is started). */
  async function localStackFile(name: string, host: Record<string, unknown> = {}) {
    const file = path.join(root, `Pulumi.${name}.yaml`);
    const dirs = Object.fromEntries(
      ["configDir", "dataDir", "logDir", "runDir"].map((key) => [key, path.join(root, name, key)]),
    );
    await fs.writeFile(
      file,
      `config:\n  agent-sandbox:target: local\n  agent-sandbox:host: ${JSON.stringify({ ...dirs, ...host })}\n`,
    );
    return file;
  }

  it("a mandatory policy violation fails it (exit 1) and is listed; an advisory one is listed too", async () => {
    const pack = path.join(root, "pack");
    await fs.mkdir(pack);
    symlinkSync(path.join(REPO_ROOT, "node_modules"), path.join(pack, "node_modules"));
    await fs.writeFile(
      path.join(pack, "PulumiPolicy.yaml"),
      'description: refuses host files\nruntime:\n  name: nodejs\n  options:\n    nodeargs: "--import=tsx"\n',
    );
    await fs.writeFile(
      path.join(pack, "package.json"),
      '{"name": "test-pack", "version": "1.2.3", "type": "module"}\n',
    );
    await fs.writeFile(
      path.join(pack, "index.ts"),
      `import { PolicyPack } from "@pulumi/policy";
new PolicyPack("test-pack", {
  policies: [
    {
      name: "no-squid-conf",
      description: "no Squid config",
      enforcementLevel: "mandatory",
      validateResource: (args, report) => {
        if (args.name === "host-squid-conf") report("Squid's config is refused by the test pack");
      },
    },
    {
      name: "note-directories",
      description: "directories are noted",
      enforcementLevel: "advisory",
      validateResource: (args, report) => {
        if (args.type === "sandbox:host:Directory") report("a directory");
      },
    },
  ],
});
`,
    );
    const out = path.join(root, "violations.json");
    const result = await previewPlatform(
      { AGENT_SANDBOX_CONFIG: await localStackFile("policy-test") },
      "--policy-pack",
      pack,
      "--json",
      out,
    );
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("preview:platform: a mandatory policy failed");
    expect(result.stdout).toContain("policy packs `test-pack@1.2.3`");
    expect(result.stdout).toContain("**A mandatory policy failed: this change cannot be applied as it is.**");
    expect(result.stdout).toContain(
      "| mandatory | `test-pack/no-squid-conf` | `host-squid-conf` | no Squid config Squid's config is refused by the test pack |",
    );
    expect(result.stdout).toContain("| advisory | `test-pack/note-directories` | `host-backups` |");
    const preview = JSON.parse(readFileSync(out, "utf8")) as { status: string; violations: unknown[] };
    expect(preview.status).toBe("violations");
    expect(preview.violations).toHaveLength(2);
  }, 600_000);

  it("a malformed stack file is refused naming the key (exit 1)", async () => {
    const result = await previewPlatform({
      AGENT_SANDBOX_CONFIG: await localStackFile("bad", { squidPort: 70000 }),
    });
    expect(result.code).toBe(1);
    expect(result.stderr).toMatch(/preview:platform: .*agent-sandbox:host\.squidPort/s);
  });

  it("a gcp stack without PULUMI_BACKEND_URL is refused naming it, before the CLI runs (exit 1)", async () => {
    const file = path.join(root, "Pulumi.prod.yaml");
    await fs.writeFile(
      file,
      "config:\n  agent-sandbox:target: gcp\n  agent-sandbox:gcp:\n    project: my-sandboxes\n    bucket: my-sandboxes-data\n    domain: sandboxes.example.test\n",
    );
    const result = await previewPlatform({ AGENT_SANDBOX_CONFIG: file, AGENT_SANDBOX_STACK: "prod" });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(
      `preview:platform: ${file} has agent-sandbox:target=gcp: set PULUMI_BACKEND_URL to the state backend that holds its platform stack prod`,
    );
  });

  it("an unknown flag is a usage error (exit 2)", async () => {
    const result = await previewPlatform({}, "--markdwon", "x.md");
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("usage: npm run preview:platform -- [--markdown FILE] [--json FILE]");
    expect(existsSync(path.join(REPO_ROOT, "x.md"))).toBe(false);
  });
});
