"""What a host, an address or a login name from outside may be: one check for every source
(hosts files in each dialect, --hosts, stack outputs, the node registry, Slurm's answers).

A value that fails is bad input, refused where it is read with the file and line that gave it;
it never reaches a script (docs/security.md, "Threat model"). Pure.
"""

from __future__ import annotations

import ipaddress
import os
import re

from dtrun.spec.text import CONTROL, escaped

# A host name, an ssh alias or an IPv4 address: what ssh, OpenMPI and Slurm take as a host.
# No leading '-' (ssh would read an option), no space, quote, '$', ';' or control character.
HOST_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# A login name as POSIX and useradd take it (a trailing '$' is Samba's machine accounts).
LOGIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\$?")
# The longest each can be: a domain name's text, 253 characters (RFC 1035 §2.3.4: 255 octets
# with its length bytes); a login name, 255 (Linux's LOGIN_NAME_MAX, 256 with its end).
HOST_NAME_MOST = 253
LOGIN_NAME_MOST = 255


def is_ipv6(text: str) -> bool:
    """``text`` is an IPv6 address, its zone (``fe80::1%eth0``), if any, in a host name's
    characters: Python's ipaddress takes any text after the '%', and `fe80::1%b slots=64,x:8`
    reached a hostfile line and horovodrun's -H list as it was."""
    _, percent, zone = text.partition("%")
    if percent and not HOST_NAME.fullmatch(zone):
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def same_host(text: str) -> str:
    """``text`` as a key that two spellings of one host share: a name in lower case without a
    final dot (RFC 4343: names are case-insensitive; ``a.`` is ``a`` fully qualified), an IP
    address in its canonical form (``0::1`` is ``::1``)."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return text.lower().removesuffix(".")


def control_character(text: str) -> str | None:
    """The first control character ``text`` holds, as an escape (``\\n``), or None."""
    found = CONTROL.search(text)
    return escaped(found.group(0)) if found else None


def remember_password(text: str) -> None:
    """A host written USER:PASSWORD@HOST, as a URL's user part is: its password is masked
    wherever dtrun prints it, the error that refuses the host included (docs/security.md)."""
    user, at, _ = text.rpartition("@")
    if at and ":" in user:
        from dtrun.redact import remember_secrets

        remember_secrets([user.partition(":")[2]])


# A name of numbers only (decimal, 0-led octal, 0x hex) is an IPv4 address to the C library's
# resolver (inet_aton, which getaddrinfo and ssh use): 10.0.0.010 reached 10.0.0.8, and 127.1
# and 127.0.0.01 were 127.0.0.1 listed twice. No DNS name is numbers only (RFC 3696 §2: a
# top-level domain is not all-numeric); Python's ipaddress refuses these forms for that reason.
_NUMBERS_ONLY = re.compile(r"(?:0[xX][0-9A-Fa-f]*|[0-9]+)(?:\.(?:0[xX][0-9A-Fa-f]*|[0-9]+))*\.?")


def _numbers_problem(text: str) -> str | None:
    if not _NUMBERS_ONLY.fullmatch(text):
        return None
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return (
            "is numbers only but not an IPv4 address as four numbers 0 to 255 without leading "
            "zeros: the C library reads it its own way (010 is octal 8, 127.1 is 127.0.0.1)"
        )
    return None


def host_problem(text: str) -> str | None:
    """Why ``text`` is not a host name, ssh alias or IP address; None when it is one."""
    remember_password(text)
    if len(text) > HOST_NAME_MOST:
        return f"is {len(text):,} characters long; a host name has at most {HOST_NAME_MOST}"
    if HOST_NAME.fullmatch(text):
        return _numbers_problem(text)
    if is_ipv6(text):
        return None
    control = control_character(text)
    if control:
        return f"holds a control character ({control})"
    if not text:
        return "is empty"
    if text.startswith("-"):
        return "starts with '-', which ssh would read as an option"
    return "is not a host name or address (letters, digits, '.', '_' and '-', or IPv6)"


def is_port(text: str) -> bool:
    """``text`` is a TCP port as written after a host's ':': ASCII digits, 1 to 65535 ('²' is a
    digit to str.isdigit, and int() refuses it)."""
    return text.isascii() and text.isdigit() and len(text) <= 5 and 1 <= int(text) <= 65535


def login_problem(text: str) -> str | None:
    """Why ``text`` is not a login name; None when it is one."""
    if len(text) > LOGIN_NAME_MOST:
        return f"is {len(text):,} characters long; a login name has at most {LOGIN_NAME_MOST}"
    if LOGIN_NAME.fullmatch(text):
        return None
    control = control_character(text)
    if control:
        return f"holds a control character ({control})"
    return "is not a login name (letters, digits, '.', '_' and '-')"


# A network interface name as Linux takes one (dev_valid_name in net/core/dev.c): 1 to 15 bytes
# (IFNAMSIZ is 16 with the name's end), not '.' or '..', and no '/', ':' or white space.
INTERFACE_NAME_MOST = 15


def interface_problem(text: str) -> str | None:
    """Why ``text`` is not a Linux network interface name; None when it is one."""
    size = len(text.encode())
    if not size:
        return "is empty; a network interface name has 1 to 15 bytes"
    if size > INTERFACE_NAME_MOST:
        return f"is {size:,} bytes long; a network interface name has at most 15"
    if text in (".", ".."):
        return "is not a network interface name (Linux takes no '.' or '..')"
    if any(c in "/:" or c.isspace() for c in text):
        return "is not a network interface name (Linux takes no '/', ':' or white space)"
    # Linux takes these, the launchers do not read them as one name: horovodrun's
    # --network-interfaces takes a leading '-' as an option, and Open MPI's btl_tcp_if_include
    # and NCCL_SOCKET_IFNAME take a ',' as a list and a leading '^' (NCCL '=' too) as a rule
    if text[0] in "-^=" or "," in text:
        return (
            "starts with '-', '^' or '=', or holds ',', which the launchers read as an option, "
            "a list or a rule, not a name; rename the interface (ip link set NAME name NEW)"
        )
    return None


def node_dir_problem(text: str) -> str | None:
    """Why ``text`` cannot be a directory on the nodes (a shared one, the code's, Python's);
    None when it can. It reaches every script, quoted, and PYTHONPATH: a relative path would be
    taken from whatever folder the script is in, and a `~` would stay a `~`."""
    if not text.startswith("/"):
        return (
            "is not an absolute path: the nodes' scripts would take it from wherever they "
            "run; give its full path, from /"
        )
    if os.pathsep in text:
        return f"holds '{os.pathsep}', which splits PYTHONPATH in two"
    return None


# The folders of the system itself: a hosts file's workdir gets dtrun's `code/` and `runs/`
# written straight into it (runner/engines/ssh/remote.py), so `workdir: /etc` wrote /etc/code and
# /etc/runs on every node where the login could (root's), and `workdir: /` wrote /code and /runs.
SYSTEM_DIRS = frozenset(
    ("bin", "boot", "dev", "etc", "home", "lib", "lib32", "lib64", "libx32", "proc", "root",
     "run", "sbin", "sys", "usr", "var")
)  # fmt: skip


def workdir_problem(text: str) -> str | None:
    """Why ``text`` cannot be the nodes' workdir; None when it can: a node directory
    (node_dir_problem) that is neither /, nor a system folder (SYSTEM_DIRS, and any folder
    directly under /usr), nor holds a folder name that starts or ends with white space."""
    return _own_dir_problem(
        text,
        "dtrun writes its code/ and runs/ straight into the workdir",
        "a folder of dtrun's own, such as /tmp/dtrun",
    )


def shared_problem(text: str) -> str | None:
    """Why ``text`` cannot be the nodes' shared folder, as workdir_problem: dtrun writes its
    .dtrun/ folder (code, runs) into it, so `shared: /` wrote /.dtrun on every node."""
    return _own_dir_problem(
        text,
        "dtrun writes its .dtrun/ folder into the shared folder",
        "a folder every host mounts, such as /shared/dtrun",  # not /tmp: each host's own
    )


def _own_dir_problem(text: str, writes: str, instead: str) -> str | None:
    problem = node_dir_problem(text)
    if problem:
        return problem
    parts = [part for part in text.split("/") if part not in ("", ".")]
    if any(part != part.strip() for part in parts):
        return "holds a folder name that starts or ends with white space; give the path without it"
    kept: list[str] = []
    for part in parts:  # '..' taken as written, as the nodes' sh takes it without links
        if part == "..":
            kept = kept[:-1]
        else:
            kept.append(part)
    top = not kept or (len(kept) == 1 and kept[0] in SYSTEM_DIRS)
    if top or (len(kept) == 2 and kept[0] == "usr"):  # /usr/local, /usr/share, ...
        return f"is {'/' + '/'.join(kept)}, a folder of the system: {writes}; give {instead}"
    return None
