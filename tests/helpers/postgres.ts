import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import pg from "pg";
import { openDatabase, type Database } from "../../runtime/store/db.js";
import { migrate } from "../../runtime/store/migrations.js";
import { REPO_ROOT } from "../../lib/toolchain.js";

/** The databases the runtime supports, for `describe.each`. */
export const DATABASE_KINDS = ["pglite", "postgres"] as const;
export type DatabaseKind = (typeof DATABASE_KINDS)[number];

/**
 * The test Postgres server's URL: `npm test`'s (TEST_DATABASE_URL), else the one scripts/test-postgres.sh starts
 * or finds (a benchmark run outside `npm test`).
 */
export function testPostgresServerUrl(): string {
  return (
    process.env.TEST_DATABASE_URL ??
    execFileSync("bash", [path.join(REPO_ROOT, "scripts/test-postgres.sh")], { encoding: "utf8" })
      .trim()
      .split("\n")
      .at(-1)!
  );
}

/**
 * A new, empty database on the test Postgres server, for a test that needs the whole table to itself;
 * `drop()` removes it. (Other test files share the server's default database.)
 */
export async function freshPostgresDatabase(
  serverUrl: string,
): Promise<{ url: string; drop: () => Promise<void> }> {
  const name = `test_${randomBytes(6).toString("hex")}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    await admin.query(`create database ${name}`);
  } finally {
    await admin.end();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const client = new pg.Client({ connectionString: serverUrl });
      await client.connect();
      try {
        await client.query(`drop database if exists ${name} with (force)`);
      } finally {
        await client.end();
      }
    },
  };
}

export interface TestDatabase {
  readonly db: Database;
  /** The fresh Postgres database's URL (for a second connection or a spawned process); none on PGlite. */
  readonly url: string | undefined;
  /** A directory of the test's own for whatever else it keeps (PGlite lives in `db` below it). */
  readonly dir: string;
  /** Closes the database (again, if the test closed it), drops it, and deletes the directory. */
  close(): Promise<void>;
}

/**
 * A database of the test's own, migrated (unless `migrate` is false): PGlite in a new directory, or a
 * fresh database on the TEST_DATABASE_URL server. The directory is made in `under` (the temporary
 * directory unless given).
 */
export async function testDatabase(
  kind: DatabaseKind,
  options: { under?: string; migrate?: boolean } = {},
): Promise<TestDatabase> {
  const serverUrl = process.env.TEST_DATABASE_URL;
  if (kind === "postgres" && !serverUrl)
    throw new Error("TEST_DATABASE_URL is not set: run the suite with 'npm test'");
  const under = options.under ?? os.tmpdir();
  mkdirSync(under, { recursive: true });
  const dir = mkdtempSync(path.join(under, `db-${kind}-`));
  const own = kind === "postgres" ? await freshPostgresDatabase(serverUrl!) : undefined;
  let db: Database | undefined;
  const close = async () => {
    await db?.close().catch(() => undefined);
    await own?.drop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    db = await openDatabase({ url: own?.url, dataDir: path.join(dir, "db") });
    if (options.migrate !== false) await migrate(db);
  } catch (error) {
    await close();
    throw error;
  }
  return { db, url: own?.url, dir, close };
}
