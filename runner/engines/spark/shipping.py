"""dtrun's node code, shipped with the Spark application: executors need not have dtrun.

Each Spark task runs ``node_main`` (runner/engines/spark/node.py), and each node's script runs
dtrun's workloads: both import ``runner``. A standalone, YARN or Kubernetes cluster's executors
run a Python of their own, which need not have dtrun installed. So the driver zips the
``runner`` package (its Python files) once per application and hands it to Spark with
``SparkContext.addPyFile``, which fetches it into every executor's working directory, and the
executors' PYTHONPATH names it there (``spark.executorEnv.PYTHONPATH``, relative: the PySpark
worker, TorchDistributor's torchrun and the ranks it starts all run in that directory). The
PySpark documentation: "addPyFile: Add a .py or .zip dependency for all tasks to be executed on
this SparkContext in the future" (pyspark.SparkContext.addPyFile).

Standard library only: node_main imports ``shipped_root`` on the executors.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

SHIPPED = "dtrun-node.zip"  # its name on every executor, in the executor's working directory


def build_zip(package: Path, dest: Path) -> Path:
    """``dest``/SHIPPED: every .py file of the package at ``package``, by its path under the
    package's import name (dtrun/engines/spark/node.py, ...: the folder is runner/ in a
    checkout), written anew."""
    name = __name__.split(".")[0]
    target = dest / SHIPPED
    partial = dest / f".{SHIPPED}.partial"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(package.rglob("*.py")):
            if "__pycache__" not in path.parts:
                archive.write(path, f"{name}/{path.relative_to(package).as_posix()}")
    partial.replace(target)
    return target


def shipped_root(module_file: str) -> str | None:
    """The zip this code was imported from (``.../dtrun-node.zip/runner/...``), absolute; None
    when it was imported from a directory (dtrun installed where the executor runs)."""
    parts = Path(module_file).parts
    if SHIPPED not in parts:
        return None
    return str(Path(*parts[: parts.index(SHIPPED) + 1]).resolve())
