"""How well can anything forecast a published result's largest point from its two smallest?

Issue 38's score: `dtrun predict` gets each result's two smallest node counts and forecasts
its largest; the target is 85% of results within 5 points of efficiency. This asks whether
that is in the two points at all. Each source (`source_group`) is left out in turn, and its
results are forecast by what was learned from every other source's:

- the model (runner/predict/model.py) with its prior learned by runner/predict/learn.py from
  the other sources (as `python -m dtrun.predict.learn --cv` does, on more sets);
- flexible learners (scikit-learn's gradient boosting, and k nearest neighbours on
  standardised inputs) given the same inputs: the second point's loss, the doublings from
  the first point to the second and from the second to the largest, the scaling mode, whether
  the first point is one node. Each learns the loss added per doubling beyond the second
  point. Several settings are tried and every one is printed: the best of them, chosen after
  the fact, is an optimistic ceiling;
- the naive forecast: the second point's efficiency stays;

and, for the results with four or more points, the model from the three smallest.

A miss is forecast minus measured efficiency in points (docs/prediction.md). Needs
scikit-learn, which dtrun does not depend on: `.venv/bin/pip install scikit-learn`.

    PYTHONPATH=. .venv/bin/python benchmarks/prediction_ceiling.py [--splits fit,test,...]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dtrun.predict import learn
from dtrun.predict.files import yaml_loader
from dtrun.predict.model import LEAST_LOSS, posterior
from dtrun.predict.prior import Prior

CORPUS = Path(__file__).resolve().parent.parent / "docs" / "prediction-data.yaml"
HEADER = (
    "| forecast | within 5 points | mean miss | median miss | mean signed miss |\n"
    "|---|---:|---:|---:|---:|"
)


@dataclass(frozen=True)
class Row:
    """One result with three or more points: its source, mode, losses and bubble."""

    group: str
    mode: str
    base: int
    observed: list[tuple[int, float]]  # (nodes, loss) after the first point
    extra: float  # the pipeline bubble's loss at the largest point

    @property
    def second(self) -> float:
        return self.observed[0][1]

    @property
    def largest(self) -> float:
        return self.observed[-1][1]

    @property
    def beyond(self) -> float:
        """Doublings from the second point to the largest."""
        return math.log2(self.observed[-1][0] / self.observed[0][0])

    def inputs(self) -> list[float]:
        first = math.log2(self.observed[0][0] / self.base)
        return [self.second, first, self.beyond, self.mode == "weak", self.base == 1]


def eff(loss: float) -> float:
    return 1 / (1 + max(loss, LEAST_LOSS))


def rows(splits: tuple[str, ...]) -> list[Row]:
    learn.LEARNED_FROM = splits  # type: ignore[assignment]  # the sets read
    return [
        Row(group, mode, base, observed, extras[-1])
        for mode, data in learn.by_mode(learn.learning_entries(CORPUS)).items()
        for group, (base, observed), extras in data
        if len(observed) >= 2
    ]


def model_losses(data: list[Row], given: int = 1) -> list[float]:
    """The model's forecast loss of each row from its first ``given`` points after the first
    (1: the two smallest), its prior learned without the row's source."""
    entries = learn.by_mode(learn.learning_entries(CORPUS))
    priors: dict[tuple[str, str], Prior] = {}  # (mode, source left out): the prior
    out = []
    for row in data:
        key = (row.mode, row.group)
        if key not in priors:
            priors[key] = learn.learn([one for g, one, _ in entries[row.mode] if g != row.group])
        prior = priors[key]
        mean, _ = posterior(prior, row.base, row.observed[:given]).beyond(
            row.observed[given - 1], row.observed[-1][0], row.base, prior
        )
        out.append(mean)
    return out


def learner_losses(data: list[Row], make: Callable[[], Any]) -> list[float]:
    """A scikit-learn regressor's forecast loss of each row, trained on the other sources:
    it learns the loss added per doubling beyond the second point."""
    import numpy as np

    x = np.array([row.inputs() for row in data], float)
    slope = np.array([(row.largest - row.second) / row.beyond for row in data])
    groups = np.array([row.group for row in data])
    out = np.zeros(len(data))
    for group in sorted(set(groups)):
        train, test = groups != group, groups == group
        fitted = make().fit(x[train], slope[train])
        out[test] = x[test, 0] + fitted.predict(x[test]) * x[test, 2]
    return [float(v) for v in out]


def line(name: str, data: list[Row], forecast: list[float]) -> str:
    misses = [
        (eff(f + row.extra) - eff(row.largest + row.extra)) * 100
        for row, f in zip(data, forecast, strict=True)
    ]
    size = [abs(m) for m in misses]
    hits = sum(m <= 5 + 1e-9 for m in size)
    return (
        f"| {name} | {hits} ({hits / len(size):.0%}) | {statistics.mean(size):.1f} | "
        f"{statistics.median(size):.1f} | {statistics.mean(misses):+.1f} |"
    )


def learners() -> list[tuple[str, Callable[[], Any]]]:
    """Every scikit-learn setting tried, named."""
    from sklearn.ensemble import GradientBoostingRegressor  # type: ignore[import-not-found]
    from sklearn.neighbors import KNeighborsRegressor  # type: ignore[import-not-found]
    from sklearn.pipeline import make_pipeline  # type: ignore[import-not-found]
    from sklearn.preprocessing import StandardScaler  # type: ignore[import-not-found]

    def boosting(loss: str, depth: int) -> Callable[[], Any]:
        return lambda: GradientBoostingRegressor(
            loss=loss, n_estimators=200, max_depth=depth, learning_rate=0.05, random_state=0
        )

    def neighbours(k: int) -> Callable[[], Any]:
        return lambda: make_pipeline(StandardScaler(), KNeighborsRegressor(k, weights="distance"))

    out = [
        (f"gradient boosting, {loss}, depth {depth}", boosting(loss, depth))
        for loss in ("absolute_error", "huber", "squared_error")
        for depth in (1, 2, 3)
    ]
    return out + [(f"{k} nearest neighbours", neighbours(k)) for k in (3, 5, 10, 20)]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--splits", help="the sets to use (default: every set in the corpus)")
    args = parser.parse_args()
    try:
        tried = learners()
    except ImportError:
        print("needs scikit-learn: .venv/bin/pip install scikit-learn", file=sys.stderr)
        return 2
    if args.splits:
        splits = tuple(args.splits.split(","))
    else:
        corpus = yaml.load(CORPUS.read_text(encoding="utf-8"), Loader=yaml_loader())
        splits = tuple(sorted({str(e["split"]) for e in corpus}))
    data = rows(splits)
    print(f"{len(data)} results from {len({r.group for r in data})} sources "
          f"({', '.join(splits)}), each source left out in turn\n")  # fmt: skip
    print(HEADER)
    print(line("the model", data, model_losses(data)))
    print(line("the second point's stays", data, [row.second for row in data]))
    for name, make in tried:
        print(line(name, data, learner_losses(data, make)))
    longer = [row for row in data if len(row.observed) >= 3]
    print(f"\nThe {len(longer)} with four or more points, the largest forecast from:\n")
    print(HEADER)
    print(line("the model, the two smallest", longer, model_losses(longer)))
    print(line("the model, the three smallest", longer, model_losses(longer, 2)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
