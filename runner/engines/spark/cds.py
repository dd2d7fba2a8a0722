"""Class-data sharing (CDS) for a local-cluster's JVMs: most of their start is loading and
verifying Spark's classes, about 11,000 in the driver (with its master and workers) and 6,000 in
each executor. A JVM started with ``-XX:SharedArchiveFile`` maps them from an archive instead
(the JDK's AppCDS: JEP 310, and JEP 350's dynamic archive, written with
``-XX:ArchiveClassesAtExit`` as a JVM exits; docs/spark.md "How a launch runs").

The first local-cluster application on a machine records: its driver and executors write their
archives at exit, under temporary names, each with a log; an archive whose log says the JVM
wrote it whole (``Written dynamic archive``) is then renamed into the cache. An archive names
the jars its classes came from, by the Spark home's path, and a JVM maps it only where those
paths still exist (it compares the jars by their real paths): so the recording application
runs in a Spark home that stays, in the cache, one recording at a time (a lock); the others
run in their own as before (session.py own_spark_home), the archive's paths leading to the same
jars. Later applications map the archives, with ``-XX:+VerifySharedSpaces`` (a damaged archive
is refused by its CRC, and the JVM starts without it: the JVM's own check, as is its refusal of
an archive from another JVM or of changed jars). Anything that fails here costs the speed-up,
never the sweep.

The cache: ``$XDG_CACHE_HOME/dtrun/spark-cds`` (``~/.cache`` without it), one directory per
pyspark version and install, Java and JVM settings.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

DRIVER, EXECUTOR = "driver", "executor"
WRITTEN = "Written dynamic archive"  # the JVM's log line when the whole archive is on disk
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # CDS's warnings are not the user's to read
# How long the driver waits for its JVMs to write their archives as they exit, the executors'
# and then its own (driver.py): 8 to 12 s here for 120 to 160 MB. dtrun waits this long more
# for the driver (SparkApp's end_wait_s); an archive cut short is not kept, and the next
# application records again.
RECORD_WAIT_S = 60.0
SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+@")


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dtrun" / "spark-cds"


def java() -> str | None:
    """The java Spark's launcher runs (spark-class: JAVA_HOME's, else the one on PATH)."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return str(Path(found).resolve()) if found and Path(found).is_file() else None


def real_spark_home() -> Path:
    """The Spark home a local-cluster's own is made from (session.py own_spark_home):
    SPARK_HOME where set, else pyspark's."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(os.environ.get("SPARK_HOME") or _find_spark_home()).resolve()


def key(settings: str) -> str | None:
    """The cache directory's name: pyspark's version and Spark home (each install its own:
    the archives name its jars), the java binary (its path, size and time) and the JVM
    settings. None without a java."""
    import pyspark

    binary = java()
    if binary is None:
        return None
    stat = Path(binary).stat()
    text = "\n".join([pyspark.__version__, str(real_spark_home()), binary, str(stat.st_size),
                      str(stat.st_mtime_ns), settings])  # fmt: skip
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Archives:
    """What one application's JVMs are started with, and where a recording application's
    archives are written (``recording``: None when it maps them; the lock on them held by
    ``lock``, an open file, until the process exits)."""

    driver: str  # JVM options
    executor: str
    recording: Path | None = None  # the temporary names' stem
    lock: object = None

    @property
    def home(self) -> Path | None:
        """Where session.own_spark_home makes a recording's Spark home: the cache directory."""
        return None if self.recording is None else self.recording.parent

    def adopt(self) -> list[str]:
        """A recording application's archives, each written whole, into the cache (an atomic
        rename, so another application maps the old one or the new); every temporary file
        removed. Which were adopted."""
        if self.recording is None:
            return []
        directory, stem = self.recording.parent, self.recording.name
        adopted = []
        for role, written in ((DRIVER, f"{stem}-{DRIVER}"), (EXECUTOR, f"{stem}-{EXECUTOR}-0")):
            archive, log = directory / f"{written}.jsa", directory / f"{written}.log"
            with contextlib.suppress(OSError):
                if archive.is_file() and not archive.is_symlink() and WRITTEN in log.read_text():
                    archive.replace(directory / f"{role}.jsa")
                    adopted.append(role)
        for left in directory.glob(f"{stem}-*"):
            with contextlib.suppress(OSError):
                left.unlink()
        return adopted


def archives(settings: str) -> Archives:
    """The options for a local-cluster's driver and executors: ``settings`` and the archives
    where the cache has both, else ``settings`` and a recording of them. ``settings`` alone
    where there is no java or no cache to write."""
    plain = Archives(settings, settings)
    try:
        name = key(settings)
        if name is None:
            return plain
        directory = cache_root() / name
        if not set(str(directory)) <= SAFE:  # Spark splits the options on blanks and quotes
            return plain
        driver, executor = directory / f"{DRIVER}.jsa", directory / f"{EXECUTOR}.jsa"
        # the kept Spark home too: without it the archives' jar paths lead nowhere
        if driver.is_file() and executor.is_file() and (directory / "spark-home").is_dir():
            use = f"{settings} {QUIET} -XX:+VerifySharedSpaces -XX:SharedArchiveFile="
            return Archives(f"{use}{driver}", f"{use}{executor}")
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        lock = (directory / "recording.lock").open("a")  # held until the process exits
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another application records now
            lock.close()
            return plain
    except (OSError, ImportError):
        return plain
    for left in directory.glob("recording-*"):  # a stopped recording's (the lock is ours)
        with contextlib.suppress(OSError):
            left.unlink()
    stem = directory / f"recording-{os.getpid()}"

    def record(written: str) -> str:
        log = f"-Xlog:cds=off -Xlog:cds+dynamic=info:file={written}.log"
        return f"{settings} -XX:ArchiveClassesAtExit={written}.jsa {log}"

    return Archives(
        record(f"{stem}-{DRIVER}"),
        record(f"{stem}-{EXECUTOR}-{{{{EXECUTOR_ID}}}}"),  # Spark puts in each executor's id
        stem,
        lock,
    )
