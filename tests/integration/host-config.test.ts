// host-config/ files as the GCP host will load them.
import { execFile } from "node:child_process";
import { mkdtempSync, promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { renderHostConfig } from "../../lib/host/render.js";
import { renderSquidConfig, validateSquidConfig } from "../../lib/host/squid.js";
import { REPO_ROOT } from "../../lib/toolchain.js";

const run = promisify(execFile);
const unitsDir = path.join(REPO_ROOT, "host-config", "systemd");

async function verify(files: string[]): Promise<{ code: number; output: string }> {
  try {
    const { stdout, stderr } = await run("systemd-analyze", ["verify", "--man=no", ...files]);
    return { code: 0, output: `${stdout}${stderr}`.trim() };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, output: `${e.stdout}${e.stderr}`.trim() };
  }
}

describe("systemd units for the GCP host", () => {
  it("pass systemd-analyze verify without a warning", async () => {
    const units = (await fs.readdir(unitsDir)).filter((f) => f.endsWith(".service"));
    expect(units.sort()).toEqual([
      "agent-sandbox-caddy.service",
      "agent-sandbox-firewall.service",
      "agent-sandbox-runtime.service",
      "agent-sandbox-squid.service",
    ]);
    // As the startup script writes them: the front door's with its config's path filled in.
    const dir = mkdtempSync(path.join(os.tmpdir(), "units-rendered-"));
    const files = await Promise.all(
      units.map(async (unit) => {
        const file = path.join(dir, unit);
        const values: Record<string, string> =
          unit === "agent-sandbox-caddy.service"
            ? { config: "/etc/agent-sandbox/caddy/front-door.json" }
            : {};
        await fs.writeFile(file, renderHostConfig(`systemd/${unit}`, values));
        return file;
      }),
    );
    expect(await verify(files)).toEqual({ code: 0, output: "" });
    await fs.rm(dir, { recursive: true });
  });

  it("the check itself catches a broken unit", async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "units-"));
    const broken = path.join(dir, "agent-sandbox-broken.service");
    await fs.writeFile(broken, "[Service]\nExecStart=/nonexistent/squid\nRestart=sometimes\n");
    const result = await verify([broken]);
    await fs.rm(dir, { recursive: true });
    expect(result.output).toMatch(/nonexistent|Restart/);
  });

  it("the squid unit runs the same config file the host baseline renders and validates", async () => {
    const unit = await fs.readFile(path.join(unitsDir, "agent-sandbox-squid.service"), "utf8");
    expect(unit).toContain("-f /etc/agent-sandbox/squid/squid.conf");
    const dir = mkdtempSync(path.join(os.tmpdir(), "squid-conf-"));
    const options = { port: 3128, configDir: dir, logDir: dir, runDir: dir };
    await fs.mkdir(path.join(dir, "squid", "tenants"), { recursive: true });
    await fs.writeFile(path.join(dir, "squid", "tenants", "00-baseline.conf"), "# baseline\n");
    const config = renderSquidConfig(options);
    expect(config).toMatch(
      /http_access deny CONNECT !SSL_ports[\s\S]*include .*\/tenants\/\*\.conf\n\nhttp_access deny all\n$/,
    );
    await fs.writeFile(path.join(dir, "squid.conf"), config);
    await expect(validateSquidConfig(path.join(dir, "squid.conf"))).resolves.toBeUndefined();
    await fs.writeFile(path.join(dir, "squid", "tenants", "bad.conf"), "http_access allow no_such_acl\n");
    await expect(validateSquidConfig(path.join(dir, "squid.conf"))).rejects.toThrow(
      /squid rejects .*squid\.conf/,
    );
    await fs.rm(dir, { recursive: true });
  });
});
