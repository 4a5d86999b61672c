// A reconciler on its own (the runtime service runs the same one in-process): several of these, on
// several hosts, can share one Postgres; leases hand a dead worker's operation to another.
import * as path from "node:path";
import { openDatabase } from "../store/db.js";
import { migrate } from "../store/migrations.js";
import { loadStackConfig } from "../stack-file.js";
import { reconcilerOptions } from "./options.js";
import { Reconciler } from "./reconciler.js";

const { config } = loadStackConfig();
const db = await openDatabase({
  url: process.env.DATABASE_URL,
  dataDir: path.join(config.host.dataDir, "db"),
});
await migrate(db);
const reconciler = new Reconciler({
  db,
  ...reconcilerOptions(config),
  log: (message, fields) =>
    console.log(JSON.stringify({ time: new Date().toISOString(), message, ...fields })),
});
reconciler.start();
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    void reconciler
      .stop()
      .then(() => db.close())
      .then(() => process.exit(0));
  });
}
