import { createHash } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import * as path from "node:path";

/** Directory names never part of a release or an image context. */
const SKIPPED = new Set(["node_modules", ".git", "dist", ".data", "coverage", "test-artifacts"]);

/** Every file under `root` among `entries` (files or directories), relative to `root`, sorted. */
export function listFiles(root: string, entries: readonly string[]): string[] {
  const files: string[] = [];
  const walk = (relative: string) => {
    const absolute = path.join(root, relative);
    const stat = statSync(absolute);
    if (stat.isDirectory()) {
      for (const child of readdirSync(absolute)) if (!SKIPPED.has(child)) walk(path.join(relative, child));
    } else if (stat.isFile()) {
      files.push(relative);
    }
  };
  for (const entry of entries) walk(entry);
  return files.sort();
}

/**
 * A short content digest of files (path, mode, bytes) plus extra text such as build arguments: the tag of
 * an image or the name of a release, so an unchanged input is never rebuilt or re-uploaded.
 */
export function contentDigest(root: string, entries: readonly string[], extra = ""): string {
  const hash = createHash("sha256");
  for (const file of listFiles(root, entries)) {
    const absolute = path.join(root, file);
    hash.update(`${file}\0${(statSync(absolute).mode & 0o777).toString(8)}\0`);
    hash.update(readFileSync(absolute));
    hash.update("\0");
  }
  hash.update(extra);
  return hash.digest("hex").slice(0, 16);
}
