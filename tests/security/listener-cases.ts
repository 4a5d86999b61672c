// The attack table's listener class: malformed input, from inside a sandbox as the agent, to every listener
// the sandbox can reach on its own gateway address: the credential gateway (the runtime's own code) and the
// egress proxy (Squid). Each case sends one kind of bad input, then asks the same listener an ordinary
// question on a fresh connection: the case is blocked when the listener answered the bad input with a 4xx
// or closed it (never a 5xx, never a crash) and still answers the ordinary question afterwards.

import type { SandboxCase } from "./cases.js";

/**
 * The prober, run as `sec_py /tmp/sec/listener.py <gateway|proxy> <attack>` (cases.ts) with GW, GATEWAY_PORT,
 * PROXY_PORT and OWN (an allowlisted name the world answers) in its environment. Prints one verdict line.
 */
export const LISTENER_PROBE = String.raw`
import os, select, socket, sys, time

kind, name = sys.argv[1], sys.argv[2]
GW = os.environ["GW"]
PORT = int(os.environ["GATEWAY_PORT"] if kind == "gateway" else os.environ["PROXY_PORT"])
OWN = os.environ["OWN"].encode()
HEADERS_TIMEOUT = float(os.environ.get("GATEWAY_HEADERS_TIMEOUT", "3"))


def verdict(blocked, text):
    print(("BLOCKED " if blocked else "ESCAPED ") + text.replace("\n", " ")[:300])


def connect(timeout=5):
    # SOURCE: the address to connect from, where the sandbox's own is not the machine's default route.
    source = (os.environ["SOURCE"], 0) if os.environ.get("SOURCE") else None
    return socket.create_connection((GW, PORT), timeout=timeout, source_address=source)


def read_until_closed(sock, seconds):
    data, deadline, closed = b"", time.time() + seconds, False
    while time.time() < deadline:
        ready, _, _ = select.select([sock], [], [], max(0.0, deadline - time.time()))
        if not ready:
            break
        try:
            chunk = sock.recv(65536)
        except OSError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        data += chunk
    return data, closed


def status_of(data):
    line = data.split(b"\r\n", 1)[0].decode(errors="replace")
    parts = line.split(" ")
    return int(parts[1]) if len(parts) > 1 and parts[0].startswith("HTTP/") and parts[1].isdigit() else None


def exchange(payload, seconds=6, shut=False):
    """Sends payload; the answer's status (None: none), whether the listener closed, and a description."""
    try:
        sock = connect()
    except OSError as error:
        return None, True, f"refused at once ({error})"
    try:
        try:
            sock.sendall(payload)
            if shut:
                sock.shutdown(socket.SHUT_WR)
        except OSError as error:
            return None, True, f"closed while sending ({error.strerror or error})"
        data, closed = read_until_closed(sock, seconds)
        status = status_of(data)
        what = f"answered {status}" if status else ("closed without an answer" if closed else "no answer yet")
        return status, closed, what
    finally:
        sock.close()


def ordinary():
    """The listener's answer to an ordinary request on a fresh connection: None when it answers as it should."""
    if kind == "gateway":
        request = b"GET /no-such-provider HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"
        expect = b"credential_gateway"
    else:
        request = b"GET http://" + OWN + b"/ HTTP/1.1\r\nHost: " + OWN + b"\r\nConnection: close\r\n\r\n"
        expect = b"world:"
    for attempt in range(3):
        try:
            sock = connect()
            sock.sendall(request)
            data, _ = read_until_closed(sock, 8)
            sock.close()
            if expect in data:
                return None
            problem = f"answered {data[:80]!r}"
        except OSError as error:
            problem = f"unreachable ({error})"
        time.sleep(0.5)
    return problem


HOST = b"Host: gw\r\n"
PROVIDER = b"/anthropic/v1/messages"
ATTACKS = {
    "target-authority": b"GET //a:99999/ HTTP/1.1\r\n" + HOST + b"\r\n",
    "target-slashes": b"GET ///../../etc/passwd HTTP/1.1\r\n" + HOST + b"\r\n",
    "target-absolute-broken": b"GET http://[::1/ HTTP/1.1\r\n" + HOST + b"\r\n",
    "target-absolute-port": b"GET http://a:99999/ HTTP/1.1\r\n" + HOST + b"\r\n",
    "target-asterisk": b"OPTIONS * HTTP/1.1\r\n" + HOST + b"\r\n",
    "target-authority-form": b"CONNECT a:99999 HTTP/1.1\r\nHost: a:99999\r\n\r\n",
    "target-percent": b"GET /%zz/%00/%ff HTTP/1.1\r\n" + HOST + b"\r\n",
    "target-control-bytes": b"GET /\x00\x01\x7f HTTP/1.1\r\n" + HOST + b"\r\n",
    "target-utf8-broken": b"GET /\xc3\x28\xed\xa0\x80 HTTP/1.1\r\n" + HOST + b"\r\n",
    "target-1mib": b"GET /" + b"a" * (1 << 20) + b" HTTP/1.1\r\n" + HOST + b"\r\n",
    "method-nul": b"G\x00T / HTTP/1.1\r\n" + HOST + b"\r\n",
    "method-long": b"A" * 65536 + b" / HTTP/1.1\r\n" + HOST + b"\r\n",
    "version-unknown": b"GET / HTTP/9.9\r\n" + HOST + b"\r\n",
    "version-missing": b"GET /\r\n\r\n",
    "line-lf-only": b"GET / HTTP/1.1\nHost: gw\n\n",
    "host-bracket": b"GET " + PROVIDER + b" HTTP/1.1\r\nHost: [::1\r\n\r\n",
    "host-port-overflow": b"GET " + PROVIDER + b" HTTP/1.1\r\nHost: a:99999\r\n\r\n",
    "host-twice": b"GET " + PROVIDER + b" HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    "host-empty": b"GET " + PROVIDER + b" HTTP/1.1\r\nHost:\r\n\r\n",
    "header-1mib": b"GET / HTTP/1.1\r\n" + HOST + b"X-Big: " + b"a" * (1 << 20) + b"\r\n\r\n",
    "header-20000": b"GET / HTTP/1.1\r\n" + HOST + b"".join(b"X-%d: a\r\n" % i for i in range(20000)) + b"\r\n",
    "header-no-colon": b"GET / HTTP/1.1\r\n" + HOST + b"garbage line\r\n\r\n",
    "header-folded": b"GET / HTTP/1.1\r\n" + HOST + b"X-A: a\r\n b\r\n\r\n",
    "header-nul": b"GET / HTTP/1.1\r\n" + HOST + b"X-A: a\x00b\r\n\r\n",
    "length-negative": b"POST " + PROVIDER + b" HTTP/1.1\r\n" + HOST + b"Content-Length: -1\r\n\r\n",
    "length-huge": b"POST " + PROVIDER + b" HTTP/1.1\r\n" + HOST + b"Content-Length: 99999999999999999999999\r\n\r\n",
    "length-twice": b"POST " + PROVIDER + b" HTTP/1.1\r\n" + HOST + b"Content-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    "smuggle-length-and-chunked": b"POST " + PROVIDER + b" HTTP/1.1\r\n" + HOST
    + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET //a:99999/ HTTP/1.1\r\n" + HOST + b"\r\n",
    "chunk-size-garbage": b"POST " + PROVIDER + b" HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n",
    "chunk-size-huge": b"POST " + PROVIDER + b" HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\nabc\r\n",
    "encoding-unknown": b"POST " + PROVIDER + b" HTTP/1.1\r\n" + HOST + b"Transfer-Encoding: gzip, identity\r\n\r\n",
    "pipelined-crash": b"GET /no-such-provider HTTP/1.1\r\n" + HOST + b"\r\nGET //a:99999/ HTTP/1.1\r\n" + HOST + b"\r\n",
    "tls-hello": bytes.fromhex("16030100a5010000a10303") + bytes(range(32)) + b"\x00\x02\x13\x01\x01\x00",
    "binary-noise": bytes((i * 131 + 7) % 256 for i in range(65536)),
    "upgrade-websocket": b"GET /anthropic/ws HTTP/1.1\r\n" + HOST + b"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n\r\n",
    "expect-continue": b"POST " + PROVIDER + b" HTTP/1.1\r\n" + HOST + b"Expect: 100-continue\r\nContent-Length: 10\r\n\r\n",
}


def half_sent():
    """Headers cut off mid-line, then the connection closed: nothing may wait for the rest."""
    return exchange(b"GET / HTTP/1.1\r\n" + HOST + b"X-Half: abc", seconds=3, shut=True)


def half_body():
    """A body shorter than its Content-Length, then the connection closed."""
    return exchange(b"POST " + PROVIDER + b" HTTP/1.1\r\n" + HOST + b"Content-Length: 1000\r\n\r\n0123456789", seconds=3, shut=True)


def slowloris():
    """Ten connections, each sending a header byte every half second: the gateway closes them at its
    headers timeout; the proxy may keep them, but must answer others meanwhile."""
    socks = []
    for _ in range(10):
        sock = connect()
        sock.sendall(b"GET / HTTP/1.1\r\n" + HOST)
        socks.append(sock)
    started, closed_at = time.time(), {}
    limit = HEADERS_TIMEOUT + 5
    while time.time() - started < limit and len(closed_at) < len(socks):
        for index, sock in enumerate(socks):
            if index in closed_at:
                continue
            try:
                sock.sendall(b"X")
                ready, _, _ = select.select([sock], [], [], 0)
                if ready and not sock.recv(4096):
                    closed_at[index] = time.time() - started
            except OSError:
                closed_at[index] = time.time() - started
        time.sleep(0.5)
    meanwhile = ordinary()
    for sock in socks:
        sock.close()
    if meanwhile:
        return 599, True, f"an ordinary request was not served while slow clients were open: {meanwhile}"
    if kind == "gateway" and len(closed_at) < len(socks):
        return 599, False, f"{len(socks) - len(closed_at)} slow clients still open after {limit:.0f} s"
    what = f"closed all slow clients after {max(closed_at.values()):.1f} s at most" if closed_at else "kept slow clients"
    return None, True, what + ", served others meanwhile"


def idle_flood():
    """A hundred connections that never send a byte, an ordinary request while they are open."""
    socks = [connect() for _ in range(100)]
    meanwhile = ordinary()
    for sock in socks:
        sock.close()
    if meanwhile:
        return 599, True, f"not served beside 100 idle connections: {meanwhile}"
    return None, True, "served beside 100 idle connections"


SPECIAL = {"half-sent": half_sent, "half-body": half_body, "slowloris": slowloris, "idle-flood": idle_flood}

before = ordinary()
if before:
    verdict(False, f"the {kind} did not answer an ordinary request before the attack ({before}): the probe proves nothing")
    sys.exit(0)
try:
    status, closed, what = SPECIAL[name]() if name in SPECIAL else exchange(ATTACKS[name])
except OSError as error:
    status, closed, what = None, True, f"connection failed ({error})"
after = ordinary()
if after:
    verdict(False, f"the {kind} stopped answering after {name} ({what}): {after}")
elif status is not None and status >= 500 and kind == "gateway":
    verdict(False, f"the gateway failed on it: {what}")
elif kind == "gateway" and name not in SPECIAL and status is None and not closed:
    verdict(False, f"the gateway left a whole request hanging: {what} after 6 s")
elif status == 599:
    verdict(False, what)
else:
    verdict(True, f"{what}; the {kind} still answers")
`;

/** Every malformed-input attack the prober knows, in its order. */
export const LISTENER_ATTACKS = [
  "target-authority",
  "target-slashes",
  "target-absolute-broken",
  "target-absolute-port",
  "target-asterisk",
  "target-authority-form",
  "target-percent",
  "target-control-bytes",
  "target-utf8-broken",
  "target-1mib",
  "method-nul",
  "method-long",
  "version-unknown",
  "version-missing",
  "line-lf-only",
  "host-bracket",
  "host-port-overflow",
  "host-twice",
  "host-empty",
  "header-1mib",
  "header-20000",
  "header-no-colon",
  "header-folded",
  "header-nul",
  "length-negative",
  "length-huge",
  "length-twice",
  "smuggle-length-and-chunked",
  "chunk-size-garbage",
  "chunk-size-huge",
  "encoding-unknown",
  "pipelined-crash",
  "tls-hello",
  "binary-noise",
  "upgrade-websocket",
  "expect-continue",
  "half-sent",
  "half-body",
  "slowloris",
  "idle-flood",
] as const;

const LISTENERS = {
  gateway:
    "credential gateway (runtime/gateway): origin-form targets only, a 400 naming what is wrong; Node's HTTP parser answers the rest 400; headers timeout; nothing a request does escapes its handler",
  proxy: "Squid's own HTTP parser and limits (its port is Squid's): it refuses or closes, and keeps serving",
} as const;

/** What writes the prober into the sandbox, once per script (caseScript's set-up, when a listener case runs). */
export const LISTENER_SETUP = `cat > /tmp/sec/listener.py <<'LISTENER_PY'\n${LISTENER_PROBE}\nLISTENER_PY`;

/** The class's cases: every attack against each listener; the two slow ones alone, the rest side by side. */
export function listenerCases(): SandboxCase[] {
  return (Object.keys(LISTENERS) as (keyof typeof LISTENERS)[]).flatMap((listener) =>
    LISTENER_ATTACKS.map((attack) => ({
      id: `listener/${listener}-${attack}`,
      cls: "listener" as const,
      attack: `${attack} sent to the ${listener} on the sandbox's gateway address`,
      mechanism: LISTENERS[listener],
      script: `sec_py /tmp/sec/listener.py ${listener} ${attack}`,
      parallel: attack !== "slowloris" && attack !== "idle-flood",
    })),
  );
}
