"""`dtrun exec --ray` on a real two-node Ray cluster (tests/raycluster.py: a head on 127.0.0.2
and a second raylet on 127.0.0.3): each node's output shown by its node as it comes, a raylet
lost during a command named by its node, and nothing of the commands left running after a stop
or a lost node (docs/ray.md). `dtrun check --ray`: tests/e2e/test_check_ray.py."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import DTRUN, default_signals, ends_within, run_dtrun, wait_for
from tests.raycluster import HEAD, SECOND, RayCluster, ray_cluster_up

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]  # Ray under load: minutes

# the node a command ran on, as its raylet was told (RAY_RAYLET_PID: the worker's raylet)
WHERE = "ps -ww -o args= -p $RAY_RAYLET_PID | grep -o 'node_ip_address=[0-9.]*'"
WIDE = {**os.environ, "COLUMNS": "400"}  # exec's table on one line a row, Ray's reason whole
ON_SECOND = f'[ "$(ps -ww -o args= -p $RAY_RAYLET_PID | grep -o "={SECOND} ")" ]'


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    """One cluster for the module; the test that kills a raylet comes last (a raylet started
    again on its address after a kill took no task of a check here)."""
    pytest.importorskip("ray", reason="./dev setup installs Ray (the ray extra)")
    with ray_cluster_up() as up:
        yield up


def _running(cluster: RayCluster, needle: str) -> list[int]:
    found = []
    for proc in cluster.processes():
        try:
            if needle in " ".join(proc.cmdline()):
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def _command(proc: psutil.Process) -> list[str]:
    """A process's command line; none for one that ended meanwhile (a shell's child)."""
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def _start(where: Path, *args: str) -> tuple[subprocess.Popen[bytes], object]:
    out = (where / "dtrun.out").open("w+")
    dtrun = subprocess.Popen([*DTRUN, *args], cwd=where, stdout=out, stderr=subprocess.STDOUT,
                             preexec_fn=default_signals, env=WIDE)  # fmt: skip
    return dtrun, out


def _row(said: str, node: str) -> list[str]:
    """The cells of ``node``'s row in exec's table (one line: WIDE)."""
    for line in said.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("│").split("│")]
        if cells[0] == node:
            return cells
    raise AssertionError(f"no row of {node}: {said}")


def _said(out: object) -> str:
    out.flush()  # type: ignore[attr-defined]
    out.seek(0)  # type: ignore[attr-defined]
    return out.read()  # type: ignore[attr-defined, no-any-return]


def test_exec_shows_each_ray_nodes_output_by_its_node_and_its_exit_code(ray_cluster, tmp_path):
    done = run_dtrun(
        "exec", "--wide", "--ray", ray_cluster.address, "--",
        f"{WHERE}; if {ON_SECOND}; then exit 4; fi", cwd=tmp_path, timeout=300, env=WIDE,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"[ray-0] node_ip_address={HEAD}" in done.stdout, done.stdout
    assert f"[ray-1] node_ip_address={SECOND}" in done.stdout, done.stdout
    assert _row(done.stdout, "ray-0") == ["ray-0", HEAD, "0", ""], done.stdout
    assert _row(done.stdout, "ray-1") == ["ray-1", SECOND, "4", ""], done.stdout
    assert "1 of 2 nodes failed" in done.stdout + done.stderr


def test_exec_streams_a_nodes_lines_while_it_runs_and_a_stop_leaves_nothing(ray_cluster, tmp_path):
    dtrun, out = _start(tmp_path, "exec", "--ray", ray_cluster.address, "--",
                        "echo first; sleep 600.25")  # fmt: skip
    wait_for(lambda: "[ray-1] first" in _said(out) and "[ray-0] first" in _said(out),
             timeout=300, what="both nodes' first line, while they sleep")  # fmt: skip
    assert dtrun.poll() is None  # shown while the command runs, not at its end
    dtrun.send_signal(signal.SIGTERM)
    assert ends_within(dtrun, 180, out) == 143  # type: ignore[arg-type]
    assert "Traceback" not in _said(out)
    wait_for(lambda: _running(ray_cluster, "sleep 600.25") == [], timeout=120,
             what="the nodes' commands to end with dtrun")  # fmt: skip


def test_a_raylet_lost_during_exec_is_named_by_its_node(ray_cluster, tmp_path):
    dtrun, out = _start(
        tmp_path, "exec", "--wide", "--ray", ray_cluster.address, "--",
        f"echo started; if {ON_SECOND}; then sleep 600.5; fi",
    )  # fmt: skip
    # the sleep itself, not the shell whose script names it: a raylet killed before the shell's
    # test ran would make it skip the sleep and end 0 (ps finds no raylet there)
    wait_for(lambda: [p for p in ray_cluster.under(SECOND, "sleep 600.5")
                      if _command(p)[:1] == ["sleep"]] != [],
             timeout=300, what="the command's sleep on 127.0.0.3")  # fmt: skip
    ray_cluster.raylet(SECOND).kill()
    assert ends_within(dtrun, 300, out) == 1  # type: ignore[arg-type]
    said = _said(out)
    _, address, code, error = _row(said, "ray-1")
    assert (address, code) == (SECOND, "-"), said
    assert error.startswith("Ray: ") and "dead" in error, said  # Ray's reason, in its row
    # the other node's command ran to its end
    assert _row(said, "ray-0") == ["ray-0", HEAD, "0", ""], said
    assert "Traceback" not in said and "Raylet is terminated" not in said, said
    # the guard of the lost node's command ended it: no child of a dead Ray worker stays
    wait_for(lambda: _running(ray_cluster, "sleep 600.5") == [], timeout=120,
             what="the lost node's command to end")  # fmt: skip
