import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import pg from "pg";
import { openDatabase, type Database } from "../../runtime/db.js";
import { migrate } from "../../runtime/migrations.js";

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

/**
 * A migrated database of the test's own, with a temporary directory for whatever else the test keeps:
 * PGlite in that directory, or for `postgres` a fresh database on the TEST_DATABASE_URL server.
 * `remove()` closes the database (again, if the test closed it) and deletes both.
 */
export async function ownTestDatabase(
  kind: "pglite" | "postgres",
  serverUrl: string | undefined,
  prefix: string,
): Promise<{ dir: string; db: Database; remove(): Promise<void> }> {
  if (kind === "postgres" && !serverUrl)
    throw new Error("TEST_DATABASE_URL is not set: run the suite with 'npm test'");
  const dir = mkdtempSync(path.join(os.tmpdir(), `${prefix}-`));
  const own = kind === "postgres" ? await freshPostgresDatabase(serverUrl!) : undefined;
  const db = await openDatabase({ url: own?.url, dataDir: path.join(dir, "db") });
  await migrate(db);
  return {
    dir,
    db,
    async remove() {
      await db.close().catch(() => undefined);
      await own?.drop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
