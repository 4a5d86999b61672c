"""Runs the attack table's Python probes (probe.py, listener.py), each in a process of its own, without an
interpreter's start-up each: under an emulated CPU (a microVM guest without KVM) that start-up was most of a
probe's time. caseScript (tests/security/cases.ts) starts this once per script, in the sandbox, as the agent,
with the script's environment; `sec_py <script> <args...>` there is a connection to it on the sandbox's own
loopback carrying the working directory and the arguments (NUL-separated: the directory, the number of
arguments, the arguments), answered by a forked child that runs the script as __main__ in that directory
with its output on the connection. The probes' own code, user, network and limits are the same as a
`python3 -I -S <script>`'s; only the interpreter's start-up is shared.

Usage: python3 -I -S forkserver.py <port-file>. Writes "<port>" to the file once it listens; exits after
IDLE_SECONDS without a connection (a script killed before it stopped the server leaves nothing for long).
"""
import os
import runpy
import signal
import socket
import sys

# What the probes import, imported once here: each forked child has them.
import errno  # noqa: F401
import select  # noqa: F401
import struct  # noqa: F401
import time  # noqa: F401

IDLE_SECONDS = 300


def request(conn):
    data = b""
    while True:
        fields = data.split(b"\0")
        # Complete fields are all but the last (what follows the last NUL).
        if len(fields) > 2 and len(fields) - 1 >= int(fields[1]) + 2:
            return [field.decode() for field in fields[: int(fields[1]) + 2]]
        chunk = conn.recv(65536)
        if not chunk:
            raise EOFError("the request ended before its arguments")
        data += chunk


def child(conn, server):
    server.close()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    code = 0
    try:
        fields = request(conn)
        os.chdir(fields[0])
        sys.argv = fields[2:]
        os.dup2(conn.fileno(), 1)
        os.dup2(conn.fileno(), 2)
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def main(port_file):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(128)
    server.settimeout(IDLE_SECONDS)
    with open(port_file + ".tmp", "w") as out:
        out.write(str(server.getsockname()[1]))
    os.rename(port_file + ".tmp", port_file)
    # Children are never waited for: the kernel reaps them.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    while True:
        try:
            conn, _ = server.accept()
        except socket.timeout:
            return
        conn.settimeout(None)
        if os.fork() == 0:
            child(conn, server)
        conn.close()


if __name__ == "__main__":
    main(sys.argv[1])
