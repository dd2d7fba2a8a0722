"""Model presets for the training workload, from a CPU-sized toy to a ~1B-parameter GPT. Pure.

The shapes follow GPT-2/GPT-3 (Brown et al. 2020, table 2.1: 125M, 350M, 760M, 1.3B) with a
context of 1024 tokens and GPT-2's vocabulary padded from 50,257 to 50,304 (a multiple of 64,
as nanoGPT does, so the embedding and LM head matrices tile evenly on GPUs). The parameter
counts are computed from the shapes by ``param_count``; a test checks the formula against the
real model.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dtrun.plan.registry import lookup
from dtrun.spec.request import ModelSpec

GPT2_VOCAB = 50_304  # 50,257 rounded up to a multiple of 64

PRESETS: dict[str, ModelSpec] = {
    spec.preset: spec
    for spec in (
        # The default: about 15 s for a 1- and 2-node sweep on a 2-core laptop.
        ModelSpec(layers=2, d_model=128, heads=4, seq_len=64, vocab=1024, preset="tiny"),
        # Still trains on CPU (a few steps a second on 2 cores at batch 8).
        ModelSpec(layers=4, d_model=256, heads=8, seq_len=256, vocab=8192, preset="mini"),
        ModelSpec(layers=12, d_model=768, heads=12, seq_len=1024, vocab=GPT2_VOCAB, preset="125m"),
        ModelSpec(layers=24, d_model=1024, heads=16, seq_len=1024, vocab=GPT2_VOCAB, preset="350m"),
        ModelSpec(layers=24, d_model=1536, heads=16, seq_len=1024, vocab=GPT2_VOCAB, preset="760m"),
        # GPT-3 XL's 24 x 2048 with 16 heads of 128 (the paper's 24 heads do not divide 2048).
        ModelSpec(layers=24, d_model=2048, heads=16, seq_len=1024, vocab=GPT2_VOCAB, preset="1.3b"),
    )
    if spec.preset is not None
}
DEFAULT_PRESET = "tiny"


def param_count(model: ModelSpec) -> int:
    """Parameters of runner/workloads/gpt.py's GPT with this shape (tied embedding counted once).

    Token and position embeddings V*D + T*D; per block 12*D^2 + 13*D (QKV 3D^2+3D, projection
    D^2+D, MLP 8D^2+5D, two LayerNorms 4D); the final LayerNorm 2D.
    """
    d = model.d_model
    return (model.vocab + model.seq_len) * d + model.layers * (12 * d * d + 13 * d) + 2 * d


def matmul_param_count(model: ModelSpec) -> int:
    """The N of MFU's 6N: every parameter but the position embedding (docs/facts.md §7)."""
    return param_count(model) - model.seq_len * model.d_model


def describe(name: str) -> str:
    """'125m (124.5M parameters)'."""
    count = param_count(PRESETS[name])
    size = f"{count / 1e9:.2f}B" if count >= 1e9 else f"{count / 1e6:.1f}M"
    return f"{name} ({size} parameters)"


def resolve_model(
    preset: str,
    *,
    layers: int | None = None,
    d_model: int | None = None,
    heads: int | None = None,
    seq_len: int | None = None,
    vocab: int | None = None,
) -> ModelSpec:
    """A preset's shape with the fields given on the command line replacing its own.

    A shape that no longer is the preset's is not recorded under the preset's name.
    """
    base = lookup("preset", preset, PRESETS)
    given: dict[str, Any] = {
        "layers": layers,
        "d_model": d_model,
        "heads": heads,
        "seq_len": seq_len,
        "vocab": vocab,
    }
    model = replace(base, **{key: value for key, value in given.items() if value is not None})
    return model if model == base else replace(model, preset=None)
