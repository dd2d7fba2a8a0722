"""dtrun's fixed cost around a sweep (issue 41): the nodes start before the run's record is
written, the result is there to show before the report's files are written, and a report
helper still readying its tools at the lowest priority is raised as soon as dtrun waits."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from dtrun.record import rundir
from dtrun.report.builder import ReportBuilder, autogroup_nice
from dtrun.spec.cluster import Inventory
from dtrun.spec.request import BenchSpec
from dtrun.sweep import run as sweep_run
from dtrun.sweep.run import run_sweep
from tests.paths import REPO
from tests.plans import sweep_plan
from tests.unit.test_sweep_records import Recorded


def bench(run_id: str) -> BenchSpec:
    return BenchSpec(run_id=run_id, node_counts=(1, 2), steps=4, warmup=1, repeat=1)


def test_the_first_launch_starts_before_the_manifest_is_written(
    tmp_path: Path, fixed_inventory: Inventory, monkeypatch: pytest.MonkeyPatch
):
    launched = threading.Event()
    seen: list[bool] = []
    write_manifest = rundir.write_manifest

    def after_the_launch_began(*args: Any, **kwargs: Any) -> None:
        seen.append(launched.wait(30))  # before issue 41 it was written first: never set
        write_manifest(*args, **kwargs)

    class Launching(Recorded):
        def run(self, *args: Any, **kwargs: Any) -> Any:
            launched.set()
            return super().run(*args, **kwargs)

    monkeypatch.setattr(sweep_run, "write_manifest", after_the_launch_began)
    run_sweep(sweep_plan(fixed_inventory, bench("first")), tmp_path, Launching())
    assert seen == [True]
    assert (tmp_path / "first" / "manifest.json").is_file()
    assert (tmp_path / "first" / "report.md").is_file()


def test_a_report_left_for_later_is_analysed_and_written_when_asked(
    tmp_path: Path, fixed_inventory: Inventory
):
    done = run_sweep(
        sweep_plan(fixed_inventory, bench("later")), tmp_path, Recorded(), report_later=True
    )
    assert done.report is not None
    assert done.report.rows[1].efficiency == pytest.approx(1.0)  # the table can be shown now
    assert not (tmp_path / "later" / "report.md").exists()
    done.write_report()
    assert (tmp_path / "later" / "report.md").is_file()
    assert (tmp_path / "later" / "summary.json").is_file()


def _nice_after_a_while(started: str) -> int | None:
    """In the helper: say it started, then after a second, its autogroup's nice value."""
    Path(started).touch()
    time.sleep(1.0)
    return autogroup_nice()


@pytest.mark.skipif(autogroup_nice() is None, reason="this kernel has no autogroups")
def test_waiting_for_the_report_raises_a_helper_still_busy_at_the_lowest_priority(
    tmp_path: Path,
):
    # A helper still warming up at nice 19 when dtrun waited finished that first at 1.5% of a
    # core on a busy machine: 83 s before a report, at a load average of 65 (issue 41).
    builder = ReportBuilder()
    try:
        assert builder._helper is not None
        busy = builder._helper.submit(_nice_after_a_while, str(tmp_path / "started"))
        deadline = time.monotonic() + 120
        while not (tmp_path / "started").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert builder.call(os.getpid) != os.getpid()  # dtrun waits for the helper
        assert busy.result() == 0  # raised while the earlier task still ran
    finally:
        builder.close()


def test_the_helper_s_warm_up_compiles_every_template_a_report_uses(
    tmp_path: Path, fixed_inventory: Inventory, monkeypatch: pytest.MonkeyPatch
):
    # report.md.j2 includes six parts; warmed up without them, the first report compiled them
    # after the last launch: 0.05 s of the 0.12 s a report took there (issue 41).
    import jinja2

    from dtrun.render import environment
    from dtrun.report.build import build_report, warm_up_tools
    from tests.factories import fake_run_dir

    environment.cache_clear()  # a fresh environment, as in a new helper
    warm_up_tools()
    compiled: list[str | None] = []
    compile_template = jinja2.Environment.compile

    def counted(self: jinja2.Environment, source: Any, name: str | None = None,
                *args: Any, **kwargs: Any) -> Any:  # fmt: skip
        compiled.append(name)
        return compile_template(self, source, name, *args, **kwargs)

    monkeypatch.setattr(jinja2.Environment, "compile", counted)
    run_dir = fake_run_dir(tmp_path / "w", bench("w"), fixed_inventory, {1: [1000], 2: [1800]})
    build_report(run_dir)
    assert (run_dir.path / "report.html").is_file()
    assert compiled == []


HELPED_MAIN = """
import os
import sys
from pathlib import Path

if __name__ != "__main__":  # run again in a spawned child, as "__mp_main__"
    Path(os.environ["MAIN_RUN_AGAIN"]).write_text(__name__)
else:
    from dtrun.report.builder import ReportBuilder

    builder = ReportBuilder()
    try:
        print(builder.call(os.getpid) != os.getpid())
    finally:
        builder.close()
    print(os.path.basename(__file__))  # put back once the helper started
"""


def test_the_helper_starts_without_running_dtrun_s_main_script_again(tmp_path: Path):
    # multiprocessing's spawn ran the `dtrun` script again in the helper (dtrun.cli.app and
    # every command's options: 0.1-0.2 s of CPU at full priority while the nodes started).
    script = tmp_path / "main.py"
    script.write_text(HELPED_MAIN)
    again = tmp_path / "run-again"
    done = subprocess.run(
        [sys.executable, str(script)],
        env={**os.environ, "MAIN_RUN_AGAIN": str(again), "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "main.py"]  # the helper did the work
    assert not again.exists()


# dtrun's process group gets a SIGHUP (its terminal closed); dtrun handles it and cleans up
_HUNG_UP = """
import os, signal
from dtrun.report.builder import ReportBuilder

heard = []
signal.signal(signal.SIGHUP, lambda *_: heard.append(True))  # dtrun's own handler
builder = ReportBuilder()
assert builder._helper is not None and builder._helper.submit(abs, -1).result() == 1
os.killpg(0, signal.SIGHUP)
print(builder.call(os.getpid) != os.getpid(), flush=True)  # the helper still answers
builder.close()
print("heard" if heard else "not heard", flush=True)
"""


def test_a_sighup_to_dtrun_s_process_group_spares_the_report_helper(tmp_path: Path):
    """A SIGHUP to dtrun's group is dtrun's to handle: the helper, in a session of its own,
    still answers, and nothing prints a traceback. (Under multiprocessing, the helper's
    resource tracker ran in dtrun's group: the SIGHUP ended it, and dtrun's own cleanup printed
    five KeyError tracebacks from the tracker it started again.)"""
    done = subprocess.run(
        [sys.executable, "-c", _HUNG_UP], cwd=tmp_path, capture_output=True, text=True,
        timeout=120, start_new_session=True, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "heard"]
    assert "Traceback" not in done.stderr
