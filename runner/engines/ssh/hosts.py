"""Hosts files -> Inventory: YAML (host, port, user, key, slots), or lines as the MPI ecosystem
writes them (hostlines.py: `HOST slots=N`, `h1:4,h2:4`); and --hosts given the hosts themselves.

Pure: takes the file's text and name; every error names the file, the line and the field.
The shapes are documented in docs/clusters.md ("Hosts files").
"""

from __future__ import annotations

import datetime
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dtrun.azure.catalog import SIZES
from dtrun.cluster.names import (
    control_character,
    host_problem,
    interface_problem,
    is_port,
    login_problem,
    node_dir_problem,
    same_host,
    shared_problem,
    workdir_problem,
)
from dtrun.engines.ssh.hostlines import (
    Entry,
    HostsFileError,
    count_problem,
    located,
    read_host_list,
    read_lines,
)
from dtrun.engines.ssh.keys import KEY_MOST_BYTES
from dtrun.spec.cluster import Accelerator, Inventory, Node, SshAccess

TOP_FIELDS = {
    "hosts", "user", "port", "key", "slots", "cpus", "python", "workdir", "shared", "jump",
    "size", "accelerator", "known_hosts", "interface",
}  # fmt: skip
HOST_FIELDS = {"host", "address", "port", "user", "key", "slots", "cpus"}


@dataclass(frozen=True)
class Defaults:
    """What a hosts file leaves unsaid."""

    user: str
    python_bin: str  # the same path on every host, e.g. this machine's virtualenv
    code_dir_name: str = "code"


def _error(source: str, line: int, what: str, fix: str = "") -> HostsFileError:
    return located(f"{source}, line {line}", what, fix)


def _scalar(node: yaml.Node, source: str, field: str, kind: type) -> Any:
    line = node.start_mark.line + 1
    if not isinstance(node, yaml.ScalarNode):
        raise _error(source, line, f"'{field}' must be a single value")
    loader = yaml.SafeLoader("")
    try:
        value: Any = loader.construct_object(node, deep=True)
    except ValueError:  # int() of 4,300+ digits, a date such as 2001-13-45: the text it is
        value = node.value
    except yaml.YAMLError:  # a tag the safe schema has no type for (`!!python/object:x a`)
        what = f"'{field}' is tagged {node.tag[:60]!r}, a YAML type dtrun does not read"
        raise _error(source, line, what, "remove the tag (the word from '!' before it)") from None
    finally:
        loader.dispose()
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _error(source, line, f"'{field}' is {value!r}, not a whole number")
    elif kind is str:
        if value is None:
            raise _error(source, line, f"'{field}' has no value", "give it one, or remove the line")
        if field in _HOST_FIELDS and not isinstance(value, str):
            raise _error(
                source,
                line,
                f"'{field}' {node.value} is {_yaml_kind(value)} to YAML, not a host name",
                f"give the host's name or address; if {node.value} is one, quote it: "
                f"'{node.value}'",
            )
        # as written: YAML 1.1 reads `user: 0123` as the number 83 and `interface: on` as True
        value = node.value
        control = control_character(value)
        if control:
            raise _error(
                source,
                line,
                f"'{field}' holds a control character ({control})",
                "write it on one line, without escapes such as \\n in a quoted string",
            )
        _check_name(field, value, source, line)
    return value


# A host that YAML reads as another type (`hosts: [true, 1.5, 10:20]`: True, 1.5, 620) was a
# typing slip more likely than a machine's name; quoted, it is taken as written.
_HOST_FIELDS = frozenset({"host", "address"})


def _yaml_kind(value: object) -> str:
    if isinstance(value, bool):
        return "a true/false value"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, (datetime.date, datetime.datetime)):
        return "a date"
    return f"a {type(value).__name__}"


# The fields that name a machine, an account, an interface or a directory on the nodes: they
# reach ssh, launchers, scripts and their comments.
_NAME_CHECKS: dict[str, Callable[[str], str | None]] = {
    "host": host_problem,
    "address": host_problem,
    "user": login_problem,
    "interface": interface_problem,
    "workdir": workdir_problem,
    "shared": shared_problem,
    "python": node_dir_problem,
}


def _jump_problem(value: str) -> str | None:
    """``[USER@]HOST[:PORT]``, as ssh's ProxyJump writes one jump host. The value is not quoted
    back: a password written into it (``user:pw@host``) must not reach the terminal."""
    user, at, rest = value.rpartition("@")
    host, colon, port = rest.partition(":")
    if (at and login_problem(user)) or host_problem(host) or (colon and not is_port(port)):
        return "is not [USER@]HOST[:PORT] (a login name, a host name or address, a port 1 to 65535)"
    return None


# The fields that are directories on the nodes: each reaches PYTHONPATH (the code directory
# under workdir or shared, and the step hook's under it) or a launcher's command line.
_PATH_FIELDS = frozenset({"workdir", "shared", "python"})


def _check_name(field: str, value: str, source: str, line: int) -> None:
    if field in _PATH_FIELDS and os.pathsep in value:
        raise _error(
            source,
            line,
            f"'{field}' {value!r} holds '{os.pathsep}', which splits PYTHONPATH in two",
            f"give a directory whose path has no '{os.pathsep}' (a symbolic link to it will do)",
        )
    check = _NAME_CHECKS.get(field)
    problem = check(value) if check else None
    if problem:
        raise _error(source, line, f"'{field}' {value!r} {problem}")
    if field == "jump" and ":" in value.rpartition("@")[0]:  # never shown: it is a password
        raise _error(
            source,
            line,
            "'jump' holds a password (USER:PASSWORD@HOST)",
            "ssh takes none there: write jump: USER@HOST[:PORT] and let the jump host accept "
            "your key (ssh-agent, `key:` or ~/.ssh/config)",
        )
    jump_problem = _jump_problem(value) if field == "jump" else None
    if jump_problem:
        raise _error(
            source,
            line,
            f"'jump' {jump_problem}",
            "give the jump host as ProxyJump takes it, e.g. admin@203.0.113.7:22; a password "
            "has no place there: use a key (the hosts file's key:, or ~/.ssh/config)",
        )


def _fields(node: yaml.Node, source: str, allowed: set[str], what: str) -> dict[str, yaml.Node]:
    if not isinstance(node, yaml.MappingNode):
        raise _error(source, node.start_mark.line + 1, f"{what} must be a mapping of fields")
    fields: dict[str, yaml.Node] = {}
    for key_node, value_node in node.value:
        key = str(key_node.value)
        line = key_node.start_mark.line + 1
        if key not in allowed:
            import difflib  # only for a "did you mean"

            close = difflib.get_close_matches(key, sorted(allowed), n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise _error(
                source,
                line,
                f"unknown field '{key}'",
                f"{hint}fields: {', '.join(sorted(allowed))}",
            )
        if key in fields:
            raise _error(source, line, f"field '{key}' appears twice")
        fields[key] = value_node
    return fields


def _port(node: yaml.Node, source: str) -> int:
    port: int = _scalar(node, source, "port", int)
    if not 1 <= port <= 65535:
        raise _error(
            source,
            node.start_mark.line + 1,
            f"'port' is {port}, not 1 to 65535",
            "give the port the host's sshd listens on (22 unless it was changed), or leave "
            "'port' out to take ~/.ssh/config's",
        )
    return port


def _count(node: yaml.Node, source: str, field: str) -> int:
    count: int = _scalar(node, source, field, int)
    if problem := count_problem(field, count):
        raise _error(source, node.start_mark.line + 1, problem)
    return count


# The files `key:` and `known_hosts:` name are read whole, by asyncssh: /dev/zero, a FIFO or a
# sparse file of gigabytes hung dtrun or filled the memory. An OpenSSH key is a few kB (RSA
# 16384: 12 kB); a known_hosts of 10,000 nodes with three keys each, about 10 MB.
_MOST_BYTES = {"key": KEY_MOST_BYTES, "known_hosts": 256 * 1024 * 1024}


def _path(node: yaml.Node, source: str, field: str) -> str:
    """A file on this machine, '~' and '~user' expanded as `ssh` expands them: a regular file
    of at most _MOST_BYTES where it exists (asyncssh reads it whole)."""
    given: str = _scalar(node, source, field, str)
    line = node.start_mark.line + 1
    try:
        path = Path(given).expanduser()
    except RuntimeError:  # '~name' of no user here, or '~' with no home directory
        raise _error(
            source,
            line,
            f"'{field}' is {given!r}: this machine has no home directory for its '~'",
            "give the full path",
        ) from None
    try:
        found = path.stat()
    except OSError:  # not there (yet): the key's reader or --accept-new-host-keys says so
        return str(path)
    if not stat.S_ISREG(found.st_mode):
        raise _error(source, line, f"'{field}' {given!r} is not a file", "give a file's path")
    if found.st_size > _MOST_BYTES[field]:
        raise _error(
            source,
            line,
            f"'{field}' {given!r} is {found.st_size:,} bytes, more than any {field} file "
            f"({_MOST_BYTES[field]:,})",
            "give the path of the file itself",
        )
    return str(path)


def parse_yaml_hosts(text: str, source: str, defaults: Defaults) -> Inventory:
    try:
        # libyaml's parser where PyYAML has it (its wheels do): it refuses nesting past 1,000
        # levels, where the pure-Python one recursed past Python's limit and printed a
        # traceback (runner/predict/files.py, _safe_loader)
        root = yaml.compose(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise _error(source, line, f"not valid YAML ({getattr(exc, 'problem', exc)})") from None
    except RecursionError:  # the pure-Python parser, nested thousands deep
        raise _error(source, 1, "not valid YAML (nested too deep)") from None
    if root is None:
        raise _error(source, 1, "the file is empty", "list the hosts under 'hosts:'")
    top = _fields(root, source, TOP_FIELDS, "the file")
    if "hosts" not in top:
        raise _error(source, 1, "there is no 'hosts' list", "add hosts: [10.0.0.4, 10.0.0.5]")
    read: dict[str, Callable[[yaml.Node], Any]] = {
        "user": lambda n: _scalar(n, source, "user", str),
        "port": lambda n: _port(n, source),
        "key": lambda n: _path(n, source, "key"),
        "slots": lambda n: _count(n, source, "slots"),
        "cpus": lambda n: _count(n, source, "cpus"),
    }
    common = {name: read[name](node) for name, node in top.items() if name in read}
    hosts_node = top["hosts"]
    if not isinstance(hosts_node, yaml.SequenceNode) or not hosts_node.value:
        raise _error(source, hosts_node.start_mark.line + 1, "'hosts' must be a non-empty list")
    nodes = []
    seen: dict[tuple[str, int | None], int] = {}
    for index, item in enumerate(hosts_node.value):
        line = item.start_mark.line + 1
        if isinstance(item, yaml.ScalarNode):
            fields: dict[str, Any] = {"host": _scalar(item, source, "host", str)}
        else:
            given = _fields(item, source, HOST_FIELDS, f"host {index + 1}")
            if "host" not in given:
                raise _error(source, line, f"host {index + 1} has no 'host' field")
            fields = {
                name: read[name](node) if name in read else _scalar(node, source, name, str)
                for name, node in given.items()
            }
        merged = {**common, **fields}
        host, port = merged["host"], merged.get("port")  # None: the ssh config's, else 22
        if (same_host(host), port) in seen:
            also = seen[same_host(host), port]
            raise _error(source, line, f"{host}:{port or 22} is listed twice (also line {also})")
        seen[same_host(host), port] = line
        nodes.append(
            Node(
                name=f"node-{index}",
                address=merged.get("address", host),
                slots=merged.get("slots", 1),
                cpus=merged.get("cpus", os.cpu_count() or 1),
                ssh_host=host,
                ssh_port=port,
                ssh_user=merged.get("user"),
                ssh_key=merged.get("key"),
            )
        )
    return _inventory(source, tuple(nodes), top, common, defaults)


def _inventory(
    source: str,
    nodes: tuple[Node, ...],
    top: dict[str, yaml.Node],
    common: dict[str, Any],
    defaults: Defaults,
) -> Inventory:
    """``top``: the file's top-level fields; ``common``: the per-host defaults read from them."""

    def text(field: str, default: str | None) -> str | None:
        return _scalar(top[field], source, field, str) if field in top else default

    size = text("size", None)
    if size is not None and size not in SIZES:
        raise _error(
            source, top["size"].start_mark.line + 1, f"'size' {size!r} is not in the catalog"
        )
    accelerator_name = text("accelerator", "cuda" if size and SIZES[size].gpu_count else "cpu")
    try:
        accelerator = Accelerator(str(accelerator_name))
    except ValueError:
        line = top["accelerator"].start_mark.line + 1
        raise _error(
            source, line, f"'accelerator' is {accelerator_name!r}", "use cpu or cuda"
        ) from None
    workdir = text("workdir", "/tmp/dtrun") or "/tmp/dtrun"
    shared = text("shared", None)
    jump = text("jump", None)
    known_hosts = text("known_hosts", None)
    return Inventory(
        source=f"hosts:{source}",
        nodes=nodes,
        python_bin=text("python", defaults.python_bin) or defaults.python_bin,
        code_dir=f"{shared}/.dtrun/code" if shared else f"{workdir}/{defaults.code_dir_name}",
        accelerator=accelerator,
        size=size,
        ssh=SshAccess(
            # Unsaid, the user and port come from the user's ~/.ssh/config for each host, as
            # `ssh HOST` would take them (then the local user and 22).
            user=str(common["user"]) if "user" in common else None,
            port=int(str(common["port"])) if "port" in common else None,
            # Head-only launchers ssh from node 0 with the same key path (docs/clusters.md).
            identity_file=str(common["key"]) if "key" in common else None,
            jump_host=jump,
            workdir=workdir,
            known_hosts_file=_path(top["known_hosts"], source, "known_hosts")
            if known_hosts
            else None,
        ),
        interface=text("interface", "eth0") or "eth0",
        shared_dir=shared,
    )


def _from_entries(source: str, entries: tuple[Entry, ...], defaults: Defaults) -> Inventory:
    nodes = tuple(
        Node(f"node-{index}", entry.host, slots=entry.slots, cpus=os.cpu_count() or 1)
        for index, entry in enumerate(entries)
    )
    return _inventory(source, nodes, {}, {}, defaults)


_YAML_FIELD = re.compile(r"^[A-Za-z_]+\s*:(\s|$)", re.MULTILINE)  # `hosts:`, `user: me`


def parse_hosts_file(text: str, source: str, defaults: Defaults) -> Inventory:
    """The one reader of hosts files, by their shape (docs/clusters.md, "Hosts files"): YAML
    when a line starts with a field (`hosts:`); otherwise lines, MPI `HOST slots=N` or host:slots
    lists `h1:4,h2:4`, told apart by hostlines.lines_shape."""
    if _YAML_FIELD.search(text):
        return parse_yaml_hosts(text, source, defaults)
    return _from_entries(source, read_lines(text, source), defaults)


def parse_hosts_value(value: str, defaults: Defaults) -> Inventory:
    """--hosts given the hosts themselves (hostlines.is_host_list): `h1:4,h2:4`."""
    return _from_entries(value.strip(), read_host_list(value), defaults)
