"""benchmarks/suite_cpu.py: the suite's CPU by the kind of process that spent it (issue 41),
from process-accounting records. The records here are written out; the script reads real ones
with `dump-acct`."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.paths import REPO


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("suite_cpu", REPO / "benchmarks" / "suite_cpu.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_a_rank_is_named_by_its_agent_though_its_pid_was_used_before():
    s = _script()
    found = [
        s.Record("bash", 0.01, 100, 1, 10.0),  # pid 100, long gone
        s.Record("pt_elastic", 3.0, 100, 50, 20.0),  # pid 100 again: torchrun's agent
        s.Record("python", 6.0, 101, 100, 21.0),  # its rank
        s.Record("python", 1.0, 102, 100, 15.0),  # started before the agent: bash's child
        s.Record("java", 7.0, 200, 1, 5.0),
        s.Record("python", 1.5, 201, 200, 6.0),  # Spark's Python worker
    ]
    parent = s.parents(found)
    kinds = [s.kind(r, parent[i]) for i, r in enumerate(found)]
    assert kinds == [
        "shells and small tools",
        "torchrun agents",
        "torch ranks (under torchrun's agent)",
        "other Python (pytest's workers, dtrun, test helpers)",
        "Spark JVMs",
        "Spark's Python workers and their ranks",
    ]


def test_a_rank_that_ended_on_one_of_gloo_s_threads_is_a_torch_rank():
    s = _script()
    found = [
        s.Record("pt_elastic", 1.0, 300, 1, 20.0),
        s.Record("pt_gloo_runloop", 2.0, 301, 300, 21.0),
        s.Record("gloo_tcp_loop", 2.5, 302, 300, 21.0),
        s.Record("pt_gloo_runloop", 0.5, 303, 1, 22.0),  # under pytest, not an agent
    ]
    parent = s.parents(found)
    kinds = [s.kind(r, parent[i]) for i, r in enumerate(found)]
    assert kinds == [
        "torchrun agents",
        "torch ranks (under torchrun's agent)",
        "torch ranks (under torchrun's agent)",
        "other Python (pytest's workers, dtrun, test helpers)",
    ]


def test_a_jvm_that_ended_on_one_of_its_own_threads_is_a_spark_jvm():
    s = _script()
    found = [
        s.Record("Reference Handl", 4.0, 400, 1, 20.0),
        s.Record("C2 CompilerThre", 2.0, 401, 1, 20.0),
        s.Record("java", 1.0, 402, 1, 20.0),
        s.Record("Referee", 1.0, 403, 1, 20.0),  # not HotSpot's
    ]
    parent = s.parents(found)
    assert [s.kind(r, parent[i]) for i, r in enumerate(found)] == [
        "Spark JVMs", "Spark JVMs", "Spark JVMs", "other",
    ]  # fmt: skip


def test_the_summary_sums_each_kind_and_its_share_of_all():
    s = _script()
    found = [
        s.Record("java", 30.0, 1, 0, 0.0),
        s.Record("java", 10.0, 2, 0, 0.0),
        s.Record("pt_elastic", 60.0, 3, 0, 0.0),
    ]
    text = s.summary(found, 50.0)
    lines = text.splitlines()
    assert lines[1].split()[-3:] == ["1", "60", "60.0%"]  # torchrun agents first, the most
    assert lines[2].split()[-3:] == ["2", "40", "40.0%"]
    assert "wall 50 s: 2.00 cores busy on average" in text
