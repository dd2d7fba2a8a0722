"""runner/predict/prior.py is what runner/predict/learn.py learns from the fit set, and the
test set plays no part in it."""

from __future__ import annotations

from pathlib import Path

import yaml

from dtrun.predict.inputs import yaml_loader
from dtrun.predict.learn import fit_entries, module
from tests.paths import REPO

DATA = REPO / "docs" / "prediction-data.yaml"


def test_the_prior_module_is_the_one_learned_from_the_fit_set():
    assert (REPO / "runner" / "predict" / "prior.py").read_text() == module(DATA)


def test_the_prior_is_learned_from_fit_entries_only(tmp_path: Path):
    entries = yaml.load(DATA.read_text(), Loader=yaml_loader())
    fit = fit_entries(DATA)
    assert fit and all(e["split"] == "fit" for e in fit)
    assert {e["id"] for e in entries if e["split"] == "test"}.isdisjoint(e["id"] for e in fit)
    # a test entry changed beyond recognition leaves what the prior is learned from as it
    # was (module() reads the corpus through fit_entries() alone)
    changed = [
        e | {"points": [{"nodes": 1, "throughput": 1.0}, {"nodes": 2, "throughput": 0.1},
                        {"nodes": 4, "throughput": 0.01}]} if e["split"] == "test" else e
        for e in entries
    ]  # fmt: skip
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(changed))
    assert fit_entries(tmp_path / "c.yaml") == fit
    assert len(fit) < len(entries)


def test_a_parameter_server_entry_is_left_out_of_the_prior():
    ids = {e["id"] for e in fit_entries(DATA)}
    assert ids and not any("-ps-" in i for i in ids)
