// A container's bind mounts are made of the paths the platform wrote, never of where a link in them points:
// a protected path's source lies in the tenant's home, where the agent can put one (the attack table's
// symlink/protected-path-bind-source runs it against a real start).
import { mkdtempSync, mkdirSync, rmSync, symlinkSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { assertBindSourcesHaveNoLinks } from "../../provider/resources/docker-container.js";

const root = mkdtempSync(path.join(os.tmpdir(), "bind-sources-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));
mkdirSync(path.join(root, "home", "repo", ".git", "hooks"), { recursive: true });
mkdirSync(path.join(root, "host", "repo", ".git", "hooks"), { recursive: true });
symlinkSync(path.join(root, "host"), path.join(root, "home", "swapped"));
symlinkSync(path.join(root, "host", "repo", ".git", "hooks"), path.join(root, "home", "hooks-link"));
const bind = (source: string) => [{ type: "bind", source, target: "/home/agent/x" }];

describe("bind mount sources", () => {
  it("takes a path with no link in it, and leaves volumes and tmpfs alone", async () => {
    await expect(assertBindSourcesHaveNoLinks(bind(`${root}/home/repo/.git/hooks`))).resolves.toBeUndefined();
    await expect(
      assertBindSourcesHaveNoLinks([{ type: "volume", source: "sbx-home-x", target: "/home/agent" }]),
    ).resolves.toBeUndefined();
  });

  it.each([
    ["a directory above it", `${root}/home/swapped/repo/.git/hooks`, `${root}/home/swapped`],
    ["its last name", `${root}/home/hooks-link`, `${root}/home/hooks-link`],
  ])("refuses a link at %s, naming it", async (_where, source, link) => {
    await expect(assertBindSourcesHaveNoLinks(bind(source))).rejects.toThrow(
      `bind mount /home/agent/x: ${link} is a symbolic link`,
    );
  });

  it("refuses a source that is not absolute and normalized (.. would be resolved by the engine)", async () => {
    await expect(assertBindSourcesHaveNoLinks(bind(`${root}/home/repo/../repo`))).rejects.toThrow(
      /is not an absolute, normalized path/,
    );
    await expect(assertBindSourcesHaveNoLinks(bind("relative/path"))).rejects.toThrow(/not an absolute/);
  });
});
