// Benchmark: keystroke round trip (a key typed at the shell prompt until its echo comes back) and attach
// time, through the terminal proxy (WebSocket, ticket, audit, recording) against the same sandbox's
// tmux session reached directly through the engine's exec API, in one run. Prints figures; asserts
// nothing (npm run bench). Targets (issue 5): <= 2 ms p50 added per keystroke; attach <= 300 ms.
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import WebSocket from "ws";
import { dockerClient } from "../../lib/docker-client.js";
import { openDatabase } from "../../runtime/store/db.js";
import { squidPaths, squidProxy } from "../../lib/host/squid.js";
import { migrate } from "../../runtime/store/migrations.js";
import { dockerAttacher, type TerminalAttachment } from "../../runtime/terminal/attach.js";
import { TerminalProxy } from "../../runtime/terminal/proxy.js";
import { TicketIssuer } from "../../runtime/terminal/tickets.js";
import { createTenant, destroyTenant, type TenantStackOptions } from "../../runtime/tenants/stack.js";
import { buildSandboxImage } from "../../sandbox-image/build.js";
import { freePort, isolatedHostConfig } from "../helpers/host.js";
import { report } from "./report.js";

const KEYS = Number(process.env.BENCH_KEYS ?? 300);
const ATTACHES = Number(process.env.BENCH_ATTACHES ?? 20);

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
};
const ms = (n: number) => `${n.toFixed(2)} ms`;
const now = () => Number(process.hrtime.bigint()) / 1e6;

/** A byte pipe both ways: the direct exec stream or the proxy's WebSocket. */
interface Pipe {
  send(data: string): void;
  onData(listener: (chunk: Buffer) => void): void;
  close(): void;
}

/** Types KEYS letters one at a time, each after the previous one's echo arrived; then erases them. */
async function keystrokes(pipe: Pipe): Promise<number[]> {
  let waiting: { key: string; resolve: () => void } | undefined;
  let seen = "";
  pipe.onData((chunk) => {
    seen += chunk.toString("latin1");
    if (waiting && seen.includes(waiting.key)) {
      const { resolve } = waiting;
      waiting = undefined;
      resolve();
    }
  });
  const samples: number[] = [];
  for (let i = 0; i < KEYS; i++) {
    const key = String.fromCharCode(97 + (i % 26));
    seen = "";
    const echoed = new Promise<void>((resolve) => (waiting = { key, resolve }));
    const started = now();
    pipe.send(key);
    await echoed;
    samples.push(now() - started);
    if (i % 50 === 49) {
      pipe.send("\x15"); // Ctrl-U: keep the line short
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
  pipe.send("\x15");
  return samples;
}

const host = await isolatedHostConfig();
const dir = mkdtempSync(path.join(os.tmpdir(), "bench-terminal-"));
await squidProxy({ port: host.squidPort, ...host }).ensure(() => undefined);
const image = (await buildSandboxImage({ base: "local", log: () => undefined })).tag;
const projectId = randomUUID();
const userId = randomUUID();
const stack: TenantStackOptions = {
  backendUrl: `file://${dir}`,
  workRoot: path.join(dir, "work"),
  passphrase: "benchmark",
};
await createTenant(
  {
    projectId,
    ownerId: userId,
    mode: "local",
    image,
    subnet: "10.233.7.0/24",
    sshHostPort: 27690,
    allowlist: ["example.test"],
    host: {
      squidPort: host.squidPort,
      squidConfigFile: squidPaths(host).config,
      squidFragmentsDir: squidPaths(host).fragmentsDir,
      backupRoot: path.join(host.dataDir, "backups"),
    },
  },
  stack,
);

const db = await openDatabase({ dataDir: path.join(dir, "db") });
await migrate(db);
await db.query("insert into users (id, email, password_hash) values ($1, 'bench@example.test', 'x')", [
  userId,
]);
await db.query("insert into tenants (project_id, owner_id, spec, state) values ($1, $2, '{}', 'running')", [
  projectId,
  userId,
]);
await db.query("insert into projects (id, user_id, name, ssh_private_key) values ($1, $2, 'bench', 'x')", [
  projectId,
  userId,
]);
const tickets = new TicketIssuer(new Uint8Array(32).fill(7));
const attacher = dockerAttacher(dockerClient());
const proxy = new TerminalProxy({
  db,
  tickets,
  attacher,
  recordingsDir: path.join(dir, "casts"),
  // A benchmark types faster than a person; the limit is not what is measured.
  inputRate: { bytesPerSecond: 1 << 30, burstBytes: 1 << 30 },
});
const port = await proxy.listen(await freePort(), "127.0.0.1");

const viaProxy = async (): Promise<{ pipe: Pipe; attachMs: number }> => {
  const started = now();
  const ws = new WebSocket(
    `ws://127.0.0.1:${port}/terminal/${projectId}?token=${tickets.issue(userId, projectId)}`,
  );
  const first = new Promise<void>((resolve) => ws.once("message", () => resolve()));
  await first;
  const attachMs = now() - started;
  return {
    attachMs,
    pipe: {
      send: (data) => ws.send(data),
      onData: (listener) => ws.on("message", (data: Buffer) => listener(Buffer.from(data))),
      close: () => ws.close(),
    },
  };
};
const direct = async (): Promise<{ pipe: Pipe; attachMs: number }> => {
  const started = now();
  const attachment: TerminalAttachment = await attacher.attach(projectId);
  await new Promise<void>((resolve) => attachment.stream.once("data", () => resolve()));
  const attachMs = now() - started;
  return {
    attachMs,
    pipe: {
      send: (data) => void attachment.stream.write(data),
      onData: (listener) => attachment.stream.on("data", listener),
      close: () => attachment.detach(),
    },
  };
};

try {
  // Warm-up: creates the tmux session, JIT-compiles both paths.
  for (const open of [direct, viaProxy]) {
    const { pipe } = await open();
    await new Promise((resolve) => setTimeout(resolve, 500));
    pipe.close();
  }
  const attach = { direct: [] as number[], proxy: [] as number[] };
  for (let i = 0; i < ATTACHES; i++) {
    for (const [name, open] of [
      ["direct", direct],
      ["proxy", viaProxy],
    ] as const) {
      const { pipe, attachMs } = await open();
      attach[name].push(attachMs);
      pipe.close();
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  const keys: Record<"direct" | "proxy", number[]> = { direct: [], proxy: [] };
  for (const [name, open] of [
    ["direct", direct],
    ["proxy", viaProxy],
  ] as const) {
    const { pipe } = await open();
    await new Promise((resolve) => setTimeout(resolve, 300)); // the redraw passes
    keys[name] = await keystrokes(pipe);
    pipe.close();
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  const row = (label: string, values: number[]) =>
    `  ${label.padEnd(38)} p50 ${ms(percentile(values, 50)).padStart(9)}  p99 ${ms(percentile(values, 99)).padStart(9)}`;
  console.log(
    `Terminal: ${KEYS} keystrokes (each echoed by bash in tmux before the next) and ${ATTACHES} attaches per path, ${os.cpus().length} cores`,
  );
  console.log(row("keystroke, direct exec (baseline)", keys.direct));
  console.log(row("keystroke, through the proxy", keys.proxy));
  console.log(
    `  added by the proxy: p50 ${ms(percentile(keys.proxy, 50) - percentile(keys.direct, 50))}, p99 ${ms(percentile(keys.proxy, 99) - percentile(keys.direct, 99))}; target <= 2 ms p50`,
  );
  console.log(row("attach to first byte, direct exec", attach.direct));
  console.log(row("attach to first byte, proxy (ticket+db)", attach.proxy));
  console.log(`  target: attach <= 300 ms (proxy p50 ${ms(percentile(attach.proxy, 50))})`);
  const figure = (name: string, through: number[], direct: number[], goal: string) => ({
    figure: name,
    unit: "ms" as const,
    p50: percentile(through, 50),
    tail: { label: "p99" as const, value: percentile(through, 99) },
    baseline: { label: "direct docker exec", p50: percentile(direct, 50) },
    goal,
    samples: through.length,
  });
  report("terminal-latency", [
    figure("keystroke echo through the terminal proxy", keys.proxy, keys.direct, "≤ 2 ms added p50"),
    figure("terminal attach to first byte (ticket + db)", attach.proxy, attach.direct, "≤ 300 ms"),
  ]);
} finally {
  await proxy.close();
  await db.close();
  await destroyTenant(projectId, stack);
  rmSync(dir, { recursive: true, force: true });
}
