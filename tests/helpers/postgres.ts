import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, promises as fs } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import pg from "pg";
import { openDatabase, type Database } from "../../runtime/store/db.js";
import { migrate, MIGRATIONS } from "../../runtime/store/migrations.js";
import { cacheRoot, REPO_ROOT } from "../../lib/toolchain.js";

/**
 * A PGlite data directory made once (per PGlite version and migration list, in the cache outside the
 * repository) that each test's database starts as a copy of. A new directory runs Postgres's initdb inside
 * PGlite's WebAssembly: 4.0 s of CPU here, against 0.3 s to open a copy (issue 39; the runtime's own first
 * start, database.test and `npm run local` still make theirs from nothing). Made in a directory of its own
 * and renamed into place, so files that start together may each make it and one wins.
 */
async function pgliteTemplate(migrated: boolean): Promise<string> {
  const pglite = JSON.parse(
    readFileSync(path.join(REPO_ROOT, "node_modules/@electric-sql/pglite/package.json"), "utf8"),
  ) as { version: string };
  const key = createHash("sha256")
    .update(JSON.stringify({ pglite: pglite.version, migrations: migrated ? MIGRATIONS : [] }))
    .digest("hex")
    .slice(0, 16);
  const root = path.join(cacheRoot(), "pglite-templates");
  const template = path.join(root, `${migrated ? "migrated" : "empty"}-${pglite.version}-${key}`);
  try {
    await fs.access(path.join(template, "PG_VERSION"));
    return template;
  } catch {
    // not made yet
  }
  await fs.mkdir(root, { recursive: true });
  const making = await fs.mkdtemp(path.join(root, ".making-"));
  try {
    const db = await openDatabase({ dataDir: path.join(making, "db") });
    try {
      if (migrated) await migrate(db);
    } finally {
      await db.close();
    }
    await fs.rename(path.join(making, "db"), template).catch((error: NodeJS.ErrnoException) => {
      // Another file made it first.
      if (error.code !== "ENOTEMPTY" && error.code !== "EEXIST") throw error;
    });
    // Those of other versions or migration lists (40 MB each) go once a day old: another checkout's run
    // may be copying one made today.
    for (const name of await fs.readdir(root)) {
      const other = path.join(root, name);
      if (other === template) continue; // and a making directory a killed file left
      // Gone already: another file that made its template at the same moment swept it.
      const stat = await fs.stat(other).catch(() => undefined);
      if (stat && Date.now() - stat.mtimeMs > 24 * 3600 * 1000)
        await fs.rm(other, { recursive: true, force: true });
    }
  } finally {
    await fs.rm(making, { recursive: true, force: true });
  }
  return template;
}

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
  const migrated = options.migrate !== false;
  let db: Database | undefined;
  const close = async () => {
    await db?.close().catch(() => undefined);
    await own?.drop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    if (kind === "pglite")
      await fs.cp(await pgliteTemplate(migrated), path.join(dir, "db"), { recursive: true });
    db = await openDatabase({ url: own?.url, dataDir: path.join(dir, "db") });
    // On a copy of the template the migrations are all recorded: this checks so and applies none.
    if (migrated) await migrate(db);
  } catch (error) {
    await close();
    throw error;
  }
  return { db, url: own?.url, dir, close };
}
