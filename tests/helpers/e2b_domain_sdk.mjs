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

print("killed", { killed: await Sandbox.kill(sandbox.sandboxId) });
