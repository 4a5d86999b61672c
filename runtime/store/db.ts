import { createHash } from "node:crypto";
import { PGlite } from "@electric-sql/pglite";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import pg from "pg";
import { processAlive } from "../../lib/process.js";
import { inSpan, tracing } from "../../lib/telemetry.js";

/**
 * A query as a span (runtime/telemetry.ts): named by its verb, its statement's text (the platform's own SQL;
 * the values are parameters, never in it).
 */
const traced = <T>(sql: string, run: () => Promise<T>): Promise<T> =>
  !tracing()
    ? run()
    : inSpan(
        `db ${/^\s*(\w+)/.exec(sql)?.[1]?.toLowerCase() ?? "query"}`,
        { "db.system": "postgresql", "db.statement": sql.length > 500 ? `${sql.slice(0, 500)}…` : sql },
        run,
      );

/** A transaction as a span: its queries are its children. */
const tracedTransaction = <T>(run: () => Promise<T>): Promise<T> =>
  inSpan("db transaction", { "db.system": "postgresql" }, run);

/** What runs SQL: the database itself, or one transaction of it. */
export interface Queryable {
  query<Row = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<{ rows: Row[] }>;
}

/** The slice of a Postgres client the runtime uses; PGlite and node-postgres both provide it. */
export interface Database extends Queryable {
  readonly kind: "pglite" | "postgres";
  /** Where the data lives, without credentials (safe to log and to show in `/healthz`). */
  readonly location: string;
  /** Runs `fn` in one transaction: committed when it resolves, rolled back when it throws. */
  transaction<T>(fn: (tx: Queryable) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

export interface DatabaseOptions {
  /** `postgres://...` selects a Postgres server; absent, the embedded PGlite in `dataDir` is used. */
  readonly url?: string | undefined;
  readonly dataDir: string;
}

/** A Postgres URL with the password masked. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = "***";
    return parsed.toString();
  } catch {
    return "(unparseable DATABASE_URL)";
  }
}

export async function openDatabase(options: DatabaseOptions): Promise<Database> {
  if (options.url) {
    if (!/^postgres(ql)?:\/\//.test(options.url)) {
      throw new Error(`DATABASE_URL must be a postgres:// URL, got ${redactUrl(options.url)}`);
    }
    const pool = new pg.Pool({ connectionString: options.url, max: 10, connectionTimeoutMillis: 5_000 });
    // An idle connection the server drops (a Postgres restart, an administrator) is reported here; without
    // a listener it would be an uncaught error that ends the runtime. The pool discards that connection
    // and the next query opens another, or fails as "unavailable" (503) while the server is down.
    pool.on("error", () => undefined);
    await pool.query("select 1").catch(async (error: Error) => {
      await pool.end();
      throw new Error(`cannot reach Postgres at ${redactUrl(options.url!)}: ${error.message}`);
    });
    // Parameterised statements are prepared once per connection (named by their text's digest): the
    // hot reads (GET /projects, token checks) skip parsing and planning on every request.
    const names = new Map<string, string>();
    const statementName = (sql: string) => {
      let name = names.get(sql);
      if (!name) {
        name = `s${createHash("sha1").update(sql).digest("hex").slice(0, 16)}`;
        names.set(sql, name);
      }
      return name;
    };
    const query = <Row>(sql: string, params?: unknown[]) =>
      traced(sql, async () => ({
        rows: (params && params.length > 0
          ? await pool.query({ name: statementName(sql), text: sql, values: params })
          : await pool.query(sql)
        ).rows as Row[],
      }));
    return {
      kind: "postgres",
      location: redactUrl(options.url),
      query,
      transaction: (fn) =>
        tracedTransaction(async () => {
          const client = await pool.connect();
          try {
            await client.query("begin");
            const result = await fn({
              query: <Row>(sql: string, params?: unknown[]) =>
                traced(sql, async () => ({ rows: (await client.query(sql, params)).rows as Row[] })),
            });
            await client.query("commit");
            return result;
          } catch (error) {
            await client.query("rollback").catch(() => undefined);
            throw error;
          } finally {
            client.release();
          }
        }),
      close: () => pool.end(),
    };
  }
  mkdirSync(options.dataDir, { recursive: true });
  const releaseLock = lockEmbedded(options.dataDir);
  const db = await PGlite.create(options.dataDir).catch((error: unknown) => {
    releaseLock();
    throw error;
  });
  return {
    kind: "pglite",
    location: options.dataDir,
    query: <Row>(sql: string, params?: unknown[]) =>
      traced(sql, async () => ({ rows: (await db.query<Row>(sql, params)).rows })),
    transaction: (fn) =>
      tracedTransaction(() =>
        db.transaction((tx) =>
          fn({
            query: <Row>(sql: string, params?: unknown[]) =>
              traced(sql, async () => ({ rows: (await tx.query<Row>(sql, params)).rows })),
          }),
        ),
      ),
    close: async () => {
      await db.close();
      releaseLock();
    },
  };
}

/**
 * PGlite is one process's database: a second process opening the same directory (a CLI beside the
 * running runtime) would corrupt it. The directory's lock file names the process holding it; a holder
 * that no longer runs (killed) leaves a lock that the next opener takes over.
 */
function lockEmbedded(dataDir: string): () => void {
  const lock = `${dataDir.replace(/\/+$/, "")}.lock`;
  for (;;) {
    try {
      writeFileSync(lock, `${process.pid}\n`, { flag: "wx" });
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      const holder = Number.parseInt(readFileSync(lock, "utf8"), 10);
      if (holder && holder !== process.pid && processAlive(holder))
        throw new Error(
          `the embedded database ${dataDir} is open in process ${holder} (the runtime?); stop it first, ` +
            "or run against Postgres with DATABASE_URL",
        );
      rmSync(lock, { force: true }); // its holder is gone (or is us: a reopen after a crash in a test)
    }
  }
  return () => rmSync(lock, { force: true });
}

const UNAVAILABLE_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EPIPE",
  "57P01",
  "57P02",
  "57P03",
  "08000",
  "08001",
  "08003",
  "08006",
]);

/** True for errors that mean "the database cannot be reached", as opposed to a bad query. */
export function isDatabaseUnavailable(error: unknown): boolean {
  const e = error as { code?: string; message?: string };
  if (e?.code && UNAVAILABLE_CODES.has(e.code)) return true;
  return /PGlite is closed|Connection terminated|connection timeout|Client has encountered a connection error|pool after calling end/i.test(
    e?.message ?? "",
  );
}

/** One round trip to the database: it throws when the database cannot answer. */
export async function pingDatabase(db: Queryable): Promise<void> {
  await db.query("select 1");
}
