"""Passwords that well-known tools take after a short flag (``curl -u bob:PW``, ``sshpass -p
PW``, ``mysql -pPW``, ``redis-cli -a PW``), found by the tool named before the flag: the same
flags elsewhere are ports, users and counts (``torchrun -p``, ``python train.py -p 4``). Pure;
runner/redact/shapes.py ``scan_args`` hides what ``tool_passwords`` finds.
"""

from __future__ import annotations

from collections.abc import Iterator

# How a flag carries the password: "next" as the next argument or attached (`sshpass -p PW`,
# `sshpass -pPW`); "attached" only attached (`mysql -pPW`: `mysql -p db` prompts, and db is the
# database); "user" as curl's USER:PASSWORD, next, attached or after `=`, the password alone
# being secret (after the first `:`; without one curl prompts).
_MYSQL = {"-p": "attached"}
_TOOLS: dict[str, dict[str, str]] = {
    "curl": {"-u": "user", "--user": "user", "-U": "user", "--proxy-user": "user"},
    "sshpass": {"-p": "next"},
    "redis-cli": {"-a": "next"},
    **dict.fromkeys(("mysql", "mariadb", "mysqldump", "mysqladmin", "mariadb-dump"), _MYSQL),
}
# Options of tools that run a command after them, taking a value: the first other word that is
# no option is the command, whose flags are its own (`sshpass -p X ssh -p 2222 h`: a port).
_WRAPPERS = {"sshpass": ("-f", "-d", "-p", "-P")}
# curl's switches that a bundle holds before -u (`curl -fsSLu bob:PW`, `-ksubob:PW`).
_CURL_SWITCHES = frozenset("fsSLkvi")
# Shell words that end a command: the next word names a tool again (`sshpass -p X ssh h; ls -p`).
_COMMAND_ENDS = frozenset({";", "&&", "||", "|", "|&", "&", "(", ")", "\n"})


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


def tool_passwords(args: tuple[str, ...], mark: str) -> Iterator[tuple[int, str, str]]:
    """For each argument of ``args`` (a program's, or a shell line's words) holding a password
    that a well-known tool named before it takes: its index, the argument with the password
    replaced by ``mark``, and the password."""
    tool, flags = "", {}
    for index, arg in enumerate(args):
        name = arg.rsplit("/", 1)[-1]
        if name in _TOOLS:
            tool, flags = name, _TOOLS[name]
        elif arg in _COMMAND_ENDS or (
            tool in _WRAPPERS and arg[:1] != "-" and args[index - 1] not in _WRAPPERS[tool]
        ):
            tool, flags = "", {}
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
