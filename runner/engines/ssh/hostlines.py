"""Hosts as the MPI ecosystem writes them: hostfile lines and host:slots lists.

Two shapes, told apart line by line (``lines_shape``), each read by one function that names the
file and line (or the --hosts item) of every mistake:

- MPI lines (OpenMPI, DeepSpeed, Volcano's ``MLP_MPI_HOSTFILE``): ``HOST [slots=N]
  [max_slots=N]``, one host a line; a plain list of hosts is the case with no ``slots=``.
- host:slots lists (Horovod's ``-H``, Volcano's ``MLP_MPI_HOSTS``, OpenMPI's ``--host``):
  ``h1:4,h2:4``, on one line or several, or given to --hosts itself.

Pure: text in, entries out; hosts.py makes them an Inventory. Sources: docs/clusters.md
("Hosts files").
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from dataclasses import dataclass

from dtrun.cluster.names import HOST_NAME, host_problem, is_ipv6, remember_password, same_host
from dtrun.errors import InventoryError
from dtrun.spec.bounds import bound_of
from dtrun.spec.request import LaunchRequest

# Above this a host:slots list's `:N` is more likely an SSH port than processes on one host
# (`h1:22`, `h1:2222`); a hostfile line `HOST slots=N` says slots unambiguously and has no cap.
MAX_LIST_SLOTS = 64
# A host runs at most as many processes as --procs-per-node takes, and has at most as many CPUs
# as Linux is built for (CONFIG_NR_CPUS: 8,192): cpus reached the nodes as OMP_NUM_THREADS, and
# 10^11 was passed on as it was.
MOST = {
    "slots": (bound_of(LaunchRequest, "procs_per_node").high, "--procs-per-node's most"),
    "max_slots": (bound_of(LaunchRequest, "procs_per_node").high, "--procs-per-node's most"),
    "cpus": (8192, "the most CPUs Linux is built for, CONFIG_NR_CPUS"),
}


def count_problem(field: str, count: int) -> str | None:
    """Why ``count`` cannot be the hosts file's ``field``, or None."""
    if count < 1:
        return f"'{field}' is {count}, not at least 1"
    most, why = MOST[field]
    return f"'{field}' is {count}, more than {most:,.0f} ({why})" if count > most else None


_LIST_FIX = "items are HOST or HOST:SLOTS, e.g. gpu-a:4,gpu-b:4 ([fe80::1]:4 for IPv6)"


_FORMAT_FIX = (
    'correct that line; docs/clusters.md ("Hosts files") shows each accepted shape and field'
)


class HostsFileError(InventoryError):
    """A hosts file (or --hosts value) dtrun cannot use."""


def located(where: str, what: str, fix: str = "") -> HostsFileError:
    """An error at ``where``: "hosts.txt, line 3" or "--hosts value, item 2"."""
    # every mistake says what to do: its own fix, else where the format is written down
    return HostsFileError(f"{where}: {what}", fix=fix or _FORMAT_FIX)


class Shape(enum.Enum):
    """What a line of a hosts file (that is not YAML) is written as."""

    MPI = "an MPI hostfile line (HOST slots=N)"
    LIST = "a host:slots list (HOST:SLOTS,HOST:SLOTS)"


@dataclass(frozen=True)
class Entry:
    """One host as a file or --hosts value gave it."""

    host: str  # an address or name as ssh takes it: IPv6 without brackets
    slots: int
    at: str  # "line 3" or "item 2", for errors that point back at it


def _digits(text: str) -> bool:
    """ASCII digits only: str.isdigit() holds for '²', which int() refuses."""
    return text.isascii() and text.isdigit()


# More digits than any count a hosts file holds; int() refuses 4,300 with a ValueError
MOST_DIGITS = 30


def _too_long(where: str, what: str, digits: str, fix: str) -> HostsFileError | None:
    if _digits(digits) and len(digits) > MOST_DIGITS:
        return located(where, f"{what} a number of {len(digits):,} digits", fix)
    return None


def _has_slots(word: str) -> bool:
    """``h1:4`` or ``[fe80::1]:4``; not a bare IPv6 address such as ``fe80::1``."""
    return bool(re.fullmatch(r"[^:\[\]]+:\d+|\[[^\]]*\]:\d+", word))


def _line_shape(line: str) -> Shape | None:
    """None: a lone host, which either shape reads the same (one slot)."""
    words = line.split()
    if any("=" in word for word in words[1:]):
        return Shape.MPI
    if "," in line or (len(words) == 1 and _has_slots(words[0])):
        return Shape.LIST
    return None if len(words) == 1 else Shape.MPI


def _content(text: str) -> list[tuple[int, str]]:
    """(line number, text) of the lines that say something: comments and blanks dropped."""
    lines = (
        (number, raw.split("#", 1)[0].strip()) for number, raw in enumerate(text.splitlines(), 1)
    )
    return [(number, line) for number, line in lines if line]


def lines_shape(text: str, source: str) -> Shape:
    """The shape of a hosts file of lines; a file mixing the two is refused at the first line
    that disagrees. A file of lone hosts reads the same either way (MPI)."""
    first: tuple[int, Shape] | None = None
    for number, line in _content(text):
        shape = _line_shape(line)
        if shape is None:
            continue
        if first is None:
            first = number, shape
        elif shape is not first[1]:
            raise located(
                f"{source}, line {number}",
                f"{line!r} is {shape.value}, and line {first[0]} is {first[1].value}: "
                "a file holds one shape",
                "write every line as HOST slots=N (OpenMPI, DeepSpeed), or every line as "
                "HOST:SLOTS items (Horovod -H); an SSH port goes in ~/.ssh/config (Host HOST / "
                "Port N) or a YAML hosts file (port:)",
            )
    return first[1] if first is not None else Shape.MPI


def _bracketed(word: str, where: str) -> str:
    """``[v6]`` -> ``v6``; other words as they are."""
    if not word.startswith("["):
        return word
    inner = word[1:].removesuffix("]")
    if not word.endswith("]") or not is_ipv6(inner):
        raise located(where, f"{word!r} is not an IPv6 address in brackets", _LIST_FIX)
    return inner


def _mpi_line(line: str, where: str, at: str) -> Entry:
    words = line.split()
    host = words[0]
    if _has_slots(host):
        raise located(
            where,
            f"{host!r} gives a port, and an MPI hostfile line names a host only",
            "write `HOST slots=N`, and give the SSH port in ~/.ssh/config (Host HOST / "
            "Port N) or use a YAML hosts file with `port:`",
        )
    counts: dict[str, int] = {}
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if key not in ("slots", "max_slots") or not sep:
            raise located(where, f"'{word}' is not slots=N", "write lines as HOST slots=N")
        if key in counts:  # which one is meant? (the YAML reader refuses a key twice too)
            raise located(
                where,
                f"'{key}' is given twice on the line",
                f"write {key}=N once, with the number of processes the host runs",
            )
        if error := _too_long(where, f"'{key}' is", value, f"write {key}=N, e.g. {key}=8"):
            raise error
        if not _digits(value) or int(value) < 1:
            raise located(
                where,
                f"'{key}' is {value!r}, not a whole number of at least 1",
                f"write {key}=N with the number of processes the host runs, e.g. {key}=8",
            )
        if problem := count_problem(key, int(value)):
            raise located(where, problem, f"write {key}=N with the processes the host runs")
        counts[key] = int(value)
    # OpenMPI: with max_slots alone, "the slots value defaults to the limit" (mpirun(1))
    slots = counts.get("slots", counts.get("max_slots", 1))
    named = _bracketed(host, where)
    problem = host_problem(named)
    if problem:
        raise located(where, f"the host {host!r} {problem}", "write lines as HOST slots=N")
    return Entry(named, slots, at)


def _split_item(item: str) -> tuple[str, str | None]:
    """An item's host and the text after its `:` (None: no `:N`)."""
    if item.startswith("["):
        host, close, rest = item.partition("]")
        if rest and not rest.startswith(":"):
            return item, None  # `[v6]x`: refused as not an address in brackets
        return host + close, rest[1:] if rest else None
    if item.count(":") > 1:
        return item, None  # a bare IPv6 address: its last `:N` is part of it
    host, colon, slots = item.partition(":")
    return host, slots if colon else None


def _list_item(item: str, where: str, at: str) -> Entry:
    written, slots_text = _split_item(item)
    host = _bracketed(written, where)
    remember_password(written)  # USER:PASSWORD@HOST: quoted below, masked
    if host == written and not (HOST_NAME.fullmatch(host) or is_ipv6(host)):
        raise located(where, f"{written!r} is not a host name or address", _LIST_FIX)
    if problem := host_problem(host):  # its length: a hostfile line's host is held to it too
        raise located(where, f"the host {problem}", _LIST_FIX)
    if slots_text is None:
        return Entry(host, 1, at)
    if error := _too_long(where, f"the slots of {written!r} are", slots_text, _LIST_FIX):
        raise error
    if not _digits(slots_text) or int(slots_text) < 1:
        raise located(
            where,
            f"{item!r}: the slots after ':' are {slots_text!r}, not a whole number of at least 1",
            _LIST_FIX,
        )
    if int(slots_text) > MAX_LIST_SLOTS:
        raise located(
            where,
            f"{item!r} gives {slots_text} slots: in a host:slots list `:N` is processes on "
            f"the host, at most {MAX_LIST_SLOTS}",
            "if you meant a port, give it in ~/.ssh/config (Host HOST / Port N) or a YAML "
            f"hosts file (port:); for more than {MAX_LIST_SLOTS} processes a host, write a "
            "hostfile line HOST slots=N",
        )
    return Entry(host, int(slots_text), at)


def _items(line: str) -> list[str]:
    """Comma-separated items; one comma at the end is allowed (a list continued on the next
    line), an empty item between two commas is not."""
    items = [item.strip() for item in line.split(",")]
    return items[:-1] if len(items) > 1 and not items[-1] else items


def _unique(entries: list[Entry], source: str) -> tuple[Entry, ...]:
    seen: dict[str, Entry] = {}
    for entry in entries:
        if same_host(entry.host) in seen:
            also = seen[same_host(entry.host)].at
            raise located(
                f"{source}, {entry.at}",
                f"{entry.host} is listed twice (also {also})",
                "list each host once, with its slots (OpenMPI's -H counts a repeated host as "
                "one more slot: write aa:2 for aa,aa)",
            )
        seen[same_host(entry.host)] = entry
    return tuple(entries)


def _list_line(line: str, where: str, at: str) -> list[Entry]:
    items = _items(line)
    if "" in items:
        raise located(where, "an empty item between two commas", _LIST_FIX)
    return [_list_item(item, where, at) for item in items]


_READERS: dict[Shape, Callable[[str, str, str], list[Entry]]] = {
    Shape.MPI: lambda line, where, at: [_mpi_line(line, where, at)],
    Shape.LIST: _list_line,
}


def read_lines(text: str, source: str) -> tuple[Entry, ...]:
    """The hosts of a file of lines, each line read as the file's shape (``lines_shape``)."""
    read = _READERS[lines_shape(text, source)]
    entries: list[Entry] = []
    for number, line in _content(text):
        entries += read(line, f"{source}, line {number}", f"line {number}")
    if not entries:
        raise located(
            f"{source}, line 1", "no hosts in the file", "write one line per host: HOST slots=N"
        )
    return _unique(entries, source)


HOSTS_VALUE = "--hosts value"


def is_host_list(value: str) -> bool:
    """--hosts given the hosts themselves rather than a file: no ``/``, and a comma or a final
    ``:N`` (``h1:4,h2:4``, ``10.0.0.4:8``, ``"$MLP_MPI_HOSTS"``). A lone word such as ``gpu0``
    is a file name; an existing file of the value's name wins (the caller checks)."""
    value = value.strip()
    return "/" not in value and ("," in value or _has_slots(value))


def read_host_list(value: str) -> tuple[Entry, ...]:
    """The hosts of a --hosts value ``h1:4,h2:4``; errors name the item."""
    entries: list[Entry] = []
    for index, item in enumerate(_items(value.strip()), start=1):
        where = f"{HOSTS_VALUE}, item {index}"
        if not item:
            raise located(where, "empty (two commas in a row)", _LIST_FIX)
        entries.append(_list_item(item, where, f"item {index}"))
    return _unique(entries, HOSTS_VALUE)
