// `npm run orphans -- [--remove] [--json] [--grace SECONDS]`: the orphan sweep. Reports the
// containers, networks, volumes, iptables rules, Squid fragments and snapshot images of this platform
// instance (the one AGENT_SANDBOX_CONFIG or AGENT_SANDBOX_STACK configures) that no tenant stack owns;
// with --remove, removes them. Other instances' resources and live tenants are never touched
// (docs/operations.md "Orphan sweep").
// Exit 0: nothing found, or all of it removed; 3: orphans found and left; 1: failed; 2: bad usage.
import { existsSync } from "node:fs";
import * as path from "node:path";
import { parseArgs } from "node:util";
import { dockerClient } from "../lib/docker-client.js";
import { openDatabase, type Database } from "../runtime/store/db.js";
import { loadStackConfig } from "../runtime/stack-file.js";
import {
  DEFAULT_ORPHAN_GRACE_SECONDS,
  orphanReportText,
  orphanSweepOptions,
  sweepOrphans,
} from "../runtime/tenants/orphans.js";

const USAGE = "usage: npm run orphans -- [--remove] [--json] [--grace SECONDS]";
const EXIT = { ok: 0, failed: 1, usage: 2, found: 3 } as const;

function flags() {
  try {
    const { values } = parseArgs({
      options: {
        remove: { type: "boolean", default: false },
        json: { type: "boolean", default: false },
        grace: { type: "string", default: String(DEFAULT_ORPHAN_GRACE_SECONDS) },
        help: { type: "boolean", default: false },
      },
      strict: true,
      allowPositionals: false,
    });
    if (values.help) {
      console.log(USAGE);
      process.exit(EXIT.ok);
    }
    const grace = Number(values.grace);
    if (!/^\d+$/.test(values.grace) || !Number.isSafeInteger(grace))
      throw new Error(
        `--grace must be a whole number of seconds (0 or more), got ${JSON.stringify(values.grace)}`,
      );
    return { remove: values.remove, json: values.json, graceSeconds: grace };
  } catch (error) {
    console.error(`orphans: ${(error as Error).message}\n${USAGE}`);
    process.exit(EXIT.usage);
  }
}

/**
 * The runtime's database, to leave projects with an open operation alone: Postgres when DATABASE_URL is
 * set, else the embedded one, unless the running runtime holds it (then stack locks and the grace period
 * are the guard, and the report says so).
 */
async function database(dataDir: string, notes: string[]): Promise<Database | undefined> {
  const embedded = path.join(dataDir, "db");
  if (!process.env.DATABASE_URL && !existsSync(embedded)) return undefined;
  try {
    return await openDatabase({ url: process.env.DATABASE_URL, dataDir: embedded });
  } catch (error) {
    notes.push(`the database could not be opened: ${(error as Error).message}`);
    return undefined;
  }
}

async function main(): Promise<number> {
  const { remove, json, graceSeconds } = flags();
  const { config } = loadStackConfig();
  const notes: string[] = [];
  const db = await database(config.host.dataDir, notes);
  try {
    const docker = dockerClient({ DOCKER_HOST: `unix://${config.host.dockerSocket}` });
    const report = await sweepOrphans(orphanSweepOptions(config, docker, { db, remove, graceSeconds }));
    report.notes.unshift(...notes);
    process.stdout.write(json ? `${JSON.stringify(report, null, 2)}\n` : orphanReportText(report));
    if (report.orphans.some((orphan) => orphan.removed === false && remove)) return EXIT.failed;
    return report.orphans.length > 0 && !remove ? EXIT.found : EXIT.ok;
  } finally {
    await db?.close();
  }
}

main().then(
  (code) => process.exit(code),
  (error: Error) => {
    console.error(`orphans: ${error.message}`);
    process.exit(EXIT.failed);
  },
);
