"""What `dtrun check` prints and writes: the table of nodes, the slow links, and the hosts
file without the flagged nodes (docs/check.md, "Output")."""

from __future__ import annotations

import contextlib
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dtrun.cli.common import console
from dtrun.cli.inert import styled
from dtrun.cli.tables import Column, Grid, print_grid
from dtrun.errors import UsageError
from dtrun.spec.text import one_line, plural

if TYPE_CHECKING:
    from dtrun.check.model import NodeCheck
    from dtrun.spec.cluster import Inventory
    from dtrun.sweep.check import CheckRun


def _figure(value: Any, unit: str) -> str:
    """Three figures below 1,000, whole above (an H200's 4,272 GB/s, never 4.27e+03)."""
    if not isinstance(value, int | float):
        return "-"
    # 999.5 rounds to three figures as 1e+03: whole from there
    return f"{value:.3g} {unit}" if abs(value) < 999.5 else f"{value:,.0f} {unit}"


def _row(node: NodeCheck, gpus: bool) -> tuple[str, ...]:
    figures = node.figures
    compute = figures.get("compute_gflops")
    compute_text = (
        _figure(compute / 1e3, "TFLOP/s") if gpus and isinstance(compute, float)
        else _figure(compute, "GFLOP/s")
    )  # fmt: skip
    pairs = figures.get("pairs", 0)
    network = _figure(figures.get("network_busbw_gbs"), "GB/s")
    if pairs:
        network += f" ({plural(pairs, 'pair')})"
    return (
        node.host,
        compute_text,
        _figure(figures.get("memory_gbs"), "GB/s"),
        network,
        node.verdict.value,
        node.cause.value if node.cause else "",
        "; ".join(node.evidence),
    )


def print_report(done: CheckRun, *, wide: bool = False) -> None:
    report = done.report
    gpus = done.measured.device == "cuda"
    columns = (
        Column("host", 10, "left", wrap=True), Column("compute", 7), Column("memory", 6),
        Column("network", 5), Column("verdict", 9, "left"), Column("cause", 8, "left"),
        Column("evidence", 4, "left", wrap=True),
    )  # fmt: skip
    rows = [_row(node, gpus) for node in report.nodes]
    out = console()
    print_grid(out, Grid(columns, rows, hint="--wide shows every column"), wide=wide)
    for link in report.slow_links:
        out.print(one_line(f"slow link {link.a} - {link.b}: {link.evidence}"), highlight=False)
    from dtrun.check.model import LinkVerdict  # not on --help's path

    for link in (link for link in report.links if link.verdict is LinkVerdict.UNJUDGED):
        out.print(one_line(
            f"note: link {link.a} - {link.b} ({_figure(link.busbw_gbs, 'GB/s')}) unjudged: "
            "no other pair, and no busbw expected of these nodes"
        ), highlight=False)  # fmt: skip
    for group in (group for group in report.groups if group.follow):
        said = "slow group" if group.slow else "note: a group"
        levels = f"at {group.levels} levels running" if group.levels > 1 else "at one level only"
        out.print(
            one_line(
                f"{said} (bisection level {group.level}, slow {levels}): {group.evidence}; "
                f"{group.follow}"
            ),
            highlight=False,
        )
    flagged = report.flagged_nodes
    if not flagged and not report.slow_links and not report.slow_groups:
        out.print(styled(
            ("ok", "green"),
            f" {plural(len(report.nodes), 'node')}, {plural(len(report.links), 'pair')}"
            f" checked in {done.wall_s:.0f} s: nothing flagged; {done.run_dir.path}/check.json",
        ))  # fmt: skip
        return
    names = ", ".join(f"{node.host} ({node.cause.value if node.cause else node.verdict.value})"
                      for node in flagged)  # fmt: skip
    what = [f"{plural(len(flagged), 'node')}: {names}"] if flagged else []
    what += [f"{plural(len(report.slow_links), 'slow link')}"] if report.slow_links else []
    what += [f"{plural(len(report.slow_groups), 'slow group')}"] if report.slow_groups else []
    out.print(styled(
        ("flagged", "red"),
        f" {'; '.join(what)} (in {done.wall_s:.0f} s; {done.run_dir.path}/check.json)",
    ))  # fmt: skip


# The hosts file's fields that are whole numbers (runner/engines/ssh/hosts.py); every other
# value is text as written, as the check read it: YAML 1.1 reads `0755` as 493 and `on` as true
WHOLE_FIELDS = frozenset({"port", "slots", "cpus"})


def _yaml_hosts(text: str) -> dict[str, Any] | None:
    """A hosts file's ``text`` when it is YAML with a hosts list; None otherwise."""
    import yaml

    try:
        # libyaml's where PyYAML has it: nesting past 1,000 levels is an error, not a recursion
        loader = getattr(yaml, "CBaseLoader", yaml.BaseLoader)  # every value as written
        data = yaml.load(text, Loader=loader)
        if isinstance(data, dict) and isinstance(data.get("hosts"), list):
            hosts = [_whole(e) if isinstance(e, dict) else e for e in data["hosts"]]
            return {**_whole(data), "hosts": hosts}
    except (yaml.YAMLError, RecursionError, ValueError):
        pass  # ValueError: a YAML type that raises (a port of 4,300 digits)
    return None


def _whole(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with each whole-number field's text read as YAML reads it (`0x8AE`: 2222)."""
    import yaml

    return {
        key: yaml.safe_load(value) if key in WHOLE_FIELDS and isinstance(value, str) else value
        for key, value in fields.items()
    }


def _entry_host(entry: Any) -> tuple[str, str]:
    """(host, host:port) of a YAML hosts entry."""
    if isinstance(entry, dict):
        host = str(entry.get("host", ""))
        port = entry.get("port")
        return host, f"{host}:{port}" if port is not None else host
    return str(entry), str(entry)


def kept_hosts(inventory: Inventory, flagged: set[str], labels: dict[str, str]) -> dict[str, Any]:
    """The hosts file's own YAML, as the check read it (Inventory.hosts_text: not read again),
    without the flagged hosts; or a YAML hosts list of the inventory's other nodes (a hosts
    file of lines, or no hosts file)."""
    text = inventory.hosts_text
    data = _yaml_hosts(text) if text is not None else None
    if data is not None:
        kept = [e for e in data["hosts"] if not {*_entry_host(e)} & flagged]
        return {**data, "hosts": kept}
    entries: list[dict[str, Any]] = []
    for node in inventory.nodes:
        if labels.get(node.name, node.name) in flagged:
            continue
        entry: dict[str, Any] = {"host": node.ssh_host or node.address}
        if node.ssh_port is not None:
            entry["port"] = node.ssh_port
        if node.slots != 1:
            entry["slots"] = node.slots
        entries.append(entry)
    return {**_access(inventory), "hosts": entries}


def _access(inventory: Inventory) -> dict[str, Any]:
    """How a hosts file reaches the nodes as the inventory did (docs/clusters.md, "Hosts
    files"): a stack's head as the jump host, its user, port, Python and shared storage. Not its
    private key nor its known hosts: a secret, and lines where a hosts file names a file."""
    ssh = inventory.ssh
    if ssh is None:
        return {}
    fields = {"user": ssh.user, "port": ssh.port, "jump": ssh.jump_host}
    if inventory.source.startswith("stack:"):
        from dtrun.azure.catalog import SIZES

        fields |= {"python": inventory.python_bin, "shared": inventory.shared_dir,
                   "accelerator": inventory.accelerator.value,
                   "size": inventory.size if inventory.size in SIZES else None}  # fmt: skip
    return {name: value for name, value in fields.items() if value is not None}


def refuse_hosts_target(path: Path) -> None:
    """--write-hosts' file, refused before the check runs where write_hosts_file would refuse
    it after: a link, something not a file at its name, a folder that is not there."""
    from dtrun.workloads.files import refuse_link

    problem = None
    try:
        refuse_link(path)
    except OSError as exc:
        problem = exc.strerror
    if problem is None and (path.exists() and not path.is_file()):
        problem = "it is not a plain file"
    if problem is None and not path.parent.is_dir():
        problem = f"the folder {path.parent} is not there"
    if problem is not None:
        raise UsageError(
            f"cannot write --write-hosts {path}",
            why=f"{problem}; nothing was run",
            fix="pass a path in a directory you can write (not a link)",
        )


def _mode(path: Path, source: str | None) -> int:
    """The written file's mode: the one it replaces, else its source hosts file's (a 0600 file
    stays 0600), else 0644."""
    for given in (path, Path(source) if source else None):
        with contextlib.suppress(OSError):
            if given is not None and stat.S_ISREG(mode := given.stat().st_mode):
                return stat.S_IMODE(mode)
    return 0o644


def write_hosts_file(path: Path, inventory: Inventory, done: CheckRun, flagged: set[str]) -> None:
    """--write-hosts: whole or not at all, never through a link."""
    import yaml

    from dtrun.workloads.files import write_atomic

    source = (
        inventory.source.removeprefix("hosts:") if inventory.source.startswith("hosts:") else None
    )
    data = kept_hosts(inventory, flagged, done.hosts)
    if not data["hosts"]:
        console(stderr=True).print(
            f"dtrun: every node was flagged; {path} not written", highlight=False
        )
        return
    try:
        write_atomic(path, yaml.safe_dump(data, sort_keys=False).encode(), _mode(path, source))
    except OSError as exc:
        raise UsageError(
            f"cannot write --write-hosts {path}",
            why=exc.strerror or str(exc),
            fix="pass a path in a directory you can write (not a link)",
        ) from None
    console().print(
        f"dtrun: wrote {path}: {plural(len(data['hosts']), 'host')}"
        + (f", without {', '.join(sorted(flagged))}" if flagged else ""),
        highlight=False,
    )
