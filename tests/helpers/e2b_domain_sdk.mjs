// E2B's JavaScript SDK (npm `e2b`, unchanged) as an agent builder points it at a platform on a domain:
// E2B_DOMAIN and E2B_API_KEY alone (no E2B_API_URL, no E2B_SANDBOX_URL), so the SDK forms its own URLs,
// https://api.<domain> and https://49983-<id>.<domain>, and trusts the front door's certificates as any
// HTTPS client does. Prints one JSON line per step; e2b-domain.test.ts checks them.
import { Sandbox } from "e2b";

const print = (step, fields = {}) => console.log(JSON.stringify({ step, ...fields }));

const sandbox = await Sandbox.create({ metadata: { via: "domain", run: process.env.RUN_ID } });
print("created", { id: sandbox.sandboxId, envdApiUrl: sandbox.envdApiUrl, host3000: sandbox.getHost(3000) });

const ran = await sandbox.commands.run("echo hello-$((6*7)); whoami; pwd", {
  onStdout: () => undefined,
});
print("command", { stdout: ran.stdout, exitCode: ran.exitCode });

const failed = await sandbox.commands.run("exit 3").then(
  (result) => ({ exitCode: result.exitCode }),
  (error) => ({ error: error.constructor.name, exitCode: error.exitCode }),
);
print("failing command", failed);

await sandbox.files.write("over-the-domain.txt", "written through envd on the domain");
print("file", {
  text: await sandbox.files.read("over-the-domain.txt"),
  exists: await sandbox.files.exists("over-the-domain.txt"),
});

const listed = await Sandbox.list({ query: { metadata: { run: process.env.RUN_ID } } }).nextItems();
print("list", { ids: listed.map((item) => item.sandboxId) });

const again = await Sandbox.connect(sandbox.sandboxId);
print("connect", { stdout: (await again.commands.run("cat over-the-domain.txt")).stdout });

// Another port, as getHost names it: the owner's, through the same one-time session URL as a dev server's.
const server = await sandbox.commands.run(
  "mkdir -p site && cd site && echo served-by-the-sandbox > index.html && exec python3 -m http.server 3000",
  { background: true },
);
const site = `https://${sandbox.getHost(3000)}`;
const anonymous = (await fetch(`${site}/index.html`)).status;
const asked = await fetch(
  `https://${process.env.E2B_DOMAIN}/projects/${sandbox.sandboxId}/front-door/session`,
  {
    method: "POST",
    headers: { "x-api-key": process.env.E2B_API_KEY, "content-type": "application/json" },
    body: JSON.stringify({ port: 3000 }),
  },
);
const session = await asked.json();
const oneTime = new URL(session.url);
const redeemed = await fetch(`${site}${oneTime.pathname}${oneTime.search}`, { redirect: "manual" });
const cookie = (redeemed.headers.get("set-cookie") ?? "").split(";")[0];
let page = "";
for (let i = 0; i < 100 && !page; i++) {
  const answer = await fetch(`${site}/index.html`, { headers: { cookie } });
  if (answer.status === 200) page = await answer.text();
  else await new Promise((resolve) => setTimeout(resolve, 200));
}
// A client's own upstream header is not where the front door goes.
const injected = await fetch(`${site}/index.html`, { headers: { cookie, "x-sbx-upstream": "127.0.0.1:1" } });
print("port", {
  anonymous,
  session: asked.status,
  sessionHost: oneTime.hostname,
  redeemed: redeemed.status,
  page,
  injected: { status: injected.status, page: await injected.text() },
});
await server.kill();

print("killed", { killed: await Sandbox.kill(sandbox.sandboxId) });
