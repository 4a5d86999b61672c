"""The git guardrail's rules (seed 001): the ways an agent skips quality gates, refused.

Refused: commit --no-verify / -n; merge, am, rebase and push --no-verify; push --force / -f /
--force-with-lease / --force-if-includes / --mirror / +refspec, and a push whose configured refspec is
forced or whose remote mirrors (send-pack likewise); -c core.hooksPath=... (and --config-env, GIT_CONFIG_*
and `git config` writing it, --file included); any of these behind an alias; and, where the platform
protects the repository's .git/hooks (read-only, `sbx start`'s default), a command that runs hooks while
the configuration (any file: ~/.gitconfig, .git/config, an include) points core.hooksPath at a directory
that is not protected too. Used by /usr/local/bin/git (the wrapper, run as the agent) and by
sandbox-git-keeper, which applies them again, with its own rules (`check_kept`), to every command it runs
in a kept repository: there they are a boundary, since the agent cannot write a kept repository's .git
(docs/security.md, "Kept repositories").

Imported by every git command the agent runs, so only `os` at the top: re, shlex and subprocess are imported
where they are used. The wrapper's path to the keeper needs none of them, and a Python start that loads re
(enum, functools, the patterns' compiles) is most of the wrapper's time, many times over in an emulated
microVM guest.
"""
import os

REAL_GIT = "/usr/bin/git"

# Global options that take a value as the next argument (git(1), "OPTIONS").
GLOBAL_WITH_VALUE = {"-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env", "--super-prefix", "--list-cmds", "--attr-source"}
# commit options whose short form takes a value, so the rest of a short cluster is that value.
COMMIT_SHORT_WITH_VALUE = set("mFCctS")
PUSH_SHORT_WITH_VALUE = set("o")


class Refused(Exception):
    """A command the guardrail refuses; str() is the message for the user."""


def refuse(why):
    raise Refused(f"agent-sandbox: git {why} is blocked in this sandbox (quality gates must run).")


def run_git(args):
    """Runs git with `args` and answers (exit code, stdout); sandbox-git-keeper replaces it to run as the
    repository's keeper."""
    import subprocess

    done = subprocess.run([REAL_GIT] + args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return done.returncode, done.stdout


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
    found = run_git(options + ["config", "--get-regexp", pattern])[1]
    return [tuple((line.split(" ", 1) + [""])[:2]) for line in found.splitlines()]


def check_push_config(options, refspecs):
    """A forced refspec or a mirror in the remote's configuration forces a push that names none."""
    for name, value in configured(options, r"^remote\..*\.(push|mirror)$"):
        if name.endswith(".mirror") and value.strip().lower() in ("true", "yes", "on", "1"):
            refuse("push to a mirror remote (remote.*.mirror)")
        if name.endswith(".push") and value.startswith("+") and not refspecs:
            refuse("push with a forced refspec in remote.*.push")


CONFIG_WITH_VALUE = {"-f", "--file", "--blob", "--type", "--default", "--comment", "--value"}


def config_words(args):
    """`git config`'s words that are not options nor their values: a subcommand, a key, a value."""
    words = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in CONFIG_WITH_VALUE:
            skip = True
        elif not arg.startswith("-"):
            words.append(arg)
    return words


def check_config(args):
    keys = config_words(args)
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
    import re
    import shlex

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
    found = run_git(options + ["config", "--get", f"alias.{command}"])[1].strip()
    if found.startswith("!"):
        check_shell_alias(found[1:], rest)
        return options, command, rest
    if not found:
        return options, command, rest
    import shlex

    extra, command, rest = split_global(shlex.split(found) + rest)
    check_global(extra)
    return expand_alias(options + extra, command, rest, depth + 1)


# Commands that run hooks (commit-msg, pre-commit, pre-merge-commit, pre-push, pre-rebase, post-*).
HOOK_COMMANDS = {"commit", "merge", "am", "rebase", "push", "cherry-pick", "revert", "pull", "send-pack"}


def git_output(options, args):
    code, out = run_git(options + args)
    return out.strip() if code == 0 else None


def read_only(path):
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def check_hooks_directory(options, command):
    """With .git/hooks protected (a read-only mount), the hooks that run must be protected ones too: a
    core.hooksPath written into a config file by hand (the wrapper never sees it on a command line) may
    not point them somewhere the agent can write."""
    found = git_output(options, ["rev-parse", "--path-format=absolute", "--git-common-dir", "--git-path", "hooks"])
    if found is None or len(found.splitlines()) != 2:
        return
    common, effective = found.splitlines()
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


# --- Kept repositories -------------------------------------------------------------------------------
# What sandbox-git-keeper refuses besides the guardrail. It runs git as the repository's keeper, who can
# write .git: nothing the agent passes may make that git run a program of the agent's choosing or write a
# file of the agent's choosing, and nothing may make it skip the hooks.

KEEPER_USER = "gitkeeper"
# The agent's environment the keeper's git gets (the wrapper sends these, the keeper keeps only these):
# the terminal, the locale, the egress proxy and commit identities; nothing that names a program or a path.
PASSED_ENV = (
    "TERM", "LANG", "LC_ALL", "LC_CTYPE", "COLUMNS", "LINES", "TZ", "NO_COLOR",
    "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
)
PASSED_ENV_PREFIX = ("GIT_AUTHOR_", "GIT_COMMITTER_")


def passed_env(env):
    return {k: v for k, v in env.items() if isinstance(v, str) and (k in PASSED_ENV or k.startswith(PASSED_ENV_PREFIX))}

# Global options a kept repository takes. --git-dir, --work-tree, --exec-path, --namespace, --config-env,
# --super-prefix, --attr-source and --bare would point the keeper's git elsewhere or run other programs;
# -C is applied by the wrapper (the working directory it sends).
KEPT_GLOBAL_FLAGS = {
    "--no-pager", "-P", "-p", "--paginate", "--no-replace-objects", "--literal-pathspecs", "--glob-pathspecs",
    "--noglob-pathspecs", "--icase-pathspecs", "--no-optional-locks", "--no-advice", "--version", "--help",
}

# Configuration the agent may set in a kept repository (-c, git config): none of these names a program, a
# hooks directory or a file to write, nor weakens what the keeper set (receive.denyNonFastForwards).
SAFE_KEYS = (
    r"^(user\.(name|email)|color\.[a-z.]+|advice\.[a-z]+|core\.(quotepath|abbrev|autocrlf|eol|safecrlf)"
    r"|log\.(abbrevcommit|date|decorate|follow|graphcolors|showroot|mailmap)|format\.pretty"
    r"|diff\.(renames|algorithm|colormoved|context|interhunkcontext|mnemonicprefix|noprefix|relative|statgraphwidth|indentheuristic)"
    r"|merge\.(conflictstyle|ff|log|renames|stat)|pull\.(rebase|ff)|push\.(default|autosetupremote|followtags)"
    r"|fetch\.(prune|prunetags)|init\.defaultbranch|rebase\.(autosquash|autostash|stat|updaterefs)"
    r"|status\.(short|branch|showuntrackedfiles|relativepaths|aheadbehind|renames)|column\.ui|commit\.(verbose|status|cleanup)"
    r"|branch\.[^\s]+\.(remote|merge|rebase|pushremote|description)|branch\.autosetup(merge|rebase)"
    r"|remote\.[^\s]+\.(url|pushurl|fetch|prune|tagopt)|receive\.denycurrentbranch|tag\.sort|grep\.(linenumber|patterntype))$"
)
_safe_keys = None


def safe_key(key):
    """Whether `key` (lower case) is on SAFE_KEYS; the pattern is compiled at its first use."""
    global _safe_keys
    if _safe_keys is None:
        import re

        _safe_keys = re.compile(SAFE_KEYS)
    return _safe_keys.match(key) is not None


# Commands a kept repository does not run, and why.
KEPT_REFUSED = {
    "clone": "makes a repository (make your own outside the kept ones)",
    "init": "makes a repository (make your own outside the kept ones)",
    "init-db": "makes a repository",
    "commit-tree": "makes a commit without the hooks",
    "fast-import": "makes commits without the hooks",
    "mktree": "writes objects by hand",
    "mktag": "writes objects by hand",
    "unpack-objects": "writes objects by hand",
    "index-pack": "writes objects by hand",
    "replace": "replaces objects",
    "filter-branch": "rewrites history without the hooks",
    "checkout-index": "writes files where --prefix says, as the keeper",
    "merge-file": "writes the file it is given, as the keeper",
    "bundle": "writes the file it is given, as the keeper",
    "difftool": "runs a tool as the keeper",
    "mergetool": "runs a tool as the keeper",
    "send-email": "runs a mailer",
    "imap-send": "runs a mailer",
    "instaweb": "runs a web server",
    "daemon": "runs a server",
    "send-pack": "pushes without push's checks",
    "receive-pack": "is the developer's push (git-receive-pack)",
    "upload-pack": "serves the repository (git-upload-pack)",
    "upload-archive": "serves the repository",
    "credential": "reads credentials",
    "credential-store": "reads credentials",
    "credential-cache": "reads credentials",
    "fsmonitor--daemon": "runs a daemon as the keeper",
    "submodule": "clones and runs commands in submodules",
    "p4": "runs another tool",
    "svn": "runs another tool",
    "cvsimport": "runs another tool",
    "cvsserver": "runs another tool",
    "archimport": "runs another tool",
    "quiltimport": "runs another tool",
}


def kept_refuse(what, why):
    raise Refused(f"agent-sandbox: git {what} is refused in a kept repository: it {why}.")


def check_kept_global(options):
    i = 0
    while i < len(options):
        arg = options[i]
        if arg == "-c" or (arg.startswith("-c") and len(arg) > 2):
            value = options[i + 1] if arg == "-c" and i + 1 < len(options) else arg[2:]
            key = value.split("=", 1)[0]
            if not safe_key(key.strip().lower()):
                kept_refuse(f"-c {key}", "sets a key that is not on the kept repositories' list (docs/security.md)")
            i += 2 if arg == "-c" else 1
            continue
        if arg not in KEPT_GLOBAL_FLAGS:
            kept_refuse(arg.split("=", 1)[0], "points git elsewhere or runs another program")
        i += 1


# `git config` options that write with a single key after them.
CONFIG_WRITE_FLAGS = {"--unset", "--unset-all", "--add", "--replace-all", "--rename-section", "--remove-section"}


def check_kept_config(args):
    for arg in args:
        name = arg.split("=", 1)[0]
        if name in ("-f", "--file", "--blob", "--global", "--system", "--worktree", "-e", "--edit", "--includes"):
            kept_refuse(f"config {name}", "reads or writes another file, or runs an editor")
    reading = any(
        a in ("--get", "--get-all", "--get-regexp", "--get-urlmatch", "-l", "--list", "--show-origin", "--name-only")
        for a in args
    )
    keys = config_words(args)
    if keys and keys[0] in ("get", "list"):
        return
    # `git config [--bool|--type T] KEY` alone reads it (a shell prompt's `git config --bool core.sparseCheckout`).
    if len(keys) == 1 and not any(a.split("=", 1)[0] in CONFIG_WRITE_FLAGS for a in args):
        return
    if keys and keys[0] in ("set", "unset", "rename-section", "remove-section", "edit"):
        if keys[0] == "edit":
            kept_refuse("config edit", "runs an editor")
        keys = keys[1:]
        reading = False
    if reading or not keys:
        return
    if not safe_key(keys[0].strip().lower()):
        kept_refuse(f"config {keys[0]}", "writes a key that is not on the kept repositories' list (docs/security.md)")


def check_kept_options(command, args):
    for arg in args:
        if arg == "--":
            return
        name = arg.split("=", 1)[0]
        if name.startswith("--output") or (command in ("format-patch", "archive") and name == "-o"):
            kept_refuse(f"{command} {name}", "writes a file of your choosing as the keeper (write to stdout instead)")
        if name in ("--upload-pack", "--receive-pack", "--exec") or (command == "ls-remote" and name == "-u"):
            kept_refuse(f"{command} {name}", "runs a program of your choosing")
        if command == "rebase" and (name in ("-x", "--exec") or (arg.startswith("-x") and not arg.startswith("--"))):
            kept_refuse("rebase --exec", "runs a command as the keeper")
        if command == "grep" and (name in ("-O", "--open-files-in-pager") or arg.startswith("-O")):
            kept_refuse("grep -O", "runs a pager of your choosing")
        if command == "apply" and name in ("--directory", "--unsafe-paths"):
            kept_refuse(f"apply {name}", "writes outside the worktree")
        if command == "help" and name in ("-w", "--web", "-i", "--info", "-m", "--man"):
            kept_refuse(f"help {name}", "runs a viewer as the keeper")
    if command == "bisect" and args[:1] == ["run"]:
        kept_refuse("bisect run", "runs a command as the keeper")


def check_kept(argv):
    """The guardrail, then what a kept repository refuses besides (Refused on the first)."""
    options, command, rest = split_global(argv)
    check_kept_global(options)
    check(argv)
    options, command, rest = expand_alias(options, command, rest)
    check_kept_global(options)
    if command is None:
        return
    if command in KEPT_REFUSED:
        kept_refuse(command, KEPT_REFUSED[command])
    if command == "hash-object" and any(a == "-w" or (a.startswith("-") and not a.startswith("--") and "w" in a) for a in rest):
        kept_refuse("hash-object -w", "writes objects by hand")
    if command == "config":
        check_kept_config(rest)
    check_kept_options(command, rest)


# --- Where a command runs -----------------------------------------------------------------------------


def find_repository(start):
    """The nearest `.git` at or above `start`: (top-level directory, path of .git), or None."""
    path = os.path.abspath(start)
    while True:
        dot_git = os.path.join(path, ".git")
        if os.path.lexists(dot_git):
            return path, dot_git
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def hooks_protected(dot_git):
    """A repository whose .git/hooks the platform protects (a read-only mount): the keeper keeps it."""
    hooks = os.path.join(dot_git, "hooks")
    return os.path.isdir(dot_git) and not os.path.islink(hooks) and os.path.isdir(hooks) and read_only(hooks)


def kept_state(start, keeper_uid):
    """"kept" when the repository at or above `start` belongs to the keeper, "protected" when its hooks are
    protected (the keeper keeps it at its first command), None otherwise."""
    found = find_repository(start)
    if found is None:
        return None
    try:
        if os.lstat(found[1]).st_uid == keeper_uid:
            return "kept"
    except OSError:
        return None
    return "protected" if hooks_protected(found[1]) else None


# --- Protected paths in a kept repository's commits -------------------------------------------------
# A branch of a kept repository never moves to a commit that changes a protected path (the keeper's
# reference-transaction hook, /usr/local/lib/agent-sandbox/protect-refs). Protected: the directories
# `sbx start` makes read-only, and the paths or globs listed in the repository's .agent-sandbox/protected
# as the branch's current commit has it (the agent's edit of that list, in the same change or not, is a
# change of a protected path itself).

PROTECTED_BY_DEFAULT = (".husky", ".agent-sandbox", ".agent-precommit")
PROTECTED_LIST = ".agent-sandbox/protected"
PROTECTED_LIST_MAX_BYTES = 64 * 1024


def protected_line_problem(line):
    """Why a line of .agent-sandbox/protected is not taken (None when it is): a path or glob relative to the
    repository's top, `*` within a name, `**` across names."""
    if line.startswith("/"):
        return "an absolute path (write it relative to the repository's top)"
    if line.startswith(("!", ":")):
        return "a negation or pathspec magic (not supported: list what is protected)"
    if any(ord(c) < 0x20 or c in "\\\x7f" for c in line):
        return "a control character or a backslash"
    names = line.rstrip("/").split("/")
    if any(name in (".", "..") for name in names):
        return "a '.' or '..' name"
    if any(name == "" for name in names):
        return "an empty name ('//')"
    return None


def parse_protected(text):
    """(patterns, problems) of .agent-sandbox/protected's text: one path or glob a line, `#` comments and
    blank lines skipped; each line not taken is in `problems` as (line number, line, why)."""
    patterns, problems = [], []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        why = protected_line_problem(line)
        if why:
            problems.append((number, line, why))
        else:
            patterns.append(line.rstrip("/"))
    return patterns, problems


def protected_pathspecs(patterns):
    """git pathspecs for the default paths and `patterns`: each one, and everything below it."""
    specs = []
    for pattern in list(PROTECTED_BY_DEFAULT) + list(patterns):
        specs += [f":(top,glob){pattern}", f":(top,glob){pattern}/**"]
    return specs
