"""E2B's Python SDK (PyPI `e2b`, unchanged) against the platform: one scenario, each step's outcome one JSON
line on stdout for tests/integration/e2b-python.test.ts to check. Configured as users configure the SDK:
E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY in the environment; OTHER_KEY is another user's key."""
import hashlib
import json
import os
import sys
import time

from e2b import (
    AuthenticationException,
    CommandExitException,
    NotFoundException,
    Sandbox,
    SandboxQuery,
)


def say(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def failure(error):
    return {"error": type(error).__name__, "message": str(error)[:300]}


run = os.environ["RUN_ID"]
sandbox = Sandbox.create(metadata={"suite": "python", "run": run}, envs={"GREETING": "hello-py"}, timeout=600)
say("create", id=sandbox.sandbox_id, running=sandbox.is_running())

result = sandbox.commands.run('echo "$GREETING"; echo to-stderr >&2; whoami; pwd')
say("run", stdout=result.stdout, stderr=result.stderr, exit_code=result.exit_code)

streamed = []
sandbox.commands.run("for i in 1 2 3; do echo line-$i; sleep 0.2; done", on_stdout=lambda line: streamed.append(line))
say("stream", chunks=streamed)

try:
    sandbox.commands.run("echo failing >&2; exit 3")
    say("exit", raised=False)
except CommandExitException as error:
    say("exit", raised=True, exit_code=error.exit_code, stderr=error.stderr)

say("cwd_envs", stdout=sandbox.commands.run("pwd; echo $ONLY_HERE", cwd="/tmp", envs={"ONLY_HERE": "per-command"}).stdout)

background = sandbox.commands.run("sleep 120", background=True)
listed = [p.pid for p in sandbox.commands.list()]
killed = sandbox.commands.kill(background.pid)
say("background", pid=background.pid, listed=background.pid in listed, killed=killed,
    after=background.pid in [p.pid for p in sandbox.commands.list()])

sandbox.files.write("notes/py.txt", "written by python\n")
binary = os.urandom(1024 * 1024)
sandbox.files.write("notes/blob.bin", binary)
read_back = sandbox.files.read("notes/blob.bin", format="bytes")
say("files", text=sandbox.files.read("notes/py.txt"),
    binary_same=hashlib.sha256(bytes(read_back)).hexdigest() == hashlib.sha256(binary).hexdigest(),
    listed=sorted(entry.name for entry in sandbox.files.list("notes")),
    exists=sandbox.files.exists("notes/py.txt"))
sandbox.files.remove("notes/py.txt")
say("remove", exists=sandbox.files.exists("notes/py.txt"))
try:
    sandbox.files.read("../../etc/shadow")
    say("outside", raised=False)
except Exception as error:  # the SDK's own exception for the server's answer
    say("outside", raised=True, **failure(error))

again = Sandbox.connect(sandbox.sandbox_id)
say("connect", stdout=again.commands.run("cat notes/blob.bin | wc -c").stdout.strip())
sandbox.set_timeout(900)
info = sandbox.get_info()
say("timeout", seconds_left=round((info.end_at.timestamp() - time.time())), metadata=info.metadata)

found = Sandbox.list(query=SandboxQuery(metadata={"run": run})).next_items()
say("list", ids=[s.sandbox_id for s in found])

try:
    Sandbox.create(api_key="sbx_" + "A" * 43)
    say("wrong_key", raised=False)
except AuthenticationException as error:
    say("wrong_key", raised=True, **failure(error))

try:
    Sandbox.connect(sandbox.sandbox_id, api_key=os.environ["OTHER_KEY"])
    say("other_user", raised=False)
except NotFoundException as error:
    say("other_user", raised=True, **failure(error))
except Exception as error:
    say("other_user", raised=True, unexpected=True, **failure(error))

try:
    Sandbox.create(template="no-such-template")
    say("unknown_template", raised=False)
except Exception as error:
    say("unknown_template", raised=True, **failure(error))

say("kill", killed=sandbox.kill(), listed_after=[s.sandbox_id for s in Sandbox.list(query=SandboxQuery(metadata={"run": run})).next_items()])
sys.exit(0)
