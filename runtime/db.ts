import { PGlite } from "@electric-sql/pglite";
import { mkdirSync } from "node:fs";
import pg from "pg";

/** The slice of a Postgres client the runtime uses; PGlite and node-postgres both provide it. */
export interface Database {
  readonly kind: "pglite" | "postgres";
  /** Where the data lives, without credentials (safe to log and to show in `/healthz`). */
  readonly location: string;
  query<Row = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<{ rows: Row[] }>;
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
    await pool.query("select 1").catch((error: Error) => {
      throw new Error(`cannot reach Postgres at ${redactUrl(options.url!)}: ${error.message}`);
    });
    return {
      kind: "postgres",
      location: redactUrl(options.url),
      query: async <Row>(sql: string, params?: unknown[]) => ({
        rows: (await pool.query(sql, params)).rows as Row[],
      }),
      close: () => pool.end(),
    };
  }
  mkdirSync(options.dataDir, { recursive: true });
  const db = await PGlite.create(options.dataDir);
  return {
    kind: "pglite",
    location: options.dataDir,
    query: async <Row>(sql: string, params?: unknown[]) => ({
      rows: (await db.query<Row>(sql, params)).rows,
    }),
    close: () => db.close(),
  };
}
