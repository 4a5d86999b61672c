// The runtime's database on both backends it supports: embedded PGlite and a real Postgres server.
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import pg from "pg";
import { openDatabase, redactUrl } from "../../runtime/store/db.js";
import { freshPostgresDatabase } from "../helpers/postgres.js";
import { REPO_ROOT } from "../../lib/toolchain.js";

const postgresUrl = process.env.TEST_DATABASE_URL;

describe.each([
  ["pglite", undefined],
  ["postgres", postgresUrl],
])("database on %s", (kind, url) => {
  it("opens, queries with parameters, and reports where it lives without credentials", async () => {
    if (kind === "postgres" && !url) {
      throw new Error("TEST_DATABASE_URL is not set: run the suite with 'npm test', which starts Postgres");
    }
    const dataDir = mkdtempSync(path.join(os.tmpdir(), "db-test-"));
    const db = await openDatabase({ url, dataDir: path.join(dataDir, "db") });
    try {
      expect(db.kind).toBe(kind);
      const { rows } = await db.query<{ sum: number }>("select ($1::int + $2::int) as sum", [2, 3]);
      expect(rows).toEqual([{ sum: 5 }]);
      expect(db.location).toBe(kind === "pglite" ? path.join(dataDir, "db") : redactUrl(url!));
    } finally {
      await db.close();
      rmSync(dataDir, { recursive: true, force: true });
    }
  });
});

describe("a Postgres that drops the runtime's idle connections (restart, administrator)", () => {
  it("does not crash the process; the next query gets a new connection", async () => {
    if (!postgresUrl) throw new Error("TEST_DATABASE_URL is not set: run the suite with 'npm test'");
    const own = await freshPostgresDatabase(postgresUrl);
    const dir = mkdtempSync(path.join(os.tmpdir(), "db-dropped-"));
    const db = await openDatabase({ url: own.url, dataDir: dir });
    try {
      await Promise.all([db.query("select 1"), db.query("select 2"), db.query("select 3")]);
      const admin = new pg.Client({ connectionString: postgresUrl });
      await admin.connect();
      const { rows } = await admin.query<{ killed: boolean }>(
        "select pg_terminate_backend(pid) as killed from pg_stat_activity where datname = $1",
        [new URL(own.url).pathname.slice(1)],
      );
      await admin.end();
      expect(rows.length).toBeGreaterThan(0);
      expect(rows.every((r) => r.killed)).toBe(true);
      // The server's notice reaches the idle clients; an unhandled one would fail this file (vitest).
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect((await db.query<{ one: number }>("select 1 as one")).rows).toEqual([{ one: 1 }]);
    } finally {
      await db.close();
      await own.drop();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("database options", () => {
  it("refuses a non-Postgres URL and hides passwords in errors", async () => {
    await expect(openDatabase({ url: "mysql://u:secret@h/db", dataDir: "/nonexistent" })).rejects.toThrow(
      "DATABASE_URL must be a postgres:// URL, got mysql://u:***@h/db",
    );
    expect(redactUrl("postgres://u:secret@127.0.0.1:5/db")).toBe("postgres://u:***@127.0.0.1:5/db");
  });

  it("names an unreachable server without its password", async () => {
    const error = await openDatabase({
      url: "postgres://u:secret@127.0.0.1:1/db",
      dataDir: "/nonexistent",
    }).catch((e: Error) => e);
    expect(String(error)).toMatch(/cannot reach Postgres at postgres:\/\/u:\*\*\*@127\.0\.0\.1:1\/db/);
    expect(String(error)).not.toContain("secret");
  });
});

describe("the embedded database is one process's", () => {
  it("a second process cannot open it while the first has it; after the first is killed, it can", async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), "pglite-lock-"));
    const dataDir = path.join(dir, "db");
    const holder = spawn(
      process.execPath,
      [
        "--import",
        "tsx",
        "-e",
        `import("./runtime/store/db.ts").then(async ({ openDatabase }) => { await openDatabase({ dataDir: ${JSON.stringify(dataDir)} }); console.log("open"); setInterval(() => {}, 1000); })`,
      ],
      { cwd: REPO_ROOT, stdio: ["ignore", "pipe", "inherit"] },
    );
    try {
      await new Promise<void>((resolve, reject) => {
        holder.stdout!.on("data", (chunk: Buffer) => chunk.toString().includes("open") && resolve());
        holder.once("exit", (code) => reject(new Error(`the holder exited (${code})`)));
      });
      await expect(openDatabase({ dataDir })).rejects.toThrow(
        `the embedded database ${dataDir} is open in process ${holder.pid} (the runtime?); stop it first, or run against Postgres with DATABASE_URL`,
      );
      holder.kill("SIGKILL"); // leaves its lock file behind
      await new Promise((resolve) => holder.once("exit", resolve));
      const db = await openDatabase({ dataDir });
      expect((await db.query<{ n: number }>("select 1 as n")).rows).toEqual([{ n: 1 }]);
      await db.close();
      expect(existsSync(`${dataDir}.lock`)).toBe(false);
    } finally {
      holder.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
