"""docs/prediction.md's scores, replayed: every published result of the corpus through `dtrun
predict --from` (its two smallest node counts in, its largest predicted), against what was
measured there and against two naive forecasts: the held-out sets (holdout2 to holdout11, a
line each), and every set's forecasts in its CSV. The tables and figures in docs/prediction.md
must be the ones this replay computes.

    .venv/bin/python -m tests.unit.test_prediction_replay   # prints the blocks, writes the CSVs
"""

from __future__ import annotations

import csv
import io
import json
import re
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from dtrun.cli.app import app
from dtrun.predict.files import yaml_loader
from dtrun.predict.inputs import description
from dtrun.predict.learn import SERVER
from dtrun.predict.model import Measured, efficiency
from dtrun.predict.predict import CHECKED_INSIDE, CHECKED_OF, CHECKED_WITHIN_5
from tests.paths import REPO
from tests.unit.test_prediction_data import GATHERED as SPLITS  # fit, test, the held-out sets

DOCS = REPO / "docs"
DATA = DOCS / "prediction-data.yaml"  # the corpus, with its fit/test/holdout2-11 split
FIELDS = (
    "procs_per_node", "mode", "strategy", "parameters", "gradient_bytes_per_parameter",
    "busbw_gbs", "busbw_intra_node_gbs", "step_spread", "batch_per_process", "global_batch",
    "pipeline_parallel", "micro_batches", "virtual_pipeline_stages",
)  # fmt: skip
WITHIN = 0.05  # a hit: within 5 points


@dataclass(frozen=True)
class Scored:
    id: str
    group: str  # the source group
    mode: str
    nodes: tuple[int, ...]
    measured: float  # the largest point's efficiency against the smallest
    second: float  # the second point's: "efficiency stays where the second point put it"
    predicted: float
    low: float
    high: float
    scope: bool  # all-reduce data parallelism, what dtrun measures (not a parameter server)

    @property
    def inside(self) -> bool:
        return self.low <= self.measured <= self.high


def efficiencies(entry: dict[str, Any]) -> list[float]:
    """Each point's efficiency against the first, as the model reads them: from throughputs X,
    (X(N)/N)/(X(N0)/N0); from step times T, weak T0/T and strong N0 T0/(N T)."""
    desc = description(entry, entry["id"])
    steps = [Measured(n, t) for n, t in desc.steps()]
    return [efficiency(desc.mode, steps[0], p.nodes, p.step) for p in steps]


def replay(split: str) -> list[Scored]:
    entries = yaml.load(DATA.read_text(), Loader=yaml_loader())
    scored = []
    with tempfile.TemporaryDirectory() as tmp:
        for entry in (e for e in entries if e["split"] == split):
            points = entry["points"]
            two = {k: entry[k] for k in FIELDS if k in entry} | {"points": points[:2]}
            path = Path(tmp) / f"{entry['id']}.json"
            path.write_text(json.dumps(two))
            largest = points[-1]["nodes"]
            done = CliRunner().invoke(
                app, ["predict", "--from", str(path), "--nodes", str(largest), "--json"]
            )
            assert done.exit_code == 0, (entry["id"], done.output)
            [predicted] = json.loads(done.stdout[done.stdout.index("{") :])["predictions"]
            notes = f"{entry.get('notes', '')} {entry.get('workload', '')}"
            effs = efficiencies(entry)
            scored.append(
                Scored(
                    id=entry["id"],
                    group=entry["source_group"],
                    mode=entry["mode"],
                    nodes=tuple(p["nodes"] for p in points),
                    measured=effs[-1],
                    second=effs[1],
                    predicted=predicted["efficiency"],
                    low=predicted["efficiency_low"],
                    high=predicted["efficiency_high"],
                    scope=not SERVER.search(notes),
                )
            )
    return scored


def figures(rows: list[Scored]) -> dict[str, tuple[int, float, float]]:
    """For the model and each naive forecast: (hits within 5 points, mean miss, median miss),
    misses in points."""

    def of(guess: list[float]) -> tuple[int, float, float]:
        misses = [abs(g - r.measured) * 100 for g, r in zip(guess, rows, strict=True)]
        hits = sum(m <= WITHIN * 100 + 1e-9 for m in misses)
        return hits, round(statistics.mean(misses), 1), round(statistics.median(misses), 1)

    return {
        "the model": of([r.predicted for r in rows]),
        "stays at the second point's": of([r.second for r in rows]),
        "perfect scaling": of([1.0 for _ in rows]),
    }


def table(rows: list[Scored]) -> str:
    """Every result's forecast, as docs/prediction-<split>.csv holds it (data, beside the page)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([
        "result", "mode", "nodes", "measured at the largest", "predicted", "range low",
        "range high", "inside the range", "miss, points", "stays at the second point's, miss",
        "perfect, miss", "parameter server",
    ])  # fmt: skip
    for r in rows:
        writer.writerow([
            r.id, r.mode, " ".join(map(str, r.nodes)), f"{r.measured:.3f}", f"{r.predicted:.3f}",
            f"{r.low:.3f}", f"{r.high:.3f}", "yes" if r.inside else "no",
            f"{(r.predicted - r.measured) * 100:+.1f}", f"{(r.second - r.measured) * 100:+.1f}",
            f"{(1 - r.measured) * 100:+.1f}", "no" if r.scope else "yes",
        ])  # fmt: skip
    return out.getvalue()


def _header() -> list[str]:
    return [
        "| results | within 5 points: model | mean miss: model | stays at the second point's "
        "| perfect scaling | median miss: model | inside the range | median range width |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]


def _line(name: str, chosen: list[Scored]) -> str:
    got = figures(chosen)
    hits, mean, median = got["the model"]
    second, perfect = got["stays at the second point's"][1], got["perfect scaling"][1]
    inside = sum(r.inside for r in chosen)
    width = statistics.median((r.high - r.low) * 100 for r in chosen)
    return (
        f"| {name} ({len(chosen)}) | {hits} ({hits / len(chosen):.0%}) | {mean:.1f} "
        f"| {second:.1f} | {perfect:.1f} "
        f"| {median:.1f} | {inside} ({inside / len(chosen):.0%}) | {width:.1f} |"
    )


def scores(sets: list[tuple[str, list[Scored]]]) -> str:
    """A line per held-out set and one for all of them (every result's forecast is in the
    set's CSV): each forecast's hits and misses, and the model's range: how often it held the
    measured value, and its median width."""
    together = [r for _, rows in sets for r in rows]
    lines = [_line(name, rows) for name, rows in sets]
    return "\n".join([*_header(), *lines, _line("all held-out", together)])


def _block(text: str, name: str) -> str:
    found = re.search(rf"<!-- {name} -->\n(.*?)\n<!-- /{name} -->", text, re.S)
    assert found, f"docs/prediction.md has no <!-- {name} --> block"
    return found.group(1).strip()


def blocks() -> dict[str, str]:
    return {"held-out-scores": scores([(split, replay(split)) for split in SPLITS[2:]])}


def test_docs_prediction_holds_the_replayed_tables_and_scores():
    text = (DOCS / "prediction.md").read_text()
    for name, computed in blocks().items():
        assert _block(text, name) == computed, computed


@pytest.mark.parametrize("split", SPLITS)
def test_the_docs_csv_holds_every_replayed_forecast(split: str):
    computed = table(replay(split))
    assert (DOCS / f"prediction-{split}.csv").read_text() == computed, computed


def test_the_report_s_figures_are_the_held_out_sets_together():
    rows = [r for split in SPLITS[2:] for r in replay(split)]
    inside = sum(r.inside for r in rows)
    assert (figures(rows)["the model"][0], inside, len(rows)) == (
        CHECKED_WITHIN_5,
        CHECKED_INSIDE,
        CHECKED_OF,
    )


def test_every_published_result_gets_a_prediction_within_its_range():
    for row in [r for split in SPLITS for r in replay(split)]:
        assert row.low <= row.predicted <= row.high, row


if __name__ == "__main__":
    for name, computed in blocks().items():
        print(f"<!-- {name} -->\n{computed}\n<!-- /{name} -->\n")
    for split in SPLITS:  # the forecasts, one file a split
        (DOCS / f"prediction-{split}.csv").write_text(table(replay(split)))
