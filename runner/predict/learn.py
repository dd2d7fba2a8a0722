"""Learn the model's prior (runner/predict/prior.py) from the published results.

    python -m dtrun.predict.learn CORPUS.yaml > runner/predict/prior.py
    python -m dtrun.predict.learn --cv CORPUS.yaml   # the cross-validation's figures

CORPUS.yaml is docs/prediction-data.yaml's format: a list of entries, each a `dtrun predict
--from` description with a `split` and provenance. The entries of `split: fit` and `split:
test` are read (the test set was scored once, then declared seen: issue 38); `holdout2` never
is. Of those, only all-reduce data parallelism: an entry whose notes or workload name a
parameter server is left out (its cost grows with the workers, not as the model's does).

For each scaling mode the hyperparameters (S's and g's mean and spread, the noise's floor and
its share of the loss) maximise the marginal likelihood of every entry's losses (type II
maximum likelihood, "empirical Bayes": Efron and Morris 1973; Gelman et al., Bayesian Data
Analysis, ch. 5). The range's half-width in standard deviations is the split-conformal quantile
(Lei et al. 2018) of the scores (standardised misses) left out by source: the largest point of
each entry predicted from its two smallest, by the prior learned without any entry of its
source (`source_group`), since one source's results share a cluster and its errors.
docs/prediction.md "The model" says the rest.
"""

from __future__ import annotations

import math
import re
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dtrun.predict.files import yaml_loader
from dtrun.predict.inputs import Description, description
from dtrun.predict.model import (
    LEAST_LOSS,
    Measured,
    bubble,
    features,
    losses,
    noise,
    optimistic,
    posterior,
)
from dtrun.predict.prior import Prior

SERVER = re.compile(r"parameter[ _-]servers?", re.I)
COVERAGE = 0.9  # the range's target: the measured value inside it in 9 of 10
FLOOR = 1e-4  # the least spread of S, g and the noise: 0.01 points of loss
LEARNED_FROM = ("fit", "test")  # the splits the prior is learned from; holdout2 is held out
Series = tuple[int, list[tuple[int, float]]]  # (base nodes, (nodes, loss) after the base)
# (source_group, series, the pipeline bubble's loss at each point of the series: model.Pipeline's,
# known, so taken out of the losses S and g are learned from and put back to score)
Sourced = tuple[str, Series, tuple[float, ...]]
Predicted = tuple[Series, float, float, tuple[float, ...]]  # series, mean, sd, bubbles


def learning_entries(path: Path) -> list[dict[str, Any]]:
    """The corpus's fit and test entries of all-reduce data parallelism."""
    import yaml

    entries = yaml.load(path.read_text(encoding="utf-8"), Loader=yaml_loader())
    return [
        e for e in entries
        if e.get("split") in LEARNED_FROM
        and not SERVER.search(f"{e.get('notes', '')} {e.get('workload', '')}")
    ]  # fmt: skip


def series(entry: dict[str, Any]) -> tuple[Description, Series]:
    """The entry's losses after its first point, less its pipeline bubble where known."""
    desc = description(entry, str(entry.get("id")))
    points = [Measured(n, t) for n, t in desc.steps()]
    return desc, (points[0].nodes, losses(points, desc.mode, desc.pipeline))


def _unpack(theta: Sequence[float]) -> Prior:
    """Each spread at least FLOOR: a few series a mode's two means fit exactly would otherwise
    send the likelihood to infinity as every spread and the noise go to 0."""
    mean_s, mean_g, log_s, log_g, log_noise, log_share = theta
    return Prior(mean_s, FLOOR + math.exp(log_s), mean_g, FLOOR + math.exp(log_g),
                 FLOOR + math.exp(log_noise), math.exp(log_share))  # fmt: skip


def neg_log_likelihood(prior: Prior, data: Sequence[Series]) -> float:
    """-log p(losses | hyperparameters), S and g integrated out (each entry's losses are
    jointly normal: mean X m0, covariance X P0 X' + diag(noise^2), each loss's noise
    model.noise of it)."""
    import numpy as np

    total = 0.0
    for base, observed in data:
        x = np.array([features(base, n) for n, _ in observed])
        y = np.array([loss for _, loss in observed])
        mean = x[:, 0] * prior.step_mean + x[:, 1] * prior.growth_mean
        cov = (
            np.outer(x[:, 0], x[:, 0]) * prior.step_sd**2
            + np.outer(x[:, 1], x[:, 1]) * prior.growth_sd**2
            + np.diag([noise(prior, loss) ** 2 for loss in y])
        )
        sign, logdet = np.linalg.slogdet(cov)
        if sign <= 0:  # a degenerate spread (Nelder-Mead's trial step): not a candidate
            return math.inf
        miss = y - mean
        total += 0.5 * float(logdet + miss @ np.linalg.solve(cov, miss))
    return total


def learn(data: Sequence[Series]) -> Prior:
    from scipy.optimize import minimize

    start = [0.03, 0.01, math.log(0.03), math.log(0.01), math.log(0.01), math.log(0.1)]
    found = minimize(
        lambda theta: neg_log_likelihood(_unpack(theta), data),
        start,
        method="Nelder-Mead",
        options={"maxiter": 20000, "xatol": 1e-8, "fatol": 1e-10},
    )
    return _unpack(found.x)


def left_out(by_mode: dict[str, list[Sourced]]) -> list[Predicted]:
    """Each entry's largest point's loss predicted from its two smallest by the prior learned
    without any entry of its source: (the entry's series, the loss's mean, its sd, the
    bubble's loss at each point; the series and the mean without the bubble)."""
    out = []
    for data in by_mode.values():
        for group in sorted({g for g, _, _ in data}):
            prior = learn([one for g, one, _ in data if g != group])
            for g, one, extras in data:
                base, observed = one
                if g != group or len(observed) < 2:  # two points only: nothing to predict
                    continue
                mean, sd = posterior(prior, base, observed[:1]).beyond(
                    observed[0], observed[-1][0], base, prior
                )
                out.append((one, mean, sd, extras))
    return out


def _quantile(scores: list[float]) -> float:
    """The ceil((n + 1) x COVERAGE)-th smallest of n (split-conformal)."""
    ordered = sorted(scores)
    return ordered[min(len(ordered), math.ceil((len(ordered) + 1) * COVERAGE)) - 1]


def score(one: Series, mean: float, sd: float, extras: Sequence[float]) -> float:
    """The least z whose range holds the series' largest loss, predicted from its first: the
    standardised miss, or infinity where the whole loss (the bubble's put back) is below the
    range's optimistic end at any z (model.optimistic: better than the first point)."""
    measured, first = one[1][-1][1] + extras[-1], one[1][0][1] + extras[0]
    if measured < min(first, mean + extras[-1]):
        return math.inf
    return abs(measured - extras[-1] - mean) / sd


def conformal_z(by_mode: dict[str, list[Sourced]]) -> float:
    """The split-conformal quantile of the scores (``score``) left out by source."""
    return _quantile([score(*predicted) for predicted in left_out(by_mode)])


def cross_validation(path: Path) -> str:
    """The forecasts left out by source, scored as docs/prediction.md scores a set: within 5
    points, mean and median miss (points of efficiency), inside the range, its median width."""
    predicted = left_out(by_mode(learning_entries(path)))
    z = _quantile([score(*one) for one in predicted])

    def eff(loss: float) -> float:
        return 1 / (1 + max(loss, LEAST_LOSS))

    misses, inside, widths = [], 0, []
    for one, mean, sd, extras in predicted:
        whole = mean + extras[-1]  # the bubble's put back
        measured = eff(one[1][-1][1] + extras[-1])
        low = eff(whole + z * sd)
        high = eff(optimistic(whole, z * sd, one[1][0][1] + extras[0]))
        misses.append(abs(eff(whole) - measured) * 100)
        inside += low <= measured <= high
        widths.append((high - low) * 100)
    hits = sum(m <= 5 + 1e-9 for m in misses)
    return (
        f"{len(misses)} results, each source left out: within 5 points {hits}, mean miss "
        f"{statistics.mean(misses):.2f}, median miss {statistics.median(misses):.2f}, inside "
        f"the range {inside} (z {z:.3g}), median width {statistics.median(widths):.1f}\n"
    )


def by_mode(entries: Sequence[dict[str, Any]]) -> dict[str, list[Sourced]]:
    out: dict[str, list[Sourced]] = {}
    for entry in entries:
        desc, one = series(entry)
        extras = tuple(bubble(desc.pipeline, one[0], nodes) for nodes, _ in one[1])
        out.setdefault(desc.mode.value, []).append((str(entry.get("source_group")), one, extras))
    return dict(sorted(out.items()))


def module(path: Path) -> str:
    """runner/predict/prior.py's text, learned from the corpus at ``path``."""
    entries = learning_entries(path)
    data = by_mode(entries)
    priors = {mode: learn([one for _, one, _ in sourced]) for mode, sourced in data.items()}
    lines = [
        f'    "{mode}": Prior({p.step_mean:.4g}, {p.step_sd:.4g}, {p.growth_mean:.4g}, '
        f"{p.growth_sd:.4g}, {p.noise_sd:.4g}, {p.noise_share:.4g}),  # {len(data[mode])} "
        "entries"
        for mode, p in priors.items()
    ]
    return TEMPLATE.format(
        entries=len(entries), priors="\n".join(lines), z=f"{conformal_z(data):.3g}"
    )


TEMPLATE = '''"""The model's prior, learned by runner/predict/learn.py from the fit set of the
published results in docs/prediction-data.yaml ({entries} fit and test entries of all-reduce
data parallelism). Do not edit; regenerate with
`python -m dtrun.predict.learn docs/prediction-data.yaml > runner/predict/prior.py`
(tests/unit/test_prediction_prior.py holds this file to what that prints)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Prior:
    """One scaling mode's: the one-time step S and the growth per doubling g, each a normal of
    this mean and spread (losses: 1/E - 1), and the noise of one measured loss: noise_sd
    plus noise_share times the loss's size (model.noise)."""

    step_mean: float
    step_sd: float
    growth_mean: float
    growth_sd: float
    noise_sd: float
    noise_share: float


PRIORS = {{
{priors}
}}
# the range's half-width in standard deviations (split-conformal by source, 90%)
RANGE_Z = {z}
'''


if __name__ == "__main__":
    if sys.argv[1] == "--cv":  # python -m dtrun.predict.learn --cv CORPUS.yaml
        sys.stdout.write(cross_validation(Path(sys.argv[2])))
    else:
        sys.stdout.write(module(Path(sys.argv[1])))
