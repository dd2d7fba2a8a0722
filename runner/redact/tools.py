"""Passwords that well-known tools take after a short flag (``curl -u bob:PW``, ``sshpass -p
PW``, ``mysql -pPW``, ``redis-cli -a PW``, ``docker login -p PW``, ``7z x -pPW``) or as a bare
argument (``htpasswd -b FILE USER PW``, ``wandb login KEY``), found by the tool named before
them: the same flags elsewhere are ports, users and counts (``torchrun -p``, ``docker run -p
8080:80``, ``python train.py -p 4``). Pure; runner/redact/shapes.py ``scan_args`` hides what
``tool_passwords`` finds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

# How a flag carries the password: "next" as the next argument or attached (`sshpass -p PW`,
# `sshpass -pPW`); "attached" only attached (`mysql -pPW`: `mysql -p db` prompts, and db is the
# database); "user" as curl's USER:PASSWORD, next, attached or after `=`, the password alone
# being secret (after the first `:`; without one curl prompts).
# A tool named with its subcommand ("docker login") takes the flag only after that subcommand.
_ATTACHED_P = {"-p": "attached"}  # mysql, 7z
_TOOLS: dict[str, dict[str, str]] = {
    "curl": {"-u": "user", "--user": "user", "-U": "user", "--proxy-user": "user"},
    "sshpass": {"-p": "next"},
    "redis-cli": {"-a": "next"},
    **dict.fromkeys(("mysql", "mariadb", "mysqldump", "mysqladmin", "mariadb-dump"), _ATTACHED_P),
    "docker login": {"-p": "next"},  # `docker run -p 8080:80` publishes a port
    **dict.fromkeys(("7z", "7za", "7zr"), _ATTACHED_P),  # `7z x -p a.7z` prompts
}
# Long options whose value is optional, so only attached (`--password=PW`): mysql(1) "If you
# omit the password value following the --password or -p option", it prompts, and the next
# argument is the database; --password1..3 (MySQL 8.0.27's multifactor) and the unique
# prefixes my_getopt takes (`--pass`) alike.
_MYSQL_OPTIONAL = re.compile(r"--pass(?:w(?:o(?:r(?:d[123]?)?)?)?)?")
_OPTIONAL = dict.fromkeys(
    ("mysql", "mariadb", "mysqldump", "mysqladmin", "mariadb-dump"), _MYSQL_OPTIONAL
)
# Tools that take a password as a bare argument: the options of theirs that take a value, and
# which argument that is no option is the password (1: the first), by the letters of the short
# options given and those arguments (None: none is). htpasswd(1): `-b FILE USER PW`, `-nb USER
# PW` (a bundle such as `-cbB` too; without -b it prompts); `wandb login [KEY]`; `aws configure
# set NAME VALUE` (the AWS CLI reference) when NAME, qualified or not (`default.NAME`), is one
# that goes to the credentials file.
_AWS_SECRETS = frozenset({"aws_secret_access_key", "aws_session_token", "aws_security_token"})
_AWS_VALUED = frozenset(
    {"--profile", "--region", "--output", "--query", "--endpoint-url", "--color", "--ca-bundle",
     "--cli-read-timeout", "--cli-connect-timeout", "--cli-binary-format", "--sso-session",
     "--services"}
)  # fmt: skip


def _htpasswd(letters: str, _bare: list[str]) -> int | None:
    return (2 if "n" in letters else 3) if "b" in letters else None


def _aws_configure(_letters: str, bare: list[str]) -> int | None:
    name = bare[1].rsplit(".", 1)[-1] if bare[:1] == ["set"] and len(bare) > 1 else ""
    return 3 if name in _AWS_SECRETS else None


_BARE: dict[str, tuple[frozenset[str], Callable[[str, list[str]], int | None]]] = {
    "htpasswd": (frozenset({"-C"}), _htpasswd),
    "wandb login": (frozenset({"--host", "--base-url"}), lambda *_: 1),
    "aws configure": (_AWS_VALUED, _aws_configure),
}
# The options taking a value that tools known with a subcommand take before it (docker(1):
# `docker -H tcp://h login`, docs.docker.com/reference/cli/docker; `aws --profile d configure`).
_GLOBALS = {
    "docker": frozenset({"-H", "--host", "--config", "-c", "--context", "-l", "--log-level",
                         "--tlscacert", "--tlscert", "--tlskey"}),
    "aws": _AWS_VALUED,
}  # fmt: skip
# Tools and shell words that run a command after them: their options that take a value, and
# how many words that are no option come before the command (`ssh HOST CMD`, `timeout 60 CMD`);
# the next is the command, whose flags are its own (`sshpass -p X ssh -p 2222 h`: a port).
_SHELL = (frozenset({"-o", "-O", "+o", "+O"}), 0)  # bash -c 'CMD'
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "sshpass": (frozenset({"-f", "-d", "-p", "-P"}), 0),
    "sudo": (frozenset({"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T"}), 0),
    "env": (frozenset({"-u", "-C", "-S", "--unset", "--chdir"}), 0),
    "xargs": (frozenset({"-I", "-L", "-n", "-P", "-s", "-d", "-E", "-a"}), 0),
    "timeout": (frozenset({"-s", "-k", "--signal", "--kill-after"}), 1),
    "ssh": (frozenset({"-p", "-i", "-l", "-o", "-F", "-J", "-L", "-R", "-D", "-E", "-b", "-c",
                       "-m", "-O", "-Q", "-S", "-W", "-w", "-B"}), 1),
    **dict.fromkeys(("docker exec", "podman exec"), (frozenset({"-e", "--env", "--env-file",
                    "-u", "--user", "-w", "--workdir", "--detach-keys"}), 1)),  # CONTAINER CMD
    "kubectl exec": (frozenset({"-c", "--container", "-n", "--namespace", "-f", "--filename",
                                "--pod-running-timeout"}), 1),  # POD -- CMD
    "nice": (frozenset({"-n"}), 0), "exec": (frozenset({"-a"}), 0),
    "time": (frozenset({"-f", "-o"}), 0),
    **dict.fromkeys(("bash", "sh", "zsh", "dash"), _SHELL),
    **dict.fromkeys(("nohup", "command", "if", "then", "else", "elif", "while", "until", "do",
                     "!", "{"), (frozenset[str](), 0)),
}  # fmt: skip
# Launchers with many options, some taking a value (`srun -N 2 CMD`, `mpirun -np 4 CMD`,
# `stdbuf -oL CMD`), not listed: each word after one, up to its command's end, may start the
# command it runs.
_LAUNCHERS = frozenset({"srun", "mpirun", "mpiexec", "stdbuf", "taskset", "numactl", "ionice",
                        "setsid", "chrt", "flock", "unbuffer", "watch", "parallel"})  # fmt: skip
# A variable set for the command, before it or after env (`A=1 wandb login KEY`).
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.DOTALL)
# curl's switches that a bundle holds before -u (`curl -fsSLu bob:PW`, `-ksubob:PW`).
_CURL_SWITCHES = frozenset("fsSLkvi")
# Shell words that end a command: the next word names a tool again (`sshpass -p X ssh h; ls -p`).
_COMMAND_ENDS = frozenset({";", "&&", "||", "|", "|&", "&", "(", ")", "\n", "`"})


def _password(how: str, value: str, mark: str) -> tuple[str, str] | None:
    """What a flag's ``value`` shows (the mark for the password) and its password."""
    if how != "user":
        return (mark, value) if value else None
    user, colon, password = value.partition(":")
    return (f"{user}:{mark}", password) if colon and password else None


def _flag(arg: str, flag: str, how: str) -> tuple[str, str | None] | None:
    """Whether ``arg`` is ``flag``: what precedes its value in ``arg``, and the value there
    (None: the next argument). curl's user flag may end a bundle of its switches (`-fsSLu`)."""
    if arg == flag:
        return None if how == "attached" else (arg, None)
    if flag.startswith("--"):
        return (flag + "=", arg[len(flag) + 1 :]) if arg.startswith(flag + "=") else None
    if arg[:1] != "-" or arg[1:2] == "-":
        return None
    at = arg.find(flag[1], 1) if how == "user" else 1
    if at < 1 or arg[at] != flag[1] or not set(arg[1:at]) <= _CURL_SWITCHES:
        return None
    return arg[: at + 1], arg[at + 1 :] or None


def _tools_at(args: tuple[str, ...], anywhere: bool) -> Iterator[tuple[int, str]]:
    """Each index of ``args`` with the tool of ``_TOOLS`` whose arguments it is among ("" for
    none), until its command ends or, for a tool that runs another (sshpass), that command
    starts. In a line's words the tool is one only where a command starts: elsewhere it is a
    word (`echo sshpass -p password-file`: a file's name, masked in every log); ``anywhere``
    among a program's own arguments, which it may run (`python launch.py curl -u bob:PW`)."""
    starts = range(len(args)) if anywhere else frozenset(_command_starts(args))
    tool = ""
    for index, arg in enumerate(args):
        name = _tool(args, index)[0] if index in starts else ""
        if name in _TOOLS:
            tool = name
        elif arg in _COMMAND_ENDS or (
            tool in _WRAPPERS and arg[:1] != "-" and args[index - 1] not in _WRAPPERS[tool][0]
        ):
            tool = ""
        yield index, tool


def optional_values(args: tuple[str, ...]) -> frozenset[int]:
    """The indexes of ``args`` that are a tool's option whose value may only be attached, so
    the next argument is no value of it: mysql's `--password X` prompts, X being the database
    (my_getopt's optional argument; `--password=X` is the password). The tool named where a
    command starts only, also in a program's arguments: `migrate.py --engine mysql --password
    X` gives X to migrate.py."""
    return frozenset(
        index
        for index, tool in _tools_at(args, anywhere=False)
        if _OPTIONAL.get(tool) is not None and _OPTIONAL[tool].fullmatch(args[index])
    )


def tool_passwords(
    args: tuple[str, ...], mark: str, anywhere: bool, bare: bool = True
) -> Iterator[tuple[int, str, str]]:
    """For each argument of ``args`` (a program's, or a shell line's words) holding a password
    that a well-known tool named before it takes (``_tools_at``; ``bare``: also ``_BARE``'s):
    its index, the argument with the password replaced by ``mark``, and the password."""
    if bare:
        yield from _bare_passwords(args, mark)
    for index, tool in _tools_at(args, anywhere):
        arg, flags = args[index], _TOOLS.get(tool, {})
        for flag, how in flags.items():
            split = _flag(arg, flag, how)
            if split is None:
                continue
            before, value = split
            at, before = (index, before) if value is not None else (index + 1, "")
            if value is None and index + 1 < len(args):
                value = args[index + 1]
            found = _password(how, value, mark) if value else None
            if found:
                yield at, before + found[0], found[1]


def _tool(args: tuple[str, ...], index: int) -> tuple[str, int]:
    """The tool ``args[index]`` names: its file's name, with the subcommand after it and its
    own options where a tool is known by both (``docker -H tcp://h login``); and the index
    of the first argument after them."""
    name, after = args[index].rsplit("/", 1)[-1], index + 1
    while after < len(args) and args[after][:1] == "-" and name in _GLOBALS:
        after += 2 if args[after] in _GLOBALS[name] else 1
    both = f"{name} {args[after]}" if after < len(args) else ""
    return (both, after + 1) if both in _TOOLS or both in _BARE else (name, index + 1)


def _command_starts(args: tuple[str, ...]) -> Iterator[int]:
    """The indexes of ``args`` where a command starts: the first word, after a word that ends
    a command (``;``, ``&&``, ``|``, a new line, ``(``), after the variables set before it and
    after a tool that runs it (``sudo -u bob CMD``, ``env A=1 CMD``, ``ssh -p 22 HOST CMD``)
    and at each word after a launcher (``_LAUNCHERS``)."""
    expect, valued, before, index, loose = True, frozenset[str](), 0, 0, False
    while index < len(args):
        arg, option = args[index], args[index][:1] in ("-", "+") and len(args[index]) > 1
        if arg in _COMMAND_ENDS:
            expect, valued, before, loose = True, frozenset(), 0, False
        elif loose and not option:
            yield index
        elif not expect or _ASSIGNMENT.fullmatch(arg):
            pass
        elif option:  # a wrapper's, or those of the program whose arguments these are
            index += 1 if arg in valued else 0  # and the option's value
        elif before:
            before -= 1
        else:
            yield index
            name = arg.rsplit("/", 1)[-1]
            both = f"{name} {args[index + 1]}" if index + 1 < len(args) else ""
            if both in _WRAPPERS:  # `docker exec`: the subcommand runs the command
                name, index = both, index + 1
            valued, before = _WRAPPERS.get(name, (frozenset(), -1))
            expect, loose = before >= 0, name in _LAUNCHERS
        index += 1


def _bare_passwords(args: tuple[str, ...], mark: str) -> Iterator[tuple[int, str, str]]:
    """The passwords of ``_BARE``'s tools where a command starts in ``args``, as
    ``tool_passwords`` yields them: `echo wandb login failed` names wandb, and `failed` is no key.
    Short-flag tools (``_TOOLS``) alike (``_tools_at``)."""
    for start in _command_starts(args):
        tool, index = _tool(args, start)
        if tool not in _BARE:
            continue
        valued, which = _BARE[tool]
        letters, bare = "", []
        while index < len(args) and args[index] not in _COMMAND_ENDS:
            arg = args[index]
            if arg in valued:
                index += 1
            elif arg[:2] == "--" or (arg[:1] == "-" and len(arg) > 1):
                letters += "" if arg[:2] == "--" else arg[1:]
            else:
                bare.append(index)
            index += 1
        at = which(letters, [args[at] for at in bare])
        if at is not None and len(bare) >= at and args[bare[at - 1]]:
            yield bare[at - 1], mark, args[bare[at - 1]]
