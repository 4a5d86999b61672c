// Issue 20: the runtime's backups of kubernetes projects (runtime/kubernetes/backup.ts) must leave out what the
// container's daemon leaves out, so a home backed up from a Pod and one backed up in a container are the same
// backup. The daemon is Python in the image; its list is read from the script itself.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { BACKUP_EXCLUDES, NETWORK_FLAGS } from "../../runtime/kubernetes/backup.js";
import { kubernetesProjects } from "../../runtime/kubernetes/sandbox.js";
import { reconcilerOptions } from "../../runtime/reconciler/options.js";
import { gcpTenantCloud, kubernetesBackupsOf } from "../../runtime/tenants/config.js";
import { parseStackConfig } from "../../stacks/config.js";

const DAEMON = path.join(REPO_ROOT, "sandbox-image/rootfs/usr/local/sbin/sandbox-backup");

describe("the runtime's backups of a Pod's home", () => {
  /** A list the daemon's script assigns (`NAME = [...]`, on one line). */
  const daemonList = (name: string) => {
    const line = readFileSync(DAEMON, "utf8")
      .split("\n")
      .find((l) => l.startsWith(`${name} = `));
    expect(line, `sandbox-backup has ${name}`).toBeDefined();
    return JSON.parse(line!.slice(`${name} = `.length)) as string[];
  };

  it("leave out exactly what sandbox-backup leaves out, and give up on the bucket as soon", () => {
    expect(BACKUP_EXCLUDES).toEqual(daemonList("EXCLUDES"));
    expect(NETWORK_FLAGS).toEqual(daemonList("NETWORK_FLAGS"));
  });

  it("are the runtime's on GCP with a cluster: its reconciler takes them, to the bucket's endpoint", () => {
    const dataDir = mkdtempSync(path.join(os.tmpdir(), "kubernetes-backups-"));
    const config = parseStackConfig(
      {
        "agent-sandbox:target": "gcp",
        "agent-sandbox:host": { dataDir },
        "agent-sandbox:gcp": {
          project: "sandbox-prod",
          bucket: "sandbox-bucket",
          domain: "sandboxes.example.test",
        },
        "agent-sandbox:tenants": {
          kubernetes: { kubeconfigFile: "/etc/agent-sandbox/kubeconfig", runtimeClassName: "gvisor" },
        },
      },
      "Pulumi.prod.yaml",
    );
    const settings = reconcilerOptions(config);
    expect(settings.kubernetesBackups).toBeDefined();
    // Google's endpoint is rclone's own default; an emulator's is passed on.
    expect(settings.kubernetesBackups?.options.storageEndpoint).toBeUndefined();
    const projects = kubernetesProjects("/etc/agent-sandbox/kubeconfig");
    const emulated = kubernetesBackupsOf(config, projects, gcpTenantCloud(config, {}), {
      STORAGE_EMULATOR_HOST: "127.0.0.1:4443",
    });
    expect(emulated?.options.storageEndpoint).toBe("http://127.0.0.1:4443");
    // The local target has no bucket, so no such backups (and no kubernetes projects).
    const local = parseStackConfig(
      { "agent-sandbox:target": "local", "agent-sandbox:host": { dataDir } },
      "f",
    );
    expect(reconcilerOptions(local).kubernetesBackups).toBeUndefined();
    rmSync(dataDir, { recursive: true, force: true });
  });
});
