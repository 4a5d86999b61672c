#!/usr/bin/python3
"""Guardrail wrapper in front of /usr/bin/git (seed 001): refuses the ways an agent skips quality gates.

Refused: commit --no-verify / -n; merge, am, rebase and push --no-verify; push --force / -f /
--force-with-lease / --force-if-includes / --mirror / +refspec, and a push whose configured refspec is
forced or whose remote mirrors (send-pack likewise); -c core.hooksPath=... (and --config-env, GIT_CONFIG_*
and `git config` writing it, --file included); any of these behind an alias; and, where the platform
protects the repository's .git/hooks (read-only, `sbx start`'s default), a command that runs hooks while
the configuration (any file: ~/.gitconfig, .git/config, an include) points core.hooksPath at a directory
that is not protected too. Everything else runs /usr/bin/git unchanged. A guardrail, not a security
boundary: see the README.
"""
import os
import re
import shlex
import subprocess
import sys

REAL_GIT = "/usr/bin/git"

# Global options that take a value as the next argument (git(1), "OPTIONS").
GLOBAL_WITH_VALUE = {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env", "--super-prefix", "--list-cmds", "--attr-source"}
# commit options whose short form takes a value, so the rest of a short cluster is that value.
COMMIT_SHORT_WITH_VALUE = set("mFCctS")
PUSH_SHORT_WITH_VALUE = set("o")


def refuse(why):
    sys.stderr.write(f"agent-sandbox: git {why} is blocked in this sandbox (quality gates must run).\n")
    sys.exit(1)


def is_hooks_path(key):
    return key.strip().lower() == "core.hookspath"


def split_global(args):
    """Returns (global options, subcommand, subcommand args)."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in GLOBAL_WITH_VALUE:
            i += 2
            continue
        if arg.startswith("-") and arg != "-":
            i += 1
            continue
        return args[:i], arg, args[i + 1 :]
    return args, None, []


def check_global(options):
    for i, arg in enumerate(options):
        value = None
        if arg == "-c" and i + 1 < len(options):
            value = options[i + 1]
        elif arg.startswith("-c") and len(arg) > 2:
            value = arg[2:]
        elif arg == "--config-env" and i + 1 < len(options):
            value = options[i + 1]
        elif arg.startswith("--config-env="):
            value = arg[len("--config-env=") :]
        if value is not None and is_hooks_path(value.split("=", 1)[0]):
            refuse("-c core.hooksPath")


def check_environment():
    count = os.environ.get("GIT_CONFIG_COUNT", "0")
    try:
        count = int(count)
    except ValueError:
        count = 0
    for i in range(count):
        if is_hooks_path(os.environ.get(f"GIT_CONFIG_KEY_{i}", "")):
            refuse("GIT_CONFIG_KEY_* core.hooksPath")
    if "core.hookspath" in os.environ.get("GIT_CONFIG_PARAMETERS", "").lower():
        refuse("GIT_CONFIG_PARAMETERS core.hooksPath")


def short_flags(arg, with_value):
    """The flags of a short cluster like -anm: stops at the first flag that takes a value."""
    flags = []
    for ch in arg[1:]:
        flags.append(ch)
        if ch in with_value:
            break
    return flags


def check_no_verify(command, args):
    """merge, am, rebase and push skip their hooks with --no-verify (or any unambiguous prefix) too."""
    for arg in args:
        if arg == "--":
            return
        if arg.startswith("--no-veri") and "--no-verify".startswith(arg):
            refuse(f"{command} --no-verify")


def check_commit(args):
    for arg in args:
        if arg == "--":
            return
        # git accepts any unambiguous prefix of a long option (--no-veri, --no-verif, ...).
        if arg.startswith("--no-veri") and "--no-verify".startswith(arg):
            refuse("commit --no-verify")
        if arg.startswith("-") and not arg.startswith("--") and "n" in short_flags(arg, COMMIT_SHORT_WITH_VALUE):
            refuse("commit -n")


def check_push(args):
    positional = []
    for arg in args:
        if arg == "--":
            positional = positional + ["--"]
            continue
        if arg.startswith("--"):
            name = arg.split("=", 1)[0]
            if name in ("--force", "--force-with-lease", "--force-if-includes", "--mirror") or (
                len(name) >= 4 and "--force".startswith(name)
            ):
                refuse(f"push {name}")
        elif arg.startswith("-") and len(arg) > 1:
            if "f" in short_flags(arg, PUSH_SHORT_WITH_VALUE):
                refuse("push -f")
        else:
            positional.append(arg)
    # positional[0] is the remote; the rest are refspecs.
    refspecs = [p for p in positional[1:] if p != "--"]
    if any(spec.startswith("+") for spec in refspecs):
        refuse("push +refspec (a forced update)")
    return refspecs


def configured(options, pattern):
    """`git config --get-regexp` under the same global options and environment: name, value pairs."""
    found = subprocess.run(
        [REAL_GIT] + options + ["config", "--get-regexp", pattern],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ).stdout
    return [tuple((line.split(" ", 1) + [""])[:2]) for line in found.splitlines()]


def check_push_config(options, refspecs):
    """A forced refspec or a mirror in the remote's configuration forces a push that names none."""
    for name, value in configured(options, r"^remote\..*\.(push|mirror)$"):
        if name.endswith(".mirror") and value.strip().lower() in ("true", "yes", "on", "1"):
            refuse("push to a mirror remote (remote.*.mirror)")
        if name.endswith(".push") and value.startswith("+") and not refspecs:
            refuse("push with a forced refspec in remote.*.push")


CONFIG_WITH_VALUE = {"-f", "--file", "--blob", "--type", "--default", "--comment", "--value"}


def check_config(args):
    keys = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in CONFIG_WITH_VALUE:
            skip = True
        elif not arg.startswith("-"):
            keys.append(arg)
    reading = any(a in ("--get", "--get-all", "--get-regexp", "-l", "--list", "--unset", "--unset-all") for a in args)
    if keys and is_hooks_path(keys[0]) and not reading:
        refuse("config core.hooksPath")
    if len(keys) >= 2 and keys[0] == "set" and is_hooks_path(keys[1]):
        refuse("config set core.hooksPath")


# Commands that are never aliases (git ignores an alias named like a built-in): no lookup for these.
BUILTINS = {
    "add", "am", "blame", "branch", "cat-file", "checkout", "cherry-pick", "clone", "commit", "config",
    "diff", "fetch", "grep", "init", "log", "ls-files", "merge", "mv", "pull", "push", "rebase", "remote",
    "reset", "restore", "rev-parse", "rm", "send-pack", "show", "stash", "status", "switch", "tag",
    "worktree", "help", "version",
}


def check_shell_alias(script, rest):
    """A shell alias runs with git's exec path first on PATH, so its `git` is the real one: check each git
    command in it (with the alias's arguments appended, as git does) as if typed here."""
    for segment in re.split(r"[;&|(){}\n`]|\$\(", script):
        try:
            words = shlex.split(segment)
        except ValueError:
            words = segment.split()
        for i, word in enumerate(words):
            if os.path.basename(word) == "git":
                check(words[i + 1 :] + rest)
                break


def expand_alias(options, command, rest, depth=0):
    """An alias (`-c alias.x=...` or configured) checked as what it runs; shell (!) aliases run git again."""
    if command is None or command in BUILTINS or depth > 10:
        return options, command, rest
    found = subprocess.run(
        [REAL_GIT] + options + ["config", "--get", f"alias.{command}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ).stdout.strip()
    if found.startswith("!"):
        check_shell_alias(found[1:], rest)
        return options, command, rest
    if not found:
        return options, command, rest
    extra, command, rest = split_global(shlex.split(found) + rest)
    check_global(extra)
    return expand_alias(options + extra, command, rest, depth + 1)


# Commands that run hooks (commit-msg, pre-commit, pre-merge-commit, pre-push, pre-rebase, post-*).
HOOK_COMMANDS = {"commit", "merge", "am", "rebase", "push", "cherry-pick", "revert", "pull", "send-pack"}


def git_output(options, args):
    done = subprocess.run([REAL_GIT] + options + args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def read_only(path):
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check_hooks_directory(options, command):
    """With .git/hooks protected (a read-only mount), the hooks that run must be protected ones too: a
    core.hooksPath written into a config file by hand (the wrapper never sees it on a command line) may
    not point them somewhere the agent can write."""
    common = git_output(options, ["rev-parse", "--path-format=absolute", "--git-common-dir"])
    effective = git_output(options, ["rev-parse", "--path-format=absolute", "--git-path", "hooks"])
    if common is None or effective is None:
        return
    default = os.path.realpath(os.path.join(common, "hooks"))
    if not read_only(default):
        return
    effective = os.path.realpath(effective)
    if effective != default and not read_only(effective):
        refuse(f"{command} with core.hooksPath {effective} (this repository's hooks are protected; that directory is not)")


def check(argv):
    options, command, rest = split_global(argv)
    check_global(options)
    options, command, rest = expand_alias(options, command, rest)
    if command == "commit":
        check_commit(rest)
    elif command in ("merge", "am", "rebase"):
        check_no_verify(command, rest)
    elif command in ("push", "send-pack"):
        check_no_verify(command, rest)
        check_push_config(options, check_push(rest))
    elif command == "config":
        check_config(rest)
    if command in HOOK_COMMANDS:
        check_hooks_directory(options, command)


def main(argv):
    check_environment()
    check(argv)
    os.execv(REAL_GIT, [REAL_GIT] + argv)


if __name__ == "__main__":
    main(sys.argv[1:])
