"""docs/prediction-data.yaml: published scaling results to score `dtrun predict` against.

Each entry is one workload at 3 or more whole-node scale points, so that a prediction from
the two smallest points can be scored at the largest (issue 26). The schema is a pydantic
model; the tests show that it refuses the mistakes a hand-kept table invites, then that the
table passes it.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections import defaultdict
from typing import Any, Literal

import pydantic
import pytest
import yaml

from tests.paths import REPO

TABLE = REPO / "docs" / "prediction-data.yaml"


# the sets in the order they were gathered (issue 38): each held-out set after the ones before
GATHERED = ("fit", "test", *(f"holdout{n}" for n in range(2, 12)))


class Point(pydantic.BaseModel):
    """One scale point: whole nodes, and exactly one positive measure."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True, strict=True)

    nodes: int = pydantic.Field(ge=1)
    throughput: float | None = pydantic.Field(default=None, gt=0)
    step_time_s: float | None = pydantic.Field(default=None, gt=0)

    @pydantic.model_validator(mode="after")
    def _one_measure(self) -> Point:
        if (self.throughput is None) == (self.step_time_s is None):
            raise ValueError("a point gives exactly one of throughput and step_time_s")
        return self


class Entry(pydantic.BaseModel):
    """One published result: the `dtrun predict --from` fields plus where they came from,
    the source's own words (`quote`), how the numbers were checked, and the set it is in."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    id: str = pydantic.Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")
    source: str = pydantic.Field(min_length=1)
    source_group: str = pydantic.Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$")
    split: str  # one of GATHERED (_a_known_set)
    url: str = pydantic.Field(min_length=1)
    where: str = pydantic.Field(min_length=1)
    workload: str = pydantic.Field(min_length=1)
    precision: str = pydantic.Field(min_length=1)
    per_gpu_batch: str = pydantic.Field(min_length=1)
    hardware: str = pydantic.Field(min_length=1)
    interconnect: str = pydantic.Field(min_length=1)
    procs_per_node: int = pydantic.Field(ge=1)
    mode: Literal["weak", "strong"]
    strategy: Literal["ddp", "fsdp", "zero1", "zero2", "zero3", "horovod"]
    parameters: float = pydantic.Field(gt=0)
    gradient_bytes_per_parameter: Literal[2, 4]
    busbw_gbs: float | None = pydantic.Field(default=None, gt=0)
    points: tuple[Point, ...] = pydantic.Field(min_length=3)
    unit: str = pydantic.Field(min_length=1)
    notes: str = pydantic.Field(min_length=1)
    quote: str = pydantic.Field(min_length=1)
    checked: str = pydantic.Field(min_length=1)
    printed: Literal["global", "per_gpu", "per_node"] = "global"
    tensor_parallel: int = pydantic.Field(default=1, ge=1)
    pipeline_parallel: int = pydantic.Field(default=1, ge=1)
    # each pipeline's micro-batches a step at the smallest point (strong scaling: its bubble)
    micro_batches: float | None = pydantic.Field(default=None, ge=1)
    virtual_pipeline_stages: int | None = pydantic.Field(default=None, ge=1)
    year: int | None = pydantic.Field(default=None, ge=2012, le=2030)

    @pydantic.field_validator("split")
    @classmethod
    def _a_known_set(cls, split: str) -> str:
        if split not in GATHERED:
            raise ValueError(f"split is one of {', '.join(GATHERED)}")
        return split

    @pydantic.field_validator("points")
    @classmethod
    def _nodes_increase(cls, points: tuple[Point, ...]) -> tuple[Point, ...]:
        nodes = [p.nodes for p in points]
        if any(b <= a for a, b in itertools.pairwise(nodes)):
            raise ValueError(f"nodes must increase point to point, got {nodes}")
        return points

    @pydantic.field_validator("url")
    @classmethod
    def _url_names_a_page_or_a_file(cls, url: str) -> str:
        if not url.startswith(("https://", "github.com/")):
            raise ValueError(f"url must be https://... or github.com/owner/repo/...: {url!r}")
        return url


# a number as a source prints it: 1,395,131 or 2001.00 or 0.52
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _printed_numbers(quote: str) -> list[tuple[float, int]]:
    """Every number in the quote, with how many decimals the source printed."""
    found = []
    for token in _NUMBER.findall(quote):
        digits = token.replace(",", "")
        found.append((float(digits), len(digits.partition(".")[2])))
    return found


def _as_printed(entry: Entry, point: Point) -> float:
    """The point's measure as the source prints it: global, per GPU or per node."""
    if point.step_time_s is not None:
        return point.step_time_s
    assert point.throughput is not None
    per = {"global": 1, "per_node": point.nodes, "per_gpu": point.nodes * entry.procs_per_node}
    return point.throughput / per[entry.printed]


def _missing_from_quote(entry: Entry) -> list[int]:
    """The node counts whose number is not in the entry's quote.

    A global figure must be printed exactly; one the table derives from a per-GPU or per-node
    figure must round to the printed digits."""
    printed = _printed_numbers(entry.quote)
    missing = []
    for point in entry.points:
        value = _as_printed(entry, point)
        if entry.printed == "global":
            hit = any(value == number for number, _ in printed)
        else:
            hit = any(abs(value - n) <= 0.5 * 10.0**-d + 1e-9 * n for n, d in printed)
        if not hit:
            missing.append(point.nodes)
    return missing


def _load() -> list[dict[str, Any]]:
    loaded = yaml.safe_load(TABLE.read_text(encoding="utf-8"))
    assert isinstance(loaded, list)
    return loaded


def _good() -> dict[str, Any]:
    return copy.deepcopy(_load()[0])


def _refused(entry: dict[str, Any]) -> str:
    with pytest.raises(pydantic.ValidationError) as caught:
        Entry.model_validate(entry)
    return str(caught.value)


def test_the_first_entry_of_the_table_is_the_schema_s_valid_example():
    assert Entry.model_validate(_good()).points[0].nodes >= 1


@pytest.mark.parametrize(
    "key", ["url", "mode", "points", "parameters", "procs_per_node", "quote", "split", "checked"]
)
def test_an_entry_missing_a_required_key_is_refused(key):
    entry = _good()
    del entry[key]
    assert key in _refused(entry)


def test_an_entry_with_two_points_is_refused():
    entry = _good()
    entry["points"] = entry["points"][:2]
    assert "at least 3" in _refused(entry)


def test_nodes_that_do_not_increase_are_refused():
    entry = _good()
    entry["points"][1]["nodes"], entry["points"][2]["nodes"] = 4, 2
    assert "must increase" in _refused(entry)


def test_a_fraction_of_a_node_is_refused():
    entry = _good()
    entry["points"][0]["nodes"] = 0.5
    assert "nodes" in _refused(entry)


def test_a_point_with_both_throughput_and_step_time_is_refused():
    entry = _good()
    entry["points"][0]["step_time_s"] = 1.0
    assert "exactly one of throughput and step_time_s" in _refused(entry)


def test_a_point_with_neither_measure_is_refused():
    entry = _good()
    del entry["points"][0]["throughput"]
    assert "exactly one of throughput and step_time_s" in _refused(entry)


def test_a_step_time_alone_is_a_valid_measure():
    entry = _good()
    entry["points"] = [{"nodes": n, "step_time_s": 0.5} for n in (1, 2, 4)]
    assert Entry.model_validate(entry).points[2].step_time_s == 0.5


@pytest.mark.parametrize("value", [0, -12.5])
def test_a_throughput_that_is_not_positive_is_refused(value):
    entry = _good()
    entry["points"][0]["throughput"] = value
    assert "greater than 0" in _refused(entry)


def test_a_mode_outside_weak_and_strong_is_refused():
    entry = _good()
    entry["mode"] = "scaled"
    assert "mode" in _refused(entry)


def test_a_strategy_outside_the_list_is_refused():
    entry = _good()
    entry["strategy"] = "megatron"
    assert "strategy" in _refused(entry)


def test_an_empty_url_is_refused():
    entry = _good()
    entry["url"] = ""
    assert "url" in _refused(entry)


def test_a_misspelt_key_is_refused_not_ignored():
    entry = _good()
    entry["procs_per_nodes"] = entry.pop("procs_per_node")
    assert "procs_per_nodes" in _refused(entry)


def test_every_entry_of_the_table_passes_the_schema():
    for entry in _load():
        Entry.model_validate(entry)


def test_a_number_that_is_not_in_the_quote_is_found():
    entry = _good()
    entry["points"][1]["throughput"] += 1
    assert _missing_from_quote(Entry.model_validate(entry)) == [entry["points"][1]["nodes"]]


def test_a_number_printed_with_thousands_separators_or_trailing_zeros_is_found():
    entry = _good()
    entry["quote"] = "| 1 | 4,553 | 2 | 9191.00 | 4 | 18119 | 8 | 35774 | 70555 | 138294 |"
    assert _missing_from_quote(Entry.model_validate(entry)) == []


def test_a_per_gpu_figure_is_checked_against_the_global_throughput_it_gives():
    entry = _good()
    entry |= {"printed": "per_gpu", "procs_per_node": 8, "quote": "100.5 99.8 98"}
    entry["points"] = [
        {"nodes": 1, "throughput": 804.0},  # 100.5 a GPU
        {"nodes": 2, "throughput": 1596.8},  # 99.8
        {"nodes": 4, "throughput": 3200.0},  # 100: not printed
    ]
    assert _missing_from_quote(Entry.model_validate(entry)) == [4]


def test_every_point_s_number_is_printed_in_its_entry_s_quote():
    missing = {}
    for entry in map(Entry.model_validate, _load()):
        if gone := _missing_from_quote(entry):
            missing[entry.id] = gone
    assert missing == {}


def test_a_source_is_wholly_in_the_fit_set_or_wholly_in_the_test_set():
    splits = defaultdict(set)
    for entry in map(Entry.model_validate, _load()):
        splits[entry.source_group].add(entry.split)
    assert {group: s for group, s in splits.items() if len(s) > 1} == {}


def test_a_split_outside_fit_and_test_is_refused():
    entry = _good()
    entry["split"] = "validation"
    assert "split" in _refused(entry)


def test_the_table_holds_at_least_eighty_results_with_distinct_ids():
    ids = [entry["id"] for entry in _load()]
    assert len(ids) >= 80
    assert len(set(ids)) == len(ids)


def test_the_results_come_from_at_least_eight_sources_in_both_sets():
    entries = [Entry.model_validate(e) for e in _load()]
    groups = {
        split: {e.source_group for e in entries if e.split == split} for split in ("fit", "test")
    }
    assert len(groups["fit"] | groups["test"]) >= 8
    assert len(groups["fit"]) >= 3 and len(groups["test"]) >= 3, groups


def test_the_test_set_holds_at_least_thirty_results():
    # enough that "within 5 points in 85%" is a claim about more than a handful of results
    assert sum(Entry.model_validate(e).split == "test" for e in _load()) >= 30


def test_the_table_covers_all_reduce_and_sharded_strategies_and_both_modes():
    entries = [Entry.model_validate(e) for e in _load()]
    assert {"ddp", "horovod", "fsdp"} <= {e.strategy for e in entries}
    assert {e.mode for e in entries} == {"weak", "strong"}


def _repository(url: str) -> str:
    """The repository (or site) a result was read from: owner/name of a GitHub file or issue."""
    parts = url.removeprefix("https://").split("/")
    return "/".join(parts[:3]).lower()


@pytest.mark.parametrize("held_out", GATHERED[2:])
def test_each_held_out_set_shares_no_source_with_the_sets_gathered_before(held_out: str):
    # a held-out set was gathered after the sets before it were scored and read: its sources
    # must be new to all of them, or the score on it would not be a score on unseen data
    entries = [Entry.model_validate(e) for e in _load()]
    seen = [e for e in entries if e.split in GATHERED[: GATHERED.index(held_out)]]
    new = [e for e in entries if e.split == held_out]
    assert new
    assert {e.source_group for e in new}.isdisjoint({e.source_group for e in seen})
    assert {_repository(e.url) for e in new}.isdisjoint({_repository(e.url) for e in seen})
