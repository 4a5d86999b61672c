"""Network probes run inside a sandbox as the agent (tests/security). Each prints one verdict line:
BLOCKED <how> when the attempt was stopped, ESCAPED <what happened> when anything answered it.
Only addresses of the test's own world namespace, the host's own addresses and the project's own
containers are ever probed (tests/security/attacks.test.ts routes every one of them locally)."""
import errno
import os
import select
import socket
import struct
import sys
import time

# What the test's own servers answer: seeing any of it means the probe got through.
MARKERS = (b"world:", b"metadata-server", b"host-self", b"world-tcp", b"world-udp")


def verdict(blocked, text):
    print(("BLOCKED " if blocked else "ESCAPED ") + text.replace("\n", " ")[:300])


def reached(data):
    return any(marker in data for marker in MARKERS)


def read_all(sock, deadline):
    data = b""
    while time.time() < deadline:
        ready, _, _ = select.select([sock], [], [], max(0.0, deadline - time.time()))
        if not ready:
            break
        try:
            chunk = sock.recv(65536)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return data


def squid_error(head):
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"x-squid-error:"):
            return line.split(b":", 1)[1].split()[0].decode(errors="replace")
    return ""


def proxy(request, then=None):
    """Sends `request` (raw bytes) to the sandbox's proxy; with `then`, sends it through a CONNECT tunnel."""
    address = (os.environ["GW"], int(os.environ["PROXY_PORT"]))
    try:
        sock = socket.create_connection(address, timeout=6)
    except OSError as error:
        return verdict(False, f"the proxy itself is unreachable ({error}): the probe proves nothing")
    deadline = time.time() + 8
    sock.sendall(request)
    data = read_all(sock, deadline) if then is None else b""
    if then is not None:
        while b"\r\n\r\n" not in data and time.time() < deadline:
            ready, _, _ = select.select([sock], [], [], max(0.0, deadline - time.time()))
            if not ready:
                break
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        if data.startswith(b"HTTP/1.1 200") or data.startswith(b"HTTP/1.0 200"):
            sock.sendall(then)
            data += read_all(sock, deadline)
    sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode(errors="replace")
    error = squid_error(head)
    if reached(data):
        return verdict(False, f"{status}: {body[:80]!r}")
    if error in ("ERR_ACCESS_DENIED",) or (error.startswith("ERR_INVALID") or error == "ERR_UNSUP_REQ"):
        return verdict(True, f"proxy: {status} {error}")
    if not data:
        return verdict(False, "the proxy closed without an answer: the probe proves nothing")
    # The proxy accepted the request and tried to go somewhere (connect or DNS failure, 5xx, a tunnel).
    return verdict(False, f"proxy went ahead: {status} {error}")


def http(target, host=None, method="GET", extra=""):
    if host is None:
        rest = target.split("://", 1)[-1]
        host = rest.split("/", 1)[0].rsplit("@", 1)[-1]
    header = f"Host: {host}\r\n" if host != "" else ""
    proxy(f"{method} {target} HTTP/1.1\r\n{header}{extra}Connection: close\r\n\r\n".encode())


def connect(authority):
    proxy(
        f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode(),
        then=b"GET / HTTP/1.1\r\nHost: tunnel\r\nConnection: close\r\n\r\n",
    )


def tcp(host, port, family=socket.AF_INET):
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as error:
        # A kernel without the family (a microVM guest boots with ipv6.disable=1): nothing can be sent.
        if error.errno == errno.EAFNOSUPPORT:
            return verdict(True, f"{host}:{port}: no such address family here ({error.strerror})")
        raise
    sock.settimeout(3)
    try:
        sock.connect((host, int(port)))
    except socket.timeout:
        return verdict(True, f"dropped: no answer from {host}:{port} in 3 s")
    except ConnectionRefusedError:
        return verdict(False, f"{host}:{port} answered (connection refused): the packet got there")
    except OSError as error:
        if error.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            return verdict(True, f"{host}:{port}: {error.strerror}")
        return verdict(False, f"{host}:{port}: unexpected {error}")
    try:
        sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
        data = read_all(sock, time.time() + 2)
    except OSError:
        data = b""
    return verdict(False, f"connected to {host}:{port}: {data[:60]!r}")


def tcp_many(host, ports):
    """One verdict for many ports: ESCAPED naming every port that answered."""
    answered = []
    socks = []
    for port in ports.split(","):
        if not port:
            continue
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.connect_ex((host, int(port)))
        socks.append((int(port), sock))
    deadline = time.time() + 3
    while socks and time.time() < deadline:
        _, writable, _ = select.select([], [s for _, s in socks], [], max(0.0, deadline - time.time()))
        for port, sock in list(socks):
            if sock in writable:
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                answered.append(f"{port}:{'open' if code == 0 else os.strerror(code)}")
                socks.remove((port, sock))
    if answered:
        return verdict(False, f"{host} answered on {' '.join(answered)}")
    verdict(True, f"dropped: none of {ports.count(',') + 1} ports of {host} answered in 3 s")


def udp(host, port, payload=b"probe"):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(2)
    try:
        sock.sendto(payload, (host, int(port)))
        data, _ = sock.recvfrom(4096)
    except socket.timeout:
        return verdict(True, f"dropped: no UDP answer from {host}:{port} in 2 s")
    except OSError as error:
        if error.errno == errno.ECONNREFUSED:
            return verdict(False, f"{host}:{port} answered (port unreachable): the packet got there")
        return verdict(True, f"{host}:{port}: {error.strerror}")
    verdict(False, f"UDP answer from {host}:{port}: {data[:60]!r}")


def dns_query(server, name="tunnel-data.exfil.sandbox.test"):
    """A real DNS query (A record) sent straight to `server`:53."""
    labels = b"".join(bytes([len(part)]) + part.encode() for part in name.split(".")) + b"\0"
    udp(server, 53, struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + labels + b"\0\1\0\1")


def icmp(host):
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    except OSError as error:
        try:
            socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        except OSError as raw_error:
            return verdict(True, f"no ping socket ({error.strerror}) and no raw socket ({raw_error.strerror})")
        return verdict(False, "a raw ICMP socket opened")
    # A token of this probe's own: the socket takes any echo reply that carries its id, and a reply to an
    # earlier probe's request (its socket closed, the id reused) is not an answer to this one.
    token = b"sandbox-probe-" + os.urandom(6).hex().encode()
    packet = struct.pack(">BBHHH", 8, 0, 0, 0, 1) + token
    checksum = 0
    for i in range(0, len(packet), 2):
        checksum += (packet[i] << 8) + (packet[i + 1] if i + 1 < len(packet) else 0)
    checksum = (checksum >> 16) + (checksum & 0xFFFF)
    checksum = ~(checksum + (checksum >> 16)) & 0xFFFF
    packet = packet[:2] + struct.pack(">H", checksum) + packet[4:]
    deadline = time.monotonic() + 2
    others = []
    try:
        sock.sendto(packet, (host, 0))
        while True:
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            data, source = sock.recvfrom(1024)
            if data[:1] == b"\0" and data[8:] == token:
                break
            others.append(source[0])
    except socket.timeout:
        stray = f" (replies to other requests only, from {', '.join(sorted(set(others)))})" if others else ""
        return verdict(True, f"dropped: no echo reply from {host} in 2 s{stray}")
    except OSError as error:
        return verdict(True, f"{host}: {error.strerror}")
    verdict(False, f"echo reply to the request sent to {host}, from {source[0]}")


def resolve(name):
    try:
        infos = socket.getaddrinfo(name, 80)
    except OSError as error:
        return verdict(True, f"no resolver answered for {name}: {error}")
    verdict(False, f"{name} resolved to {sorted({i[4][0] for i in infos})}")


def tcp6(host, port):
    tcp(host, port, socket.AF_INET6)


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    {
        "http": lambda: http(*args),
        "connect": lambda: connect(*args),
        "raw": lambda: proxy(args[0].encode().decode("unicode_escape").encode("latin-1")),
        "tcp": lambda: tcp(*args),
        "tcp6": lambda: tcp6(*args),
        "tcpmany": lambda: tcp_many(*args),
        "udp": lambda: udp(*args),
        "dns": lambda: dns_query(*args),
        "icmp": lambda: icmp(*args),
        "resolve": lambda: resolve(*args),
    }[command]()
