"""Learn the model's prior (runner/predict/prior.py) from the published results.

    python -m dtrun.predict.learn CORPUS.yaml > runner/predict/prior.py

CORPUS.yaml is docs/prediction-data.yaml's format: a list of entries, each a `dtrun predict
--from` description with a `split` and provenance. The entries of `split: fit` and `split:
test` are read (the test set was scored once, then declared seen: issue 38); `holdout2` never
is. Of those, only all-reduce data parallelism: an entry whose notes or workload name a
parameter server is left out (its cost grows with the workers, not as the model's does).

For each scaling mode the hyperparameters (S's and g's mean and spread, and the noise) maximise
the marginal likelihood of every entry's losses (type II maximum likelihood, "empirical Bayes":
Efron and Morris 1973; Gelman et al., Bayesian Data Analysis, ch. 5). The range's half-width in
standard deviations is the split-conformal quantile (Lei et al. 2018) of the standardised
misses left out by source: the largest point of each entry predicted from its two smallest, by
the prior learned without any entry of its source (`source_group`), since one source's
results share a cluster and its errors. docs/prediction.md "The model" says the rest.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dtrun.predict.inputs import Description, description, yaml_loader
from dtrun.predict.model import Measured, features, losses, posterior
from dtrun.predict.prior import Prior

SERVER = re.compile(r"parameter[ _-]servers?", re.I)
COVERAGE = 0.9  # the range's target: the measured value inside it in 9 of 10
LEARNED_FROM = ("fit", "test")  # the splits the prior is learned from; holdout2 is held out
Series = tuple[int, list[tuple[int, float]]]  # (base nodes, (nodes, loss) after the base)
Sourced = tuple[str, Series]  # (source_group, series)


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
    desc = description(entry, str(entry.get("id")))
    points = [Measured(n, t) for n, t in desc.steps()]
    return desc, (points[0].nodes, losses(points, desc.mode))


def _unpack(theta: Sequence[float]) -> Prior:
    mean_s, mean_g, log_s, log_g, log_noise = theta
    return Prior(mean_s, math.exp(log_s), mean_g, math.exp(log_g), math.exp(log_noise))


def neg_log_likelihood(prior: Prior, data: Sequence[Series]) -> float:
    """-log p(losses | hyperparameters), S and g integrated out (each entry's losses are
    jointly normal: mean X m0 + lam z, covariance X P0 X' + noise^2 I)."""
    import numpy as np

    total = 0.0
    for base, observed in data:
        x = np.array([features(base, n) for n, _ in observed])
        y = np.array([loss for _, loss in observed])
        mean = x[:, 0] * prior.step_mean + x[:, 1] * prior.growth_mean
        cov = (
            np.outer(x[:, 0], x[:, 0]) * prior.step_sd**2
            + np.outer(x[:, 1], x[:, 1]) * prior.growth_sd**2
            + np.eye(len(y)) * prior.noise_sd**2
        )
        sign, logdet = np.linalg.slogdet(cov)
        if sign <= 0:  # a degenerate spread (Nelder-Mead's trial step): not a candidate
            return math.inf
        miss = y - mean
        total += 0.5 * float(logdet + miss @ np.linalg.solve(cov, miss))
    return total


def learn(data: Sequence[Series]) -> Prior:
    from scipy.optimize import minimize

    start = [0.03, 0.01, math.log(0.03), math.log(0.01), math.log(0.01)]
    found = minimize(
        lambda theta: neg_log_likelihood(_unpack(theta), data),
        start,
        method="Nelder-Mead",
        options={"maxiter": 20000, "xatol": 1e-8, "fatol": 1e-10},
    )
    return _unpack(found.x)


def standardised_miss(prior: Prior, one: Series) -> float:
    """|measured - predicted| / sd of the largest point's loss, from the two smallest."""
    base, observed = one
    mean, sd = posterior(prior, base, observed[:1]).beyond(
        observed[0], observed[-1][0], base, prior
    )
    return abs(observed[-1][1] - mean) / sd


def conformal_z(by_mode: dict[str, list[Sourced]]) -> float:
    """The split-conformal quantile of the standardised misses left out by source: each entry
    scored by the prior learned without its source; the ceil((n + 1) x COVERAGE)-th smallest
    of n."""
    scores = []
    for data in by_mode.values():
        for group in sorted({g for g, _ in data}):
            prior = learn([one for g, one in data if g != group])
            scores += [
                standardised_miss(prior, one) for g, one in data
                if g == group and len(one[1]) >= 2  # two points only: nothing to predict
            ]  # fmt: skip
    scores.sort()
    k = min(len(scores), math.ceil((len(scores) + 1) * COVERAGE))
    return scores[k - 1]


def by_mode(entries: Sequence[dict[str, Any]]) -> dict[str, list[Sourced]]:
    out: dict[str, list[Sourced]] = {}
    for entry in entries:
        desc, one = series(entry)
        out.setdefault(desc.mode.value, []).append((str(entry.get("source_group")), one))
    return dict(sorted(out.items()))


def module(path: Path) -> str:
    """runner/predict/prior.py's text, learned from the corpus at ``path``."""
    entries = learning_entries(path)
    data = by_mode(entries)
    priors = {mode: learn([one for _, one in sourced]) for mode, sourced in data.items()}
    lines = [
        f'    "{mode}": Prior({p.step_mean:.4g}, {p.step_sd:.4g}, {p.growth_mean:.4g}, '
        f"{p.growth_sd:.4g}, {p.noise_sd:.4g}),  # {len(data[mode])} entries"
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
    this mean and spread (losses: 1/E - 1), and the noise of one measured loss."""

    step_mean: float
    step_sd: float
    growth_mean: float
    growth_sd: float
    noise_sd: float


PRIORS = {{
{priors}
}}
# the range's half-width in standard deviations (split-conformal by source, 90%)
RANGE_Z = {z}
'''


if __name__ == "__main__":
    sys.stdout.write(module(Path(sys.argv[1])))
