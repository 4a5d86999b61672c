"""A WebSocket client that never reads: the "slow client" of issue 5's bad inputs.

Its receive buffer is made tiny before connecting (Node cannot set SO_RCVBUF), so the proxy's own
back-pressure is what gets exercised, not the kernel's megabytes of autotuned buffer. It performs the
opening handshake, sends masked text frames (a resize, the command to type...), then sleeps without
reading. Usage: stalled-terminal-client.py WS_URL SECONDS TEXT...
"""
import base64
import os
import socket
import struct
import sys
import time
from urllib.parse import urlsplit

url, seconds, texts = sys.argv[1], float(sys.argv[2]), [t.encode() for t in sys.argv[3:]]
parts = urlsplit(url)
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
sock.connect((parts.hostname, parts.port))
key = base64.b64encode(os.urandom(16)).decode()
path = parts.path + ("?" + parts.query if parts.query else "")
sock.sendall(
    (
        f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ).encode()
)
response = b""
while b"\r\n\r\n" not in response:
    response += sock.recv(1)
if b" 101 " not in response.split(b"\r\n", 1)[0]:
    sys.exit(f"handshake refused: {response!r}")
time.sleep(1)  # the session attaches
for text in texts:
    mask = os.urandom(4)
    if len(text) < 126:
        header = struct.pack("!BB", 0x81, 0x80 | len(text))
    else:
        header = struct.pack("!BBH", 0x81, 0x80 | 126, len(text))
    sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(text)))
print("sent", flush=True)
time.sleep(seconds)
