import { randomBytes } from "node:crypto";
import { promises as fs } from "node:fs";
import * as path from "node:path";

/**
 * Replaces the file in one rename, so a reader (Squid reloading, say) never sees a half-written file,
 * and a crash leaves the old content or the new one, never a mix.
 */
export async function writeFileAtomic(target: string, content: string, mode: string): Promise<void> {
  await fs.mkdir(path.dirname(target), { recursive: true, mode: 0o755 });
  const temp = path.join(
    path.dirname(target),
    `.${path.basename(target)}.${randomBytes(6).toString("hex")}.tmp`,
  );
  const handle = await fs.open(temp, "wx", parseInt(mode, 8));
  try {
    await handle.writeFile(content);
    await handle.chmod(parseInt(mode, 8));
    await handle.sync();
  } finally {
    await handle.close();
  }
  try {
    await fs.rename(temp, target);
  } catch (error) {
    await fs.rm(temp, { force: true });
    throw error;
  }
}

/** Whether `name` is a temporary file {@link writeFileAtomic} made for `target` (a write killed before its rename). */
export function isAtomicTemp(name: string, target: string): boolean {
  const prefix = `.${path.basename(target)}.`;
  return (
    name.startsWith(prefix) &&
    name.endsWith(".tmp") &&
    /^[0-9a-f]{12}$/.test(name.slice(prefix.length, -".tmp".length))
  );
}

/** Whether `file` exists (any type); false for a path that cannot be reached. */
export async function exists(file: string): Promise<boolean> {
  try {
    await fs.access(file);
    return true;
  } catch {
    return false;
  }
}
