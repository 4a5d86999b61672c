// bin/sbx runs the CLI's bundle (dist/cli/sbx.mjs, scripts/bundles.ts) only while no source it holds is newer,
// else the sources with tsx: an edit since the last set-up must never run yesterday's CLI. Checked on a copy of
// bin/sbx in a checkout of the test's own, whose bundle and sources each say which one ran.
import { execFileSync } from "node:child_process";
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLI_SOURCE_DIRS } from "../../scripts/bundles.js";
import { REPO_ROOT } from "../../lib/toolchain.js";

let root: string;
const bundle = () => path.join(root, "dist", "cli", "sbx.mjs");
const run = (...args: string[]) =>
  execFileSync(path.join(root, "bin", "sbx"), args, { encoding: "utf8" }).trim();
/** Sets a file's times `secondsAgo` in the past. */
const age = (file: string, secondsAgo: number) => {
  const at = new Date(Date.now() - secondsAgo * 1000);
  utimesSync(file, at, at);
};

beforeAll(() => {
  root = mkdtempSync(path.join(os.tmpdir(), "sbx-launcher-"));
  mkdirSync(path.join(root, "bin"));
  copyFileSync(path.join(REPO_ROOT, "bin", "sbx"), path.join(root, "bin", "sbx"));
  symlinkSync(path.join(REPO_ROOT, "node_modules"), path.join(root, "node_modules"));
  writeFileSync(path.join(root, "package.json"), '{"type":"module"}\n');
  for (const dir of CLI_SOURCE_DIRS) mkdirSync(path.join(root, dir), { recursive: true });
  writeFileSync(
    path.join(root, "cli", "main.ts"),
    'const said: string = "sources";\nconsole.log(said, process.argv.slice(2).join(" "));\n',
  );
  writeFileSync(path.join(root, "lib", "toolchain.ts"), "export {};\n");
  writeFileSync(path.join(root, "sdk", "src", "index.ts"), "export {};\n");
  writeFileSync(path.join(root, "mcp", "tools.ts"), "export {};\n");
  for (const dir of CLI_SOURCE_DIRS)
    for (const file of {
      cli: ["main.ts"],
      lib: ["toolchain.ts"],
      mcp: ["tools.ts"],
      "sdk/src": ["index.ts"],
    }[dir])
      age(path.join(root, dir, file), 60);
});

afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("bin/sbx", () => {
  it("runs the sources while no bundle was built", () => {
    expect(run("attach", "-w", "x")).toBe("sources attach -w x");
  });

  it("runs the bundle, with its arguments, once it is newer than every source", () => {
    mkdirSync(path.dirname(bundle()), { recursive: true });
    writeFileSync(bundle(), 'console.log("bundle", process.argv.slice(2).join(" "));\n');
    age(bundle(), 30);
    expect(run("attach", "-w", "x")).toBe("bundle attach -w x");
  });

  it.each(CLI_SOURCE_DIRS.map((dir) => [dir]))("runs the sources again after an edit under %s/", (dir) => {
    age(bundle(), 30);
    const edited = path.join(root, dir, "edited.ts");
    writeFileSync(edited, "export {};\n");
    try {
      expect(run("ports")).toBe("sources ports");
      // The next set-up's build touches the bundle (even when its text is unchanged): the bundle again.
      const now = new Date(Date.now() + 1000);
      utimesSync(bundle(), now, now);
      expect(run("ports")).toBe("bundle ports");
    } finally {
      rmSync(edited);
    }
  });

  it("a file that is not TypeScript source (a note, a README) does not send it to the sources", () => {
    const note = path.join(root, "cli", "NOTES.md");
    writeFileSync(note, "notes\n");
    const later = new Date(Date.now() + 5000);
    utimesSync(note, later, later);
    expect(run("ls")).toBe("bundle ls");
  });

  it("sbx --version prints the platform's version (package.json), from the checkout's own bin/sbx", () => {
    const version = (
      JSON.parse(readFileSync(path.join(REPO_ROOT, "package.json"), "utf8")) as { version: string }
    ).version;
    expect(execFileSync(path.join(REPO_ROOT, "bin", "sbx"), ["--version"], { encoding: "utf8" }).trim()).toBe(
      version,
    );
  });
});
