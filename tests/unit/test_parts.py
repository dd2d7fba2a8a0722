"""The suite's parts (tests/conftest.py, PARTS): each test gets its directory's marker, and a test
outside tests/e2e/ that starts daemons or launches is refused at collection, naming it."""

from __future__ import annotations

import os

import pytest

from tests.paths import TESTS

pytest_plugins = ("pytester",)

INI = """[pytest]
addopts = -p no:cacheprovider --strict-markers
markers =
    unit: unit
    e2e: e2e
    infra: infra
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    """A scratch tests/ directory with the project's own conftest and markers."""
    pytester.makeini(INI)
    pytester.makeconftest((TESTS / "conftest.py").read_text())
    for part in ("unit", "e2e"):
        pytester.mkpydir(part)
    return pytester


def test_each_test_carries_its_directory_s_marker(suite):
    (suite.path / "unit" / "test_a.py").write_text("def test_quick():\n    pass\n")
    # no daemon fixture here: its teardown would stop every launch on this machine
    (suite.path / "e2e" / "test_b.py").write_text("def test_slow():\n    pass\n")
    done = suite.runpytest_subprocess("-m", "not e2e", "-q")
    done.assert_outcomes(passed=1, deselected=1)
    assert suite.runpytest_subprocess("-m", "e2e", "-q").parseoutcomes()["passed"] == 1


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("def test_x(no_leftovers):\n    pass\n", "uses no_leftovers, so it belongs in tests/e2e/"),
        ("import pytest\n\n@pytest.mark.e2e\ndef test_x():\n    pass\n", "is marked e2e"),
    ],
    ids=["daemon-fixture", "e2e-marker"],
)
def test_a_unit_test_that_starts_daemons_is_refused_by_name(suite, body, said):
    (suite.path / "unit" / "test_a.py").write_text(body)
    done = suite.runpytest_subprocess("-q")
    assert done.ret == pytest.ExitCode.USAGE_ERROR
    assert f"unit/test_a.py::test_x: {said}" in done.stderr.str()


def test_a_misspelt_marker_is_an_error_not_a_new_marker(suite):
    (suite.path / "unit" / "test_a.py").write_text(
        "import pytest\n\n@pytest.mark.e2ee\ndef test_x():\n    pass\n"
    )
    done = suite.runpytest_subprocess("-q")
    assert done.ret != 0 and "'e2ee' not found in `markers`" in done.stdout.str()


def test_starting_a_daemon_from_a_unit_test_names_the_test_and_where_it_belongs():
    from tests.paths import require_e2e

    with pytest.raises(RuntimeError, match=r"tests/unit/test_parts.py::test_starting_a_daemon"):
        require_e2e("sshd")


def test_a_sigterm_to_the_test_run_still_tears_the_session_down(suite):
    """A CI timeout's SIGTERM: the session's fixtures (the daemons, in tests/e2e/) are torn
    down as after Ctrl-C, not left running."""
    import signal
    import subprocess
    import sys
    import time

    done = suite.path / "torn-down"
    (suite.path / "unit" / "test_a.py").write_text(
        "import time, pytest\n\n"
        "@pytest.fixture(scope='session')\n"
        "def daemon():\n"
        "    yield\n"
        f"    open({str(done)!r}, 'w').close()\n\n"
        "def test_slow(daemon):\n"
        f"    open({str(suite.path / 'started')!r}, 'w').close()\n"
        "    time.sleep(60)\n"
    )
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    run = subprocess.Popen(
        command, cwd=suite.path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 30
    while not (suite.path / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    run.send_signal(signal.SIGTERM)
    out, _ = run.communicate(timeout=30)
    assert done.exists(), out.decode()
    assert run.returncode == pytest.ExitCode.INTERRUPTED


WHERE = (
    "import os, pathlib\n\n"
    "def test_{n}():\n"
    "    with open(pathlib.Path(__file__).parent.parent / 'where', 'a') as out:\n"
    "        out.write(f\"{{__name__}} {{os.environ['PYTEST_XDIST_WORKER']}}\\n\")\n"
)


def test_under_loadgroup_the_slurm_and_spark_files_each_run_on_one_worker(suite, monkeypatch):
    """pytest-xdist's own loadgroup stopped grouping under pytest 9.2 (tests/machine.py): what
    the workers' namespaces do not separate ran on both, and CI failed on munged."""
    monkeypatch.setenv("DTRUN_TEST_LOCKS", str(suite.path / "locks"))
    e2e = suite.path / "e2e"
    files = ["test_e2e_slurm.py", "test_e2e_spark.py", "test_e2e_spark_app.py",
             *(f"test_other_{i}.py" for i in range(3))]  # fmt: skip
    for name in files:
        (e2e / name).write_text("\n".join(WHERE.format(n=n) for n in range(6)))
    done = suite.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-q")
    done.assert_outcomes(passed=36)
    workers: dict[str, set[str]] = {}
    for line in (suite.path / "where").read_text().splitlines():
        module, worker = line.split()
        workers.setdefault(module.rsplit(".", 1)[-1], set()).add(worker)
    assert len(workers["test_e2e_slurm"]) == 1
    assert len(workers["test_e2e_spark"] | workers["test_e2e_spark_app"]) == 1
    # and the rest is shared out, not all on one worker
    assert len(set().union(*workers.values())) == 2


def test_a_second_process_claiming_the_slurm_daemons_fails_naming_why(tmp_path):
    import subprocess
    import sys

    claim = "from tests import machine; machine.hold('slurm'); print('held', flush=True); input()"
    env = {**os.environ, "DTRUN_TEST_LOCKS": str(tmp_path)}
    first = subprocess.Popen(
        [sys.executable, "-c", claim], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, cwd=TESTS.parent,
    )  # fmt: skip
    try:
        assert first.stdout is not None and first.stdout.readline() == "held\n"
        second = subprocess.run(
            [sys.executable, "-c", claim], env=env, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, cwd=TESTS.parent, timeout=30,
        )  # fmt: skip
        assert second.returncode != 0
        assert "another test process runs the slurm tests on this machine" in second.stderr
    finally:
        first.kill()
        first.wait()
    # once the first has ended, the claim is free again
    third = subprocess.run(
        [sys.executable, "-c", claim], env=env, input="\n", capture_output=True, text=True,
        cwd=TESTS.parent, timeout=30,
    )  # fmt: skip
    assert third.returncode == 0, third.stderr


def test_a_dtrun_that_does_not_end_in_time_fails_the_test_with_its_stacks(tmp_path):
    import subprocess
    import sys

    from tests.conftest import ends_within

    hung = (
        "import time\ndef waiting_forever():\n    time.sleep(600)\n"
        "print('started', flush=True)\nwaiting_forever()\n"
    )
    with (tmp_path / "out").open("w+") as out:
        proc = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", "-c", hung], stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        with pytest.raises(pytest.fail.Exception) as failed:
            ends_within(proc, 2, out)
    assert proc.returncode is not None  # ended, not left running
    said = str(failed.value)
    assert "did not end within 2 s" in said and "started" in said
    assert "waiting_forever" in said  # where its thread was
