// Preloaded (`node --import`) by a child process that must reach the names of a domain of the test's own on
// this machine, as a client of a public front door would through DNS: every name under RESOLVE_TO_LOOPBACK
// resolves to 127.0.0.1, every other name as usual. Nothing else of the process is changed.
import dns from "node:dns";

const domain = process.env.RESOLVE_TO_LOOPBACK;
const lookup = dns.lookup;

dns.lookup = function lookupOnLoopback(hostname, options, callback) {
  const done = typeof options === "function" ? options : callback;
  const asked =
    typeof options === "function" ? {} : typeof options === "number" ? { family: options } : options;
  if (!domain || (hostname !== domain && !hostname.endsWith(`.${domain}`)))
    return lookup.call(this, hostname, options, callback);
  if (asked?.all) process.nextTick(done, null, [{ address: "127.0.0.1", family: 4 }]);
  else process.nextTick(done, null, "127.0.0.1", 4);
  return undefined;
};
