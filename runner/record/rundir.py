"""The run directory: what a sweep records, where, and how it is read back.

    runs/<run-id>/
      manifest.json     what was asked and where it ran (bench spec, inventory, machine, versions)
      plan/n<N>/        every node's rendered launch script and launch file for each node count
      n<N>/r<k>/        one launch: node scripts, node logs, result.json from rank 0
      runs.json         how every launch ended, rewritten after each one
      summary.json      derived: the scaling table (rebuilt by `dtrun report`)
      health.json       the health gate's verdict, when it ran or why it did not
      health/<node>/    the gate's single-node all-reduce launch on each node
      report.md         derived: the report
      report.html       derived: the same report, self-contained (plots inlined)
      *.png             derived: throughput, efficiency and busbw plots

The derived files are made from manifest.json, runs.json and the result files alone
(read back and checked by runner/report/recorded.py).
"""

from __future__ import annotations

import datetime
import errno
import json
import os
import platform
import socket
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from dtrun import __version__
from dtrun.azure.catalog import SIZES
from dtrun.azure.prices import Price
from dtrun.errors import OutputDirError
from dtrun.record import manifest
from dtrun.record.envdigest import env_digests
from dtrun.record.readback import damaged, inside, load_json
from dtrun.record.writefail import removed, with_cut_logs, write_error
from dtrun.record.writer import hold_writer
from dtrun.redact import Redactor, redact_data, redact_text, redact_var
from dtrun.spec.cluster import Inventory, usable_cpus
from dtrun.spec.launchplan import EnvVar, LaunchPlan, point_dir
from dtrun.spec.outcome import Health, NodeResult, RunStatus
from dtrun.spec.request import NOISY_LEFT_OUT, BenchSpec, RunSpec
from dtrun.workloads.files import write_atomic

MANIFEST_SCHEMA = "dtrun.manifest/1"
HEALTH_SCHEMA = "dtrun.health/1"
HEALTH_FILE = "health.json"


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def as_json(data: object) -> str:
    """A record's text. Every string is redacted (runner/redact/): a record holds no secret
    this process was given, whichever field repeats it. NaN and infinities are refused
    (ValueError): they are not JSON (RFC 8259), and no figure dtrun records is one."""
    # paths and the like as the file has them
    plain = json.loads(json.dumps(data, default=str, allow_nan=False))
    return json.dumps(redact_data(plain), indent=2, allow_nan=False) + "\n"


def machine() -> dict[str, Any]:
    """The machine dtrun itself runs on (the embedded cluster's only machine)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable_cpus(),  # its affinity: the embedded nodes' cores
        "memory_bytes": psutil.virtual_memory().total,
        "python": platform.python_version(),
    }


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def manifest(self) -> Path:
        return self.path / "manifest.json"

    @property
    def runs(self) -> Path:
        return self.path / "runs.json"

    @property
    def summary(self) -> Path:
        return self.path / "summary.json"

    @property
    def report(self) -> Path:
        return self.path / "report.md"

    @property
    def html(self) -> Path:
        return self.path / "report.html"

    def write(self, path: Path, data: str | bytes, mode: int = 0o644) -> None:
        """The one way into the run directory: whole or not at all (runner/workloads/files.py),
        never through a link, never outside it; a failure explained (write_error)."""
        try:
            self.refuse_leaving(path.parent)
            write_atomic(path, data.encode() if isinstance(data, str) else data, mode)
        except OSError as exc:
            raise write_error(exc, self.path, path) or exc from None

    def write_json(self, path: Path, data: object) -> None:
        self.write(path, as_json(data))

    def makedirs(self, directory: Path) -> None:
        """``directory`` and its parents inside the run directory, as write explains failures;
        never the run directory itself again, should it have been removed."""
        if not self.path.is_dir():
            raise removed(self.path, f"{directory} could not be made")
        try:
            # checked before: mkdir would make the missing parts wherever a link leads
            self.refuse_leaving(next(p for p in (directory, *directory.parents) if p.exists()))
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise write_error(exc, self.path, directory) or exc from None

    def refuse_leaving(self, directory: Path) -> None:
        """OSError ELOOP when ``directory`` (inside the run directory) is, or is reached
        through, a link that leaves the run directory."""
        if not inside(directory, self.path):
            raise OSError(
                errno.ELOOP, "a symbolic link on its way leaves the run directory", str(directory)
            )

    def point(self, nodes: int, repeat: int) -> Path:
        return self.path / point_dir(nodes, repeat)

    def plan_dir(self, nodes: int) -> Path:
        return self.path / "plan" / f"n{nodes}"


def resolved_once(path: Path) -> Path:
    """``path`` with every link on the way followed, once: a run directory reached through a
    link is read and written where the link pointed then, whatever it points to later. With
    no link on the way, ``path`` as given (the paths printed stay the user's)."""
    real = Path(os.path.realpath(path))
    return path if real == path.absolute() else real


def create_run_dir(output: Path, run_id: str) -> RunDir:
    """Make runs/<run-id>/, or say why it cannot be made, before anything else happens; a
    link on the way resolved once (resolved_once)."""
    path = output / run_id
    try:
        path.mkdir(parents=True, exist_ok=False)
        probe = path / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except FileExistsError as exc:
        if exc.filename is not None and Path(exc.filename) != path:  # in the way: no folder
            raise OutputDirError(
                f"cannot write the run directory {path}",
                why=f"{exc.filename} {_not_a_folder(Path(exc.filename))}",
                fix="pass --output with a directory you can write, e.g. --output ./runs",
            ) from None
        raise OutputDirError(
            f"run directory {path} already exists",
            why="each run gets a directory of its own, so earlier results are never overwritten",
            fix="pass a new --run-id, or leave it out to get a fresh one",
        ) from None
    except OSError as exc:
        raise OutputDirError(
            f"cannot write the run directory {path}",
            why=exc.strerror or str(exc),
            fix="pass --output with a directory you can write, e.g. --output ./runs",
        ) from None
    path = resolved_once(path)
    hold_writer(path)
    return RunDir(path)


def _not_a_folder(path: Path) -> str:
    """Why ``path``, on the way to a run directory, holds none: a link to nowhere (mkdir says
    it exists; it is no folder to make one in)."""
    if path.is_symlink():
        return f"is a symbolic link to {path.readlink()}, which is not there"
    return "is not a directory"


def image_of(inventory: Inventory) -> dict[str, str | None]:
    """The nodes' image: as the cluster reported it, else the catalog's for the size."""
    if inventory.image is not None:
        return {"urn": inventory.image, "source": inventory.source}
    size = SIZES.get(inventory.size or "")
    if size is not None:
        return {"urn": size.image.urn, "source": f"the catalog's image for {size.name}"}
    return {"urn": None, "source": "unknown: the nodes' own OS (see each rank's os in results)"}


def write_manifest(
    run_dir: RunDir,
    bench: BenchSpec,
    inventory: Inventory,
    launch_env: tuple[EnvVar, ...] = (),
    price: Price | None = None,
    paid_before: dict[str, Any] | None = None,
    command: Sequence[str] | None = None,
) -> None:
    """manifest.json: everything needed to reproduce the run, secrets redacted (docs/bench.md).
    ``paid_before``: runner/record/paid.py's, None where the cluster does not say.
    ``command``: dtrun's arguments as typed (sys.argv after the program name), None where
    dtrun was not started from a command line."""
    bench_data = {**asdict(bench.redacted()), "noisy_launches": NOISY_LEFT_OUT}
    bench_data["env"] = [list(pair) for pair in bench_data["env"]]
    git = manifest.git_revision_later()  # git runs while the rest is gathered
    run_dir.write_json(
        run_dir.manifest,
        {
            "schema": MANIFEST_SCHEMA,
            "run_id": bench.run_id,
            "created_at": now_iso(),
            "dtrun_version": __version__,
            # the command line as typed, shell-quoted, secrets hidden (manifest.command_line)
            "command": _command(command, bench.secrets()),
            "machine": machine(),
            "inventory": inventory.recorded(),
            "bench": bench_data,
            # a digest of each --env value recorded redacted: `dtrun compare` tells runs whose
            # secrets differ apart by it (runner/record/envdigest.py); never the value
            "env_digests": env_digests(bench.env),
            "launcher": bench.launcher,
            "size": inventory.size,
            "image": image_of(inventory),
            # what a node costs an hour and where the figure comes from; None: no price known
            "price": asdict(price) if price is not None else None,
            # what the nodes billed before the sweep began, from when and why then (None: the
            # cluster does not say when its nodes were created)
            "paid_before": paid_before,
            "versions": manifest.versions(),
            "git": git(),
            "launch_environment": [
                {
                    "key": var.key,
                    "value": redact_var(var.key, var.value),
                    "why": var.why,
                }
                for var in launch_env
            ],
            "environment": manifest.redact_environment(os.environ),
            # this machine's steal and other load as the sweep began (embedded cluster only),
            # added by record_machine_noise once its half-second sample is done
            "noise": None,
        },
    )


def _command(command: Sequence[str] | None, secrets: Sequence[str]) -> str | None:
    return None if command is None else manifest.command_line(command, Redactor.of(secrets))


def record_resume(
    run_dir: RunDir,
    inventory: Inventory,
    kept: int,
    paid_before: dict[str, Any] | None = None,
    command: Sequence[str] | None = None,
    secrets: Sequence[str] = (),
) -> None:
    """--resume: manifest.json's ``resumed`` list says when, on which cluster, keeping what,
    with which command (``secrets`` hidden), and what that cluster billed before the resume
    began."""
    data = _manifest(run_dir)
    data.setdefault("resumed", []).append(
        {
            "at": now_iso(),
            "command": _command(command, secrets),
            "inventory": inventory.recorded(),
            "launches_kept": kept,
            "paid_before": paid_before,
            "dtrun_version": __version__,
        }
    )
    run_dir.write_json(run_dir.manifest, data)


def _manifest(run_dir: RunDir) -> dict[str, Any]:
    """manifest.json as this run wrote it, to add to; a program that wrote over it (it runs
    two levels below) leaves a damaged run, not a traceback."""
    data = load_json(run_dir.manifest, root=run_dir.path)  # a FIFO left there: not waited on
    if not isinstance(data, dict):
        raise damaged(run_dir.manifest, "it is no longer a JSON object: did the program write it?")
    return data


def record_machine_noise(
    run_dir: RunDir, sample: dict[str, Any] | None, resumed: bool = False
) -> None:
    """Add the sample of this machine before the sweep (noise_sample) to manifest.json."""
    data = _manifest(run_dir)
    if resumed:  # the original sweep's sample stays; this one goes with its resume
        data["resumed"][-1]["noise"] = sample
    else:
        data["noise"] = sample
    run_dir.write_json(run_dir.manifest, data)


def write_plans(run_dir: RunDir, plans: Sequence[LaunchPlan]) -> None:
    """plan/n<N>/: every point's scripts and launch files, as rendered before the sweep ran."""
    for plan in plans:
        directory = run_dir.plan_dir(plan.nnodes)
        run_dir.makedirs(directory)
        for launch in plan.launches:  # mode 0700: may hold --env values
            run_dir.write(directory / launch.script_name, launch.script, 0o700)
        for file in plan.files:
            path = directory / file.name
            run_dir.makedirs(path.parent)
            run_dir.write(path, file.content, file.mode)


RUN_SCHEMA = "dtrun.run/1"


def launch_dir(run_dir: RunDir) -> Path:
    """`dtrun run`'s launch directory: scripts, launch files, node logs, the program's outputs."""
    return run_dir.path / "launch"


def write_run_record(  # noqa: PLR0913 - the record's parts, each a keyword
    run_dir: RunDir,
    spec: RunSpec,
    inventory: Inventory,
    plan: LaunchPlan,
    *,
    status: RunStatus,
    error: str | None = None,
    wall_s: float | None = None,
    nodes: tuple[NodeResult, ...] = (),
    command: Sequence[str] | None = None,
) -> None:
    """run.json: what `dtrun run` was asked, where, and how it ended (secrets redacted);
    ``command``: dtrun's arguments as typed."""
    spec_data = asdict(spec.redacted())
    spec_data["env"] = [list(pair) for pair in spec_data["env"]]
    git = manifest.git_revision_later()  # git runs while the rest is gathered
    run_dir.write_json(
        run_dir.path / "run.json",
        {
            "schema": RUN_SCHEMA,
            "run_id": spec.run_id,
            "updated_at": now_iso(),
            "dtrun_version": __version__,
            # the command line as typed, shell-quoted, secrets hidden (manifest.command_line)
            "command": _command(command, spec.secrets()),
            "status": status,
            "error": redact_text(error) if error is not None else None,
            "wall_s": wall_s,
            "launcher": plan.launcher,
            "world_size": plan.world_size,
            "spec": spec_data,
            "inventory": inventory.recorded(),
            "machine": machine(),
            "nodes": [asdict(node) for node in with_cut_logs(nodes)],
            "image": image_of(inventory),
            "versions": manifest.versions(),
            "git": git(),
            "environment": manifest.redact_environment(os.environ),
        },
    )


def record_stop_after_run(run_dir: RunDir, error: str) -> None:
    """run.json of a program that ended, then had dtrun stopped (closing the cluster,
    uploading): the stop is recorded, so the record says what dtrun's exit code says."""
    path = run_dir.path / "run.json"
    amend(run_dir, path, status=RunStatus.INTERRUPTED, error=redact_text(error))


def amend(run_dir: RunDir, path: Path, **fields: str) -> None:
    """A record this run of dtrun wrote a moment ago (run.json, runs.json), ``fields`` set."""
    data = json.loads(path.read_text())
    data.update(fields, updated_at=now_iso())
    run_dir.write_json(path, data)


def write_health(run_path: Path, health: Health) -> None:
    """health.json: the health gate's verdict and every node's figure."""
    data: dict[str, Any] = {"schema": HEALTH_SCHEMA, "checked_at": now_iso(), **asdict(health)}
    RunDir(run_path).write_json(run_path / HEALTH_FILE, data)
