"""The GPT-style decoder every training workload trains, and the numbers derived from it.

Torch and the standard library only: this file is staged onto the nodes.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then a 4x GELU MLP."""

    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=2)
        shape = (batch, seq, self.heads, width // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(batch, seq, width))
        out: torch.Tensor = x + self.out(F.gelu(self.fc(self.ln2(x))))
        return out


def init_weights(module: nn.Module) -> None:
    """GPT-2's initialisation: small normal weights, zero biases, so the loss starts at ln(V)."""
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


class GPT(nn.Module):
    def __init__(self, vocab: int, seq_len: int, layers: int, d_model: int, heads: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as in GPT-2
        self.apply(init_weights)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        logits: torch.Tensor = self.head(self.ln_f(x))
        return logits


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Next-token cross entropy, computed in float32 whatever the activations' dtype."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def param_counts(vocab: int, seq_len: int, layers: int, d_model: int) -> tuple[int, int]:
    """(parameters, matmul parameters) of a GPT of this shape, the tied embedding counted once.

    Computed from the shape, so that every strategy reports the whole model's counts whatever
    part of it a rank holds. Matmul parameters are all but the position embedding (the N of
    ``flops_per_token``). runner/plan/presets.py has the same formula; a test checks both against
    the real model.
    """
    d = d_model
    params = (vocab + seq_len) * d + layers * (12 * d * d + 13 * d) + 2 * d
    return params, params - seq_len * d


def flops_per_token(params: int, layers: int, heads: int, head_dim: int, seq_len: int) -> int:
    """Training FLOPs per token, 6N + 12*L*H*Q*T (PaLM appendix B; docs/facts.md §7).

    N counts the parameters that take part in matrix multiplies: everything but the position
    embedding (the tied token embedding is counted once, for the LM head).
    """
    return 6 * params + 12 * layers * heads * head_dim * seq_len


def fingerprint(model: nn.Module) -> float:
    """A position-weighted sum of every parameter: equal only when the parameters are."""
    return fingerprint_tensors(model.parameters())


def fingerprint_tensors(tensors: Iterable[torch.Tensor]) -> float:
    """A position-weighted sum of the tensors' elements: sum of x_i * (1 + i / (n - 1)).

    Computed in float64 where the tensors are, a chunk at a time (a whole GPT in float64 on the
    CPU would take 21 GB at 1.3B parameters), so the same bits give the same number on every
    rank. Linear: the fingerprint of an average of gradients is the average of their
    fingerprints, which the gradient check relies on.
    """
    flats = [t.detach().reshape(-1) for t in tensors]
    scale = 1.0 / max(1, sum(flat.numel() for flat in flats) - 1)
    total, offset = 0.0, 0
    with torch.no_grad():
        for flat in flats:
            for start in range(0, flat.numel(), _CHUNK):
                part = flat[start : start + _CHUNK].double()
                first = offset + start
                index = torch.arange(
                    first, first + part.numel(), dtype=torch.float64, device=part.device
                )
                total += float((part * (1.0 + index * scale)).sum())
            offset += flat.numel()
    return total


_CHUNK = 1 << 24  # elements: 128 MiB of float64 at a time
