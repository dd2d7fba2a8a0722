"""runner/predict/prior.py is what runner/predict/learn.py learns from the fit and test sets
(issue 38: the test set was scored once, then declared seen), and the second held-out set
(`holdout2`) plays no part in it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dtrun.predict import learn
from dtrun.predict.files import yaml_loader
from dtrun.predict.learn import Series, conformal_z, learning_entries, module
from dtrun.predict.prior import Prior
from tests.paths import REPO

DATA = REPO / "docs" / "prediction-data.yaml"


def test_the_prior_module_is_the_one_learned_from_the_fit_and_test_sets():
    assert (REPO / "runner" / "predict" / "prior.py").read_text() == module(DATA)


def test_the_prior_is_learned_from_fit_and_test_never_from_the_held_out_sets(tmp_path: Path):
    entries = yaml.load(DATA.read_text(), Loader=yaml_loader())
    used = learning_entries(DATA)
    assert {e["split"] for e in used} == {"fit", "test"}
    held_out = {e["id"] for e in entries if e["split"] in ("holdout2", "holdout3")}
    assert held_out and held_out.isdisjoint(e["id"] for e in used)
    # a held-out entry changed beyond recognition leaves what the prior is learned from as it
    # was (module() reads the corpus through learning_entries() alone)
    changed = [
        e | {"points": [{"nodes": 1, "throughput": 1.0}, {"nodes": 2, "throughput": 0.1},
                        {"nodes": 4, "throughput": 0.01}]}
        if e["split"] in ("holdout2", "holdout3") else e
        for e in entries
    ]  # fmt: skip
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(changed, allow_unicode=True))
    assert learning_entries(tmp_path / "c.yaml") == used
    assert len(used) < len(entries)


def test_a_parameter_server_entry_is_left_out_of_the_prior():
    ids = {e["id"] for e in learning_entries(DATA)}
    assert ids and not any("-ps-" in i for i in ids)


def test_the_range_is_calibrated_with_each_source_left_out_whole(
    monkeypatch: pytest.MonkeyPatch,
):
    # one source's results share a cluster and its errors: an entry is scored by a prior
    # learned without any entry of its source, not merely without itself
    a1: Series = (1, [(2, 0.10), (4, 0.15)])
    a2: Series = (1, [(2, 0.11), (4, 0.17)])
    b1: Series = (1, [(2, 0.02), (8, 0.05)])
    learned_from: list[list[Series]] = []
    real = learn.learn

    def recording(data: list[Series]) -> Prior:
        learned_from.append(list(data))
        return real(data)

    monkeypatch.setattr(learn, "learn", recording)
    conformal_z({"weak": [("a", a1, (0.0, 0.0)), ("a", a2, (0.0, 0.0)), ("b", b1, (0.0, 0.0))]})
    assert learned_from == [[b1], [a1, a2]]  # without a's both, then without b


def test_the_cross_validation_scores_every_entry_with_its_source_left_out(tmp_path: Path):
    # docs/prediction.md's cross-validation row, on a corpus small enough to check by hand:
    # three results of two sources, each predicted by the prior learned from the other source
    def entry(ident: str, group: str, effs: tuple[float, float, float]) -> dict[str, object]:
        pairs = zip((1, 2, 8), effs, strict=True)
        points = [{"nodes": n, "throughput": 100.0 * n * e} for n, e in pairs]
        return {"id": ident, "source_group": group, "split": "fit", "procs_per_node": 8,
                "mode": "weak", "strategy": "ddp", "parameters": 1e8,
                "gradient_bytes_per_parameter": 4, "points": points}  # fmt: skip

    corpus = [entry("a1", "a", (1, 0.9, 0.8)), entry("a2", "a", (1, 0.92, 0.85)),
              entry("b1", "b", (1, 0.98, 0.95)), entry("h", "h", (1, 0.5, 0.1)) | {
                  "split": "holdout2"}]  # fmt: skip
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(corpus))
    said = learn.cross_validation(tmp_path / "c.yaml")
    assert said.startswith("3 results, each source left out: within 5 points ")
    assert "inside the range" in said and "median width" in said
