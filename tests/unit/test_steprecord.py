"""The step hook's parameter digest (runner/workloads/stephook/_dtrun_steprecord.py): SHA-256
of each parameter's shape, dtype and elements, read in place."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import torch

FILE = Path(__file__).resolve().parents[2] / "runner/workloads/stephook/_dtrun_steprecord.py"
_spec = importlib.util.spec_from_file_location("_dtrun_steprecord", FILE)
assert _spec is not None and _spec.loader is not None
steprecord = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(steprecord)


def by_definition(params: list[torch.Tensor]) -> str:
    """The digest spelled out: shape and dtype, then the elements' bytes in row-major order,
    one element at a time through Python (slow: small tensors only)."""
    digest = hashlib.sha256()
    for p in params:
        digest.update(str(tuple(p.shape)).encode() + str(p.dtype).encode())
        flat = p.detach().reshape(-1)
        for i in range(flat.numel()):
            digest.update(bytes(flat[i : i + 1].clone().untyped_storage()))
    return digest.hexdigest()


def test_the_digest_hashes_each_parameters_shape_dtype_and_elements_in_order():
    torch.manual_seed(0)
    params = [
        torch.randn(6, 4),
        torch.randn(5).to(torch.bfloat16),
        torch.arange(7, dtype=torch.int64),
        torch.empty(0),  # ZeRO 3 leaves an empty tensor
    ]
    assert steprecord._digest(params) == by_definition(params)


def test_a_view_is_digested_as_its_own_elements_not_its_storage():
    base = torch.randn(8, 6)
    transposed, sliced = base.t(), base.reshape(-1)[5:17]  # strided; an offset into storage
    assert not transposed.is_contiguous() and sliced.storage_offset() == 5
    assert steprecord._digest([transposed]) == steprecord._digest([transposed.contiguous()])
    assert steprecord._digest([transposed]) == by_definition([transposed])
    assert steprecord._digest([sliced]) == by_definition([sliced])


def test_one_changed_element_changes_the_digest():
    params = [torch.zeros(1000)]
    before = steprecord._digest(params)
    params[0][999] = 1e-30
    assert steprecord._digest(params) != before
