// Issue 20: the runtime's backups of kubernetes projects (runtime/kubernetes/backup.ts) must leave out what the
// container's daemon leaves out, so a home backed up from a Pod and one backed up in a container are the same
// backup. The daemon is Python in the image; its list is read from the script itself.
import { readFileSync } from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { REPO_ROOT } from "../../lib/toolchain.js";
import { BACKUP_EXCLUDES } from "../../runtime/kubernetes/backup.js";

const DAEMON = path.join(REPO_ROOT, "sandbox-image/rootfs/usr/local/sbin/sandbox-backup");

describe("the runtime's backups of a Pod's home", () => {
  it("leave out exactly what sandbox-backup leaves out", () => {
    const line = readFileSync(DAEMON, "utf8")
      .split("\n")
      .find((l) => l.startsWith("EXCLUDES = "));
    expect(line, "sandbox-backup has an EXCLUDES list").toBeDefined();
    const daemon = JSON.parse(line!.slice("EXCLUDES = ".length)) as string[];
    expect(BACKUP_EXCLUDES).toEqual(daemon);
  });
});
