"""A local-cluster's class-data archives (runner/engines/spark/cds.py): which JVM options an
application gets with an empty cache, a full one, a busy one or none, and which recorded
archives are kept. The JVMs themselves: tests/e2e/test_e2e_spark_cds.py."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from dtrun.engines.spark import cds
from dtrun.engines.spark.session import LIGHT_JVM, jvm_settings


@pytest.fixture(autouse=True)
def _java() -> None:
    if cds.java() is None:  # ./dev test installs it for every part: missing is a broken setup
        pytest.fail("no java: run ./dev setup (apt-get install default-jre-headless)")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "dtrun" / "spark-cds"


def test_an_empty_cache_records_each_jvm_under_a_name_of_its_own(cache: Path) -> None:
    chosen = cds.archives(LIGHT_JVM)
    assert chosen.recording is not None and chosen.home == chosen.recording.parent
    assert chosen.home.parent == cache
    assert chosen.driver.startswith(LIGHT_JVM)
    assert f"-XX:ArchiveClassesAtExit={chosen.recording}-driver.jsa" in chosen.driver
    # Spark puts each executor's id into its options: no two executors write one file
    assert f"{chosen.recording}-executor-{{{{EXECUTOR_ID}}}}.jsa" in chosen.executor
    assert "SharedArchiveFile" not in chosen.driver + chosen.executor
    settings = jvm_settings("local-cluster[2,1,1024]", chosen)
    assert settings["spark.driver.extraJavaOptions"] == chosen.driver
    assert settings["spark.executor.extraJavaOptions"] == chosen.executor
    assert jvm_settings("spark://head:7077", chosen) == {}


def test_a_second_application_records_nothing_while_the_first_does(cache: Path) -> None:
    first = cds.archives(LIGHT_JVM)
    assert first.recording is not None
    # the lock is held by a process, as each application's driver is one
    code = f"from dtrun.engines.spark import cds; print(cds.archives({LIGHT_JVM!r}).driver)"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env=os.environ.copy())  # fmt: skip
    assert other.stdout.strip() == LIGHT_JVM


def test_a_full_cache_maps_both_archives_and_verifies_them(cache: Path) -> None:
    home = cds.archives(LIGHT_JVM).home
    assert home is not None
    (home / "driver.jsa").write_bytes(b"archive")
    (home / "executor.jsa").write_bytes(b"archive")
    # the recording's Spark home gone, the archives' jars are nowhere: record again
    assert cds.archives(LIGHT_JVM).recording is not None
    (home / "spark-home").mkdir()
    chosen = cds.archives(LIGHT_JVM)
    assert chosen.recording is None and chosen.home is None
    assert chosen.driver.endswith(f"-XX:SharedArchiveFile={home / 'driver.jsa'}")
    assert chosen.executor.endswith(f"-XX:SharedArchiveFile={home / 'executor.jsa'}")
    assert "-XX:+VerifySharedSpaces" in chosen.driver  # a damaged archive is refused by its CRC


def test_only_archives_the_jvm_logged_as_written_whole_are_kept(cache: Path) -> None:
    chosen = cds.archives(LIGHT_JVM)
    stem = chosen.recording
    assert stem is not None and chosen.home is not None
    (stem.parent / f"{stem.name}-driver.jsa").write_bytes(b"driver")
    (stem.parent / f"{stem.name}-driver.log").write_text(
        "[26.8s][info][cds,dynamic] Written dynamic archive 0x800bc7000 - 0x807dfaab0\n"
    )
    # executor 0 was killed while it wrote: its log ends before the line
    (stem.parent / f"{stem.name}-executor-0.jsa").write_bytes(b"cut")
    (stem.parent / f"{stem.name}-executor-0.log").write_text("[15.5s] Archiving hidden X\n")
    (stem.parent / f"{stem.name}-executor-1.jsa").write_bytes(b"executor 1")
    assert chosen.adopt() == ["driver"]
    assert (chosen.home / "driver.jsa").read_bytes() == b"driver"
    assert not (chosen.home / "executor.jsa").exists()
    assert not list(chosen.home.glob("recording-*"))  # every temporary file removed


def test_a_recording_clears_what_a_stopped_one_left(cache: Path) -> None:
    home = cds.archives(LIGHT_JVM).home
    assert home is not None
    (home / "recording-1-driver.jsa").write_bytes(b"cut short by SIGTERM")
    again = subprocess.run(
        [sys.executable, "-c", "from dtrun.engines.spark import cds; "
         f"print(cds.archives({LIGHT_JVM!r}).recording)"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert again.stdout.strip().startswith(str(home / "recording-"))
    assert not (home / "recording-1-driver.jsa").exists()


def test_no_java_or_a_cache_path_spark_would_split_leaves_the_plain_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a cache"))
    plain = cds.archives(LIGHT_JVM)
    assert (plain.driver, plain.executor, plain.recording) == (LIGHT_JVM, LIGHT_JVM, None)
    assert not (tmp_path / "a cache").exists()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    assert cds.archives(LIGHT_JVM).driver == LIGHT_JVM


def test_a_cache_that_cannot_be_written_leaves_the_plain_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))
    assert cds.archives(LIGHT_JVM).driver == LIGHT_JVM


def test_each_spark_install_has_archives_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an archive names its jars by path: another install's would be refused by every JVM
    keys = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        monkeypatch.setenv("SPARK_HOME", str(tmp_path / name))
        keys.append(cds.key(LIGHT_JVM))
    assert None not in keys and keys[0] != keys[1]
    assert cds.key(LIGHT_JVM) == keys[1] != cds.key(LIGHT_JVM + " -Xss1m")


def _gateway(monkeypatch: pytest.MonkeyPatch, command: list[str]) -> subprocess.Popen[bytes]:
    """A stand-in for pyspark's gateway JVM: a process whose stdin the driver closes."""
    from pyspark import SparkContext

    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)

    class Gateway:
        pass

    gateway = Gateway()
    gateway.proc = proc  # type: ignore[attr-defined]
    monkeypatch.setattr(SparkContext, "_gateway", gateway)
    return proc


def test_the_driver_ends_its_jvm_by_its_stdin_and_waits_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dtrun.engines.spark.session import jvm_exited

    proc = _gateway(monkeypatch, ["cat"])  # exits at the end of its stdin, as the gateway does
    assert jvm_exited(30, lambda: False)
    assert proc.returncode == 0


def test_a_signal_ends_the_wait_for_the_jvm_and_nothing_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from dtrun.engines.spark.session import jvm_exited

    proc = _gateway(monkeypatch, ["sleep", "60"])  # a JVM still writing its archive
    calls = iter(range(1000))
    try:
        # stopped at the third look: the wait ends long before its 60 s
        assert not jvm_exited(60, lambda: next(calls) >= 2)
        assert proc.poll() is None  # the sweep's stop ends it, not the wait
    finally:
        proc.kill()
        proc.wait()


class _Executors:
    """A stand-in for a local-cluster's Spark, as executors_exit reaches it; ``calls``: what
    it was asked, in order. Each executor is a process named as an executor JVM, which ends
    ``linger`` s after its stdin does (a JVM writing its archive as it exits)."""

    def __init__(self, linger: float) -> None:
        from dtrun.engines.spark.session import EXECUTOR_MAIN

        code = f"import sys, time; sys.stdin.read(); time.sleep({linger})"
        self.proc = subprocess.Popen([sys.executable, "-c", code, EXECUTOR_MAIN],
                                     stdin=subprocess.PIPE)  # fmt: skip
        self.calls: list[object] = []
        jvm = types.SimpleNamespace(
            PythonUtils=types.SimpleNamespace(toScalaMap=dict),
            java=types.SimpleNamespace(util=types.SimpleNamespace(HashMap=dict)),
        )
        context = types.SimpleNamespace(
            requestTotalExecutors=lambda total, *_: self.calls.append(("total", total)),
            schedulerBackend=lambda: types.SimpleNamespace(stopExecutors=self.stop),
        )
        self.sparkContext = types.SimpleNamespace(
            _jvm=jvm, _jsc=types.SimpleNamespace(sc=lambda: context)
        )

    def stop(self) -> None:  # Spark's StopExecutor to each
        self.calls.append("stop")
        assert self.proc.stdin is not None
        self.proc.stdin.close()


def test_a_recording_application_s_executors_end_on_their_own_and_are_waited_for() -> None:
    """Spark's own stop SIGTERMs each executor and SIGKILLs it 10 s later, cutting its
    archive short under load (test_e2e_spark_cds): the driver first asks for no executor in
    their place, then stops them, and waits for their JVMs to exit."""
    from dtrun.engines.spark.session import executors_exit

    spark = _Executors(linger=0.5)
    try:
        assert executors_exit(spark, 30, lambda: False)
        assert spark.proc.poll() == 0  # exited, on its own
        assert spark.calls == [("total", 0), "stop"]
    finally:
        spark.proc.kill()
        spark.proc.wait()


def test_a_signal_ends_the_wait_for_the_executors() -> None:
    from dtrun.engines.spark.session import executors_exit

    spark = _Executors(linger=60)
    calls = iter(range(1000))
    try:
        assert not executors_exit(spark, 60, lambda: next(calls) >= 2)
        assert spark.proc.poll() is None  # Spark's stop ends it, not the wait
    finally:
        spark.proc.kill()
        spark.proc.wait()


def test_a_kept_spark_home_that_cannot_be_set_right_costs_the_class_data_not_the_sweep(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dtrun.engines.spark.session import local_home

    real = tmp_path / "pyspark"
    for name in ("bin", "jars"):
        (real / name).mkdir(parents=True)
    monkeypatch.setenv("SPARK_HOME", str(real))  # own_spark_home sets it: restored after
    chosen = cds.archives(LIGHT_JVM)
    assert chosen.home is not None
    (chosen.home / "spark-home").mkdir()
    (chosen.home / "spark-home" / "work").write_text("a file where the work directory goes")
    app = tmp_path / "app"
    app.mkdir()
    kept, work = local_home(chosen, app)
    assert kept is None  # the plain settings: jvm_settings(master, None)
    assert work == app / "spark-home" / "work" and work.is_dir()
    assert os.environ["SPARK_HOME"] == str(app / "spark-home")


def test_the_driver_s_temporary_files_option_leaves_the_user_s_own_after_ours(tmp_path):
    """java.io.tmpdir in the application's directory through spark-submit's environment, for
    every master: a user's own SPARK_SUBMIT_OPTS, spark-defaults.conf or --conf come later on
    the JVM's command line and win; no Spark setting of theirs is replaced."""
    from dtrun.engines.spark.session import driver_java_env, temp_settings

    env = driver_java_env(tmp_path, {"SPARK_SUBMIT_OPTS": "-Djava.io.tmpdir=/scratch"})
    words = env["SPARK_SUBMIT_OPTS"].split()
    assert words[0] == f"-Djava.io.tmpdir={tmp_path / 'java-tmp'}"
    assert words[-1] == "-Djava.io.tmpdir=/scratch"  # the user's, last: it wins
    assert (tmp_path / "java-tmp").is_dir()
    assert env["SPARK_LAUNCHER_OPTS"] == "-XX:-UsePerfData"
    assert temp_settings("spark://10.0.0.1:7077", tmp_path) == {}  # a real cluster's own
    assert "spark.executor.defaultJavaOptions" in temp_settings("local-cluster[2,1,1024]", tmp_path)
