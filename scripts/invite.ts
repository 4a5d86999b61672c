// `npm run invite [-- --days N]`: prints one invite code for `agent-sandbox:runtime.registration: invite`.
// The code is signed with the runtime's token secret (AGENT_SANDBOX_JWT_SECRET, or jwt.secret in the
// stack's dataDir), so run it where the runtime runs, as the user that can read that secret. It writes
// nothing: the runtime records a code when it is redeemed, and each code makes one account.
import { parseArgs } from "node:util";
import { DEFAULT_INVITE_DAYS, InviteCodes } from "../runtime/api/invites.js";
import { tokenSecret } from "../runtime/secrets.js";
import { loadStackConfig } from "../runtime/stack-file.js";

try {
  const { values } = parseArgs({
    options: { days: { type: "string", default: String(DEFAULT_INVITE_DAYS) } },
  });
  const days = Number(values.days);
  const { config, file } = loadStackConfig();
  const code = new InviteCodes(tokenSecret(config.host.dataDir)).mint(days);
  if (config.runtime.registration !== "invite")
    console.error(
      `note: ${file} has agent-sandbox:runtime.registration: ${config.runtime.registration}; the code is only asked for in invite mode`,
    );
  console.error(
    `an invite for one account, valid for ${days} days; register with {"invite": "<code>", ...}:`,
  );
  console.log(code);
} catch (error) {
  console.error(`error: ${(error as Error).message}`);
  process.exit(1);
}
