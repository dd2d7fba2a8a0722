"""`dtrun bench -- PROGRAM`'s result.json, made from the ranks' step records and the step
pattern's matches (runner/sweep/programresult.py): which steps are timed, the units, the proof."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dtrun.engines.embedded.inventory import local_cluster
from dtrun.errors import ResultError
from dtrun.plan.resolve import resolve_bench
from dtrun.plan.steppattern import pattern_steps
from dtrun.plan.sweep import plan_sweep
from dtrun.report.resultfile import parse_result
from dtrun.report.results import ProgramFacts, TrainResult
from dtrun.spec.launchplan import LaunchPlan
from dtrun.spec.request import BenchSpec, Program, ProgramKind, ScalingMode, StepUnits, UnitKind
from dtrun.sweep.programresult import (
    program_result,
    read_step_files,
    write_program_result,
)

PROGRAM = Program(ProgramKind.SCRIPT, "/w/train.py")


def spec(**change: object) -> BenchSpec:
    fields: dict[str, object] = {"node_counts": (2,), "warmup": 2, "program": PROGRAM}
    return BenchSpec("r1", **(fields | change))  # type: ignore[arg-type]


def plan(bench: BenchSpec) -> LaunchPlan:  # the 2-node point's
    cluster = local_cluster(2, python_bin="/v/bin", code_dir="/c", cpu_count=4)
    return plan_sweep(resolve_bench(bench), cluster).points[-1]


def record(
    rank: int, ends: list[float], digest: str | None = "d0", sharded: str | None = None
) -> dict[str, Any]:
    return {
        "schema": "dtrun.steps/1", "rank": rank, "node": f"node-{rank}", "step_ends_s": ends,
        "params": 10, "gradient_bytes": {"float32": 40}, "param_digest": digest,
        "sharded": sharded, "errors": [],
    }  # fmt: skip


ENDS = [1.0, 1.1, 1.3, 1.4, 1.6, 1.7]  # intervals 0.1, 0.2, 0.1, 0.2, 0.1


def test_the_first_step_and_the_warm_up_are_left_out_of_the_lowest_rank_s_intervals():
    bench = spec()
    data = program_result(bench, plan(bench), {0: record(0, ENDS), 1: record(1, ENDS)}, 9.0)
    assert data["optimizer_steps"] == 6
    assert data["step_times_s"] == pytest.approx([0.2, 0.1, 0.2, 0.1])  # steps 2 to 5
    assert data["timing"] == "optimizer steps"
    assert data["proof"]["answer"] == "in sync"
    assert parse_result(data, "r").proof == "in sync: 2 ranks on 2 nodes"


def test_too_few_steps_for_the_warm_up_is_a_failed_launch_saying_so():
    bench = spec(warmup=6)
    with pytest.raises(ResultError, match="the program made 6 optimizer step"):
        program_result(bench, plan(bench), {0: record(0, ENDS)}, 9.0)


@pytest.mark.parametrize(
    ("digests", "sharded", "answer", "why"),
    [
        (("a", "b"), None, "diverged", "rank 1 ends with other parameters than rank 0"),
        (("a", "b"), "FSDP (DTensor shards)", "not comparable", "sharded: FSDP (DTensor shards)"),
        (("a", None), None, "not checked", "1 of 2 ranks recorded parameters"),
    ],
)
def test_the_proof_compares_the_ranks_digests(digests, sharded, answer, why):
    bench = spec()
    records = {rank: record(rank, ENDS, digest, sharded) for rank, digest in enumerate(digests)}
    if digests[1] is None:
        records[1]["param_digest"] = None
        records[1]["step_ends_s"] = []
        del records[1]
    proof = program_result(bench, plan(bench), records, 9.0)["proof"]
    assert (proof["answer"], proof["why"]) == (answer, why)


@pytest.mark.parametrize(
    ("units", "mode", "expected"),
    [
        (StepUnits(UnitKind.SAMPLES, 16, per_process=True), ScalingMode.WEAK, ("samples", 32)),
        (StepUnits(UnitKind.TOKENS, 4096), ScalingMode.WEAK, ("tokens", 4096)),
        (None, ScalingMode.WEAK, ("process-steps", 2)),
        (None, ScalingMode.STRONG, ("steps", 1)),
    ],
)
def test_a_step_counts_the_units_given_or_one_per_process_or_step(units, mode, expected):
    bench = spec(units=units, mode=mode)
    data = program_result(bench, plan(bench), {0: record(0, ENDS)}, 9.0)
    assert (data["units"]["kind"], data["units"]["per_step"]) == expected
    assert data["units_per_s"] == pytest.approx(expected[1] / 0.15)


def test_without_any_record_the_wall_time_is_one_whole_program_step():
    bench = spec()
    data = program_result(bench, plan(bench), {}, 7.5)
    assert (data["timing"], data["step_times_s"], data["optimizer_steps"]) == (
        "whole program", [7.5], 0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        ([{"seconds": v} for v in ("0.5", "0.5", "0.25", "0.75")], [0.25, 0.75]),
        ([{"ms": v} for v in ("500", "500", "250", "x", "750")], [0.25, 0.75]),
    ],
    ids=["seconds", "ms"],
)
def test_a_step_pattern_s_group_is_each_step_s_time(groups, expected):
    times, seen = pattern_steps(spec(step_pattern="p"), [(0.0, g) for g in groups])
    assert times == pytest.approx(expected)  # the first --warmup 2 left out; "x" is no number
    assert seen == len(groups)


def test_without_a_group_the_time_between_matches_is_the_step_s():
    matched: list[tuple[float, dict[str, str | None]]] = [
        (t, {}) for t in (10.0, 10.5, 11.5, 11.75, 12.25)
    ]
    times, seen = pattern_steps(spec(step_pattern="p"), matched)
    assert times == pytest.approx([1.0, 0.25, 0.5])  # the first match has none; 1 more warm-up
    assert seen == 5


@pytest.mark.parametrize("gap", [0.0, 1e-7])
def test_lines_that_arrive_together_are_refused_as_held_back_not_timed(tmp_path: Path, gap):
    """A program whose output is buffered writes its step lines at once: 0 s apart divided by
    zero (a traceback), 0.1 us apart made a result `dtrun report` then refused as damaged."""
    bench = spec(step_pattern="step")
    matched: list[tuple[float, dict[str, str | None]]] = [
        (100.0 + index * gap, {}) for index in range(8)
    ]
    with pytest.raises(ResultError) as caught:
        write_program_result(bench, plan(bench), tmp_path, 9.0, matched)
    assert "--step-pattern's lines came" in caught.value.message
    assert "held back (buffered) and written at once" in caught.value.message
    assert "flush each line" in caught.value.fix
    assert not (tmp_path / "result.json").exists()


def test_a_step_pattern_that_matched_nothing_says_so():
    with pytest.raises(ResultError, match="--step-pattern matched no line of node 0's output"):
        pattern_steps(spec(step_pattern="step (?P<seconds>[0-9.]+)"), [])


def test_step_records_that_are_not_the_hook_s_are_refused(tmp_path: Path):
    (tmp_path / "rank-0.json").write_text(json.dumps(record(0, ENDS)))
    assert list(read_step_files(tmp_path)) == [0]
    (tmp_path / "rank-1.json").write_text(json.dumps({**record(1, ENDS), "step_ends_s": "x"}))
    with pytest.raises(ResultError, match="is not a step record"):
        read_step_files(tmp_path)


def test_a_step_record_nested_past_python_s_limit_is_refused_not_a_traceback(tmp_path: Path):
    (tmp_path / "rank-0.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ResultError, match="is not a step record"):
        read_step_files(tmp_path)


def test_a_rank_is_read_as_the_hook_writes_it_the_digits_of_rank(tmp_path: Path):
    (tmp_path / "rank-1.json").write_text(json.dumps({**record(1, ENDS), "rank": "1"}))
    assert list(read_step_files(tmp_path)) == [1]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        # each was a ValueError, OverflowError, TypeError or ZeroDivisionError after the launch
        ({"params": "x"}, "'params' is 'x', not a whole number"),
        ({"peak_memory_bytes": float("inf")}, "'peak_memory_bytes' is inf, not a whole number"),
        # a report of -5 parameters or -1 bytes: no count a program has
        ({"params": -5}, "'params' is -5, outside 0 to"),
        ({"peak_memory_bytes": -1}, "'peak_memory_bytes' is -1, outside 0 to"),
        ({"errors": [{"a": 1}]}, "'errors[0]' is an object, not text"),
        ({"errors": 5}, "'errors' is 5, not a list"),
        ({"param_digest": [1]}, "'param_digest' is a list, not text"),
        ({"rank": "0x1"}, "'rank' is '0x1', not a rank"),
        ({"gradient_bytes": {"float32": "x"}}, "gradient_bytes are not whole numbers of bytes"),
        ({"gradient_bytes": {"float32": -40}}, "gradient_bytes are not whole numbers of bytes"),
        ({"gradient_bytes": {"float32": True}}, "gradient_bytes are not whole numbers of bytes"),
        ({"step_ends_s": [1.0] * 6}, "step_ends_s do not increase"),
        ({"step_ends_s": [6.0, 5.0, 4.0, 3.0, 2.0, 1.0]}, "step_ends_s do not increase"),
    ],
)
def test_a_step_record_field_of_another_kind_fails_the_launch_saying_which(
    tmp_path: Path, change: dict[str, Any], why: str
):
    """The program's processes write the records (the hook runs in them): any field dtrun
    uses is held to its kind, and a launch with a record of another is failed with its name."""
    steps = tmp_path / "dtrun-steps"
    steps.mkdir()
    (steps / "rank-0.json").write_text(json.dumps({**record(0, ENDS), **change}))
    (steps / "rank-1.json").write_text(json.dumps(record(1, ENDS)))
    bench = spec()
    with pytest.raises(ResultError) as caught:
        write_program_result(bench, plan(bench), tmp_path, 9.0, None)
    assert "rank-0.json is not a step record" in caught.value.message
    assert why in caught.value.message
    assert not (tmp_path / "result.json").exists()


def test_a_noise_window_holding_nan_leaves_the_launch_without_noise_figures(tmp_path: Path):
    """result.json is written without NaN (allow_nan=False): a window's NaN was a ValueError."""
    steps = tmp_path / "dtrun-steps"
    steps.mkdir()
    for rank in (0, 1):
        hostile = {**window("m", 190, 0.5), "wall_s": float("nan")}
        (steps / f"rank-{rank}.json").write_text(
            json.dumps({**record(rank, ENDS), "noise_window": hostile})
        )
    bench = spec()
    write_program_result(bench, plan(bench), tmp_path, 9.0, None)
    assert json.loads((tmp_path / "result.json").read_text())["noise"] is None


def test_a_record_of_a_process_with_no_rank_is_left_out(tmp_path: Path):
    (tmp_path / "rank-0.json").write_text(json.dumps(record(0, ENDS)))
    (tmp_path / "rank-pid4242.json").write_text(json.dumps({**record(0, ENDS), "rank": "pid4242"}))
    assert list(read_step_files(tmp_path)) == [0]


def test_each_rank_s_whole_model_is_counted_once_however_sharded():
    bench = spec()
    records = {rank: record(rank, ENDS, f"d{rank}", "FSDP (DTensor shards)") for rank in (0, 1)}
    assert program_result(bench, plan(bench), records, 9.0)["params"] == 10


def window(machine: str, busy: int, own_cpu_s: float) -> dict[str, Any]:
    """A rank's noise window as the hook records it (runner/workloads/noise.py rank_window)."""
    return {
        "machine": machine, "cpus": 2, "wall_s": 1.0, "own_cpu_s": own_cpu_s,
        "ticks": {"total": 200, "busy": busy, "steal": 0}, "loadavg_1m": 1.0,
    }  # fmt: skip


def test_every_rank_s_window_gives_the_launch_its_noise_figures():
    bench = spec()
    records = {r: {**record(r, ENDS), "noise_window": window("m", 190, 0.5)} for r in (0, 1)}
    data = program_result(bench, plan(bench), records, 9.0)
    noise = data["noise"]
    [node] = [n for n in noise["nodes"] if n["node"] == "node-0"]
    assert node["nodes_on_machine"] == ["node-0", "node-1"]  # one machine, both ranks' CPU
    assert node["other_cores"] == pytest.approx(0.9)  # 1.9 CPU-s busy - 1.0 of the launch's
    assert noise["probe"]["rank_s"] is None  # these records have no gradient times
    assert "no rank's gradients were seen ready" in noise["probe"]["why"]
    parsed = parse_result(data, "r")
    assert isinstance(parsed, TrainResult) and parsed.noise is not None
    assert parsed.noise.nodes[0].other_cores == pytest.approx(0.9)


def timed(rank: int, compute_s: float) -> dict[str, Any]:
    """A rank whose every step's last gradient came ``compute_s`` after the step before it
    ended (the first step has none: the hook registers its gradient hooks at its end)."""
    ready = [None] + [end + compute_s for end in ENDS[:-1]]
    return {**record(rank, ENDS), "address": f"127.0.0.{rank + 2}",
            "noise_window": window(f"m{rank}", 100, 1.0), "grads_ready_s": ready}  # fmt: skip


def test_each_rank_s_time_to_its_last_gradient_names_a_slow_rank_and_its_host():
    from dtrun.report.noise import point_noise

    bench = spec()
    data = program_result(bench, plan(bench), {0: timed(0, 0.05), 1: timed(1, 0.08)}, 9.0)
    probe = data["noise"]["probe"]
    assert probe["rank_s"] == pytest.approx([0.05, 0.08]) and probe["steps"] == 4
    assert probe["what"] == "from a step's start until its last local gradient"
    assert data["ranks"][1]["address"] == "127.0.0.3"
    result = parse_result(data, "r")
    assert isinstance(result, TrainResult)
    (finding,) = point_noise(2, [result.noise]).findings
    assert finding == (
        "Rank 1 on node-1 (127.0.0.3) is a straggler: it took 1.60x as long as the median of "
        "the other ranks from a step's start until its last local gradient, launch 1 of 1"
    )


def test_ranks_alike_to_their_last_gradient_name_no_one():
    from dtrun.report.noise import point_noise

    bench = spec()
    data = program_result(bench, plan(bench), {0: timed(0, 0.05), 1: timed(1, 0.055)}, 9.0)
    result = parse_result(data, "r")
    assert isinstance(result, TrainResult)
    point = point_noise(2, [result.noise])
    assert point.probe_ratio == pytest.approx(1.1) and point.findings == ()


def test_a_rank_without_a_window_leaves_the_launch_without_noise_figures():
    bench = spec()
    records = {0: {**record(0, ENDS), "noise_window": window("m", 190, 0.5)}, 1: record(1, ENDS)}
    data = program_result(bench, plan(bench), records, 9.0)
    assert data["noise"] is None
    parsed = parse_result(data, "r")
    assert isinstance(parsed, TrainResult) and parsed.noise is None


def program_facts(data: dict[str, Any]) -> ProgramFacts:
    result = parse_result(data, "r")
    assert isinstance(result, TrainResult) and result.program is not None
    return result.program


@pytest.mark.parametrize("sharded", ["DeepSpeed ZeRO stage 3", None])
def test_the_result_says_how_the_parameters_are_sharded(sharded):
    bench = spec()
    records = {rank: record(rank, ENDS, f"d{rank}", sharded) for rank in (0, 1)}
    data = program_result(bench, plan(bench), records, 9.0)
    assert data["sharded"] == sharded
    assert program_facts(data).sharded == sharded


def test_a_result_written_before_sharded_reads_it_from_its_proof():
    bench = spec()
    records = {
        rank: record(rank, ENDS, f"d{rank}", "FSDP (flat parameter shards)") for rank in (0, 1)
    }
    data = program_result(bench, plan(bench), records, 9.0)
    del data["sharded"]
    assert program_facts(data).sharded == "FSDP (flat parameter shards)"
    whole = program_result(bench, plan(bench), {0: record(0, ENDS), 1: record(1, ENDS)}, 9.0)
    del whole["sharded"]
    assert program_facts(whole).sharded is None


def test_a_torch_without_global_step_hooks_says_the_hook_could_not_register():
    bench = spec()
    # what sitecustomize.py records when torch.optim.optimizer has no global step hooks
    error = (
        "hooks: AttributeError: module 'torch.optim.optimizer' has no attribute "
        "'register_optimizer_step_pre_hook'"
    )
    records = {rank: {**record(rank, [], None), "errors": [error]} for rank in (0, 1)}
    with pytest.raises(ResultError) as raised:
        program_result(bench, plan(bench), records, 9.0)
    what, why, fix = raised.value.what, raised.value.why, raised.value.fix
    assert what.startswith("dtrun's step hook could not register torch's optimizer step hooks")
    assert "AttributeError: module 'torch.optim.optimizer' has no attribute" in what
    assert "0 optimizer step" not in what
    assert "register_optimizer_step_post_hook" in why and "2.0" in why
    assert "upgrade torch" in fix and "--step-pattern" in fix


def test_a_slow_rank_whose_extra_time_is_a_sliver_of_the_step_is_not_named():
    """1.6x of 5 ms is 3 ms of a 150 ms step: scheduling jitter, costing the step nothing."""
    from dtrun.report.noise import point_noise

    bench = spec()
    data = program_result(bench, plan(bench), {0: timed(0, 0.005), 1: timed(1, 0.008)}, 9.0)
    result = parse_result(data, "r")
    assert isinstance(result, TrainResult)
    point = point_noise(2, [result.noise])
    assert point.probe_ratio == pytest.approx(1.6) and point.findings == ()


def test_a_hook_that_did_not_load_fails_the_launch_naming_the_reason():
    bench = spec()
    # what runner/workloads/stephook/sitecustomize.py records when the hook's module fails
    error = "load: ImportError: the hook is broken"
    records = {0: {"schema": "dtrun.steps/1", "rank": "0", "step_ends_s": [], "errors": [error]}}
    with pytest.raises(ResultError) as raised:
        program_result(bench, plan(bench), records, 9.0)
    assert (
        raised.value.what
        == "dtrun's step hook did not load on rank 0: ImportError: the hook is broken"
    )
    assert "--step-pattern" in raised.value.fix


def test_step_records_from_ranks_dtrun_did_not_launch_are_said_in_the_proof():
    # the program ran `torchrun --nproc-per-node 2` itself: ranks 0 and 1 on a 1-process launch
    bench = spec(node_counts=(1,))
    one = plan_sweep(resolve_bench(bench), local_cluster(2, python_bin="/v/bin", code_dir="/c",
                                                         cpu_count=4)).points[0]  # fmt: skip
    assert one.world_size == 1
    data = program_result(bench, one, {0: record(0, ENDS), 1: record(1, ENDS)}, 9.0)
    assert data["proof"]["answer"] == "not checked"
    assert data["proof"]["why"].startswith(
        "the step records name ranks 0, 1, where dtrun launched 1 process (rank 0): the program "
        "started processes of its own"
    )
    facts = parse_result(data, "r")
    assert facts.proof.startswith("not checked: the step records name ranks 0, 1")  # the console's


def test_a_result_json_the_program_wrote_is_kept_and_the_launch_fails_saying_so(tmp_path: Path):
    # dtrun's own result.json goes in the launch directory, the program's working directory:
    # written over, the program's file (its own metrics) was lost without a word
    from dtrun.sweep.programresult import write_program_result

    bench = spec()
    (tmp_path / "result.json").write_text('{"accuracy": 0.93}')
    with pytest.raises(ResultError) as raised:
        write_program_result(bench, plan(bench), tmp_path, 7.5, None)
    assert raised.value.message.startswith(
        f"the program wrote result.json in its launch directory {tmp_path}, where dtrun writes "
        "the launch's result"
    )
    assert (tmp_path / "result.json").read_text() == '{"accuracy": 0.93}'


@pytest.mark.parametrize("value", ["1e-9", "1e-320", "2e6"])
def test_a_step_pattern_time_a_result_cannot_hold_fails_the_launch_naming_it(tmp_path: Path, value):
    """A `seconds` group's 1e-9 made a result.json `dtrun report` then called damaged, and
    1e-320 an infinite throughput that result.json cannot hold (a ValueError traceback)."""
    bench = spec(step_pattern="took (?P<seconds>\\S+) s", warmup=1)
    matched: list[tuple[float, dict[str, str | None]]] = [
        (float(t), {"seconds": "0.5" if t < 2 else value}) for t in range(4)
    ]
    with pytest.raises(ResultError) as caught:
        write_program_result(bench, plan(bench), tmp_path, 9.0, matched)
    assert f"--step-pattern read a step of {float(value):g} s" in caught.value.message
    assert "(?P<seconds>...)" in caught.value.fix
    assert not (tmp_path / "result.json").exists()


def test_a_step_record_step_a_result_cannot_hold_fails_the_launch_naming_the_rank(
    tmp_path: Path,
):
    steps = tmp_path / "dtrun-steps"
    steps.mkdir()
    ends = [1.0, 1.1, 1.2, 1.2 + 1e-9, 1.3]  # a step of a nanosecond, timed
    (steps / "rank-0.json").write_text(json.dumps(record(0, ends)))
    bench = spec()
    with pytest.raises(ResultError, match="rank 0's step record has a step of 1e-09 s"):
        write_program_result(bench, plan(bench), tmp_path, 9.0, None)
    assert not (tmp_path / "result.json").exists()


def test_doubled_braces_pass_a_placeholder_s_name_to_the_program_as_it_is():
    args = ("--a", "{{nodes}}", "--n={nodes}/{{world_size}}", '{"a": {"b": {nodes}}}', "{nodez}")
    launch = plan(spec(program=Program(ProgramKind.SCRIPT, "/w/train.py", args))).launches[0]
    line = next(line for line in launch.script.splitlines() if "/w/train.py" in line)
    # other braces pass as they are: a JSON argument keeps its own "}}"
    assert line.split() == [
        "/w/train.py", "--a", "'{nodes}'", "'--n=2/{world_size}'", "'{\"a\":", "{\"b\":",
        "2}}'", "'{nodez}'",
    ]  # fmt: skip
