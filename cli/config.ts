// The user's sbx state: the runtime's address, the login's tokens and, per repository, its project and the
// project's SSH key. Everything lives in `$XDG_CONFIG_HOME/agent-sandbox` (or `~/.config/agent-sandbox`),
// the directory 0700 and every file 0600, written whole (a temp file renamed) so a crash leaves no half file.
import { randomBytes } from "node:crypto";
import * as fs from "node:fs/promises";
import * as os from "node:os";
import * as path from "node:path";

export interface RepoLink {
  readonly project_id: string;
  /** The directory name inside the sandbox: /workspace/<repo>. */
  readonly repo: string;
  /** The protected_paths `sbx start` set on the project (relative to /home/agent). */
  readonly protected?: readonly string[];
  /** The devcontainer image `sbx start` gave the project. */
  readonly image?: string;
}

export interface CliConfig {
  api?: string;
  email?: string;
  access_token?: string;
  refresh_token?: string;
  /** Absolute repository path → its project. */
  repos?: Record<string, RepoLink>;
}

export function configDir(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.XDG_CONFIG_HOME || path.join(os.homedir(), ".config");
  return path.join(base, "agent-sandbox");
}

async function writePrivate(file: string, content: string): Promise<void> {
  await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
  const temp = `${file}.${randomBytes(4).toString("hex")}.tmp`;
  await fs.writeFile(temp, content, { mode: 0o600 });
  await fs.chmod(temp, 0o600);
  await fs.rename(temp, file);
}

export class ConfigStore {
  constructor(readonly dir: string = configDir()) {}

  get file(): string {
    return path.join(this.dir, "config.json");
  }

  async load(): Promise<CliConfig> {
    const text = await fs.readFile(this.file, "utf8").catch((error: NodeJS.ErrnoException) => {
      if (error.code === "ENOENT") return "{}";
      throw error;
    });
    return JSON.parse(text) as CliConfig;
  }

  async save(config: CliConfig): Promise<void> {
    await fs.mkdir(this.dir, { recursive: true, mode: 0o700 });
    await fs.chmod(this.dir, 0o700);
    await writePrivate(this.file, `${JSON.stringify(config, null, 2)}\n`);
  }

  async update(change: (config: CliConfig) => void): Promise<CliConfig> {
    const config = await this.load();
    change(config);
    await this.save(config);
    return config;
  }

  keyFile(projectId: string): string {
    return path.join(this.dir, "keys", projectId);
  }

  async saveKey(projectId: string, privateKey: string): Promise<string> {
    const file = this.keyFile(projectId);
    await writePrivate(file, privateKey.endsWith("\n") ? privateKey : `${privateKey}\n`);
    return file;
  }

  /** The project's known_hosts: its sandbox's current host key (`sbx` rewrites it as the key changes). */
  knownHostsFile(projectId: string): string {
    return path.join(this.dir, "keys", `${projectId}.known_hosts`);
  }

  async saveKnownHosts(projectId: string, text: string): Promise<string> {
    const file = this.knownHostsFile(projectId);
    await writePrivate(file, text);
    return file;
  }

  async hasKey(projectId: string): Promise<boolean> {
    return fs.access(this.keyFile(projectId)).then(
      () => true,
      () => false,
    );
  }

  async forget(projectId: string): Promise<void> {
    await fs.rm(this.keyFile(projectId), { force: true });
    await fs.rm(this.knownHostsFile(projectId), { force: true });
    await this.update((config) => {
      for (const [repo, link] of Object.entries(config.repos ?? {}))
        if (link.project_id === projectId) delete config.repos![repo];
    });
  }
}
