"""The pipeline strategy's proof, from what every rank recorded. Pure Python on gathered data.

Ranks of a pipeline hold different stages, so their parameters cannot be compared. Instead, on
a probe step after training, every stage fingerprints each activation it received and sent and
each gradient it received and sent back; a rank that did not communicate cannot produce, bit for
bit, what another rank computed from other weights. On top of that, the tied embedding's two
copies (the token embedding on the first stage, the LM head on the last) must agree, and so
must a stage's data-parallel replicas, all of which started from different weights.

The standard library and sibling modules only (the checks are unit-tested without torch
processes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dtrun.workloads.proof import SYNC_TOLERANCE, Check, Proof, divergence

# What a stage records on the probe step (Tap in pipeline_parallel), one fingerprint per
# micro-batch: activations and gradients in the order they passed.
ACTIVATIONS_RECEIVED = "activations_received"
ACTIVATIONS_SENT = "activations_sent"
GRADIENTS_RECEIVED = "gradients_received"
GRADIENTS_SENT = "gradients_sent"


@dataclass(frozen=True)
class Layout:
    """Which rank holds what: ``pp`` ranks per pipeline, ``replicas`` pipelines side by side.

    Ranks are numbered pipeline by pipeline; stage s of a pipeline lives on its rank s % pp
    (torch.distributed.pipelining's placement for looped schedules: rank r holds stages r,
    r + pp, r + 2pp, ...).
    """

    pp: int
    replicas: int
    stages_per_rank: int
    micro_batches: int

    @property
    def stages(self) -> int:
        return self.pp * self.stages_per_rank

    def rank_of(self, replica: int, stage: int) -> int:
        return replica * self.pp + stage % self.pp

    def local_stages(self, rank: int) -> list[int]:
        return [rank % self.pp + k * self.pp for k in range(self.stages_per_rank)]


def pipeline_proof(layout: Layout, records: list[dict[str, Any]]) -> Proof:
    """``records``: by rank, {"replica", "stages": {stage: {...taps, "initial", "final"}},
    "initial", "final"} as PipelineEngine.prove gathers them."""
    by_stage = {(r["replica"], s): rec for r in records for s, rec in r["stages"].items()}
    checks: list[Check] = []
    if layout.stages > 1:
        checks += _transfers(layout, by_stage)
        checks.append(_tied(layout, by_stage))
    checks.append(_loss(layout, by_stage))
    in_sync = [check for check in checks if check.name == "tied embedding"]
    initial_differed: bool | None = None
    initial_off: float | None = None
    if layout.replicas > 1:
        replicas, initial_differed, initial_off = _replicas(layout, by_stage)
        checks.append(replicas)
        in_sync.append(replicas)
    offs = [float(check.detail.split("within ")[1].split(" ")[0]) for check in in_sync]
    return Proof(
        kind="pipeline",
        checks=tuple(checks),
        params_in_sync=all(check.ok for check in in_sync),
        max_divergence=max(offs, default=0.0),
        initial_params_differed=initial_differed,
        initial_divergence=initial_off,
        initial_fingerprints=[r["initial"] for r in records],
        final_fingerprints=[r["final"] for r in records],
    )


def _transfers(layout: Layout, by_stage: dict[tuple[int, int], dict[str, Any]]) -> list[Check]:
    """Every boundary, both directions: what one side sent is what the other side received."""
    expected = layout.micro_batches
    bad_forward: list[str] = []
    bad_backward: list[str] = []
    crossings = 0
    for replica in range(layout.replicas):
        for stage in range(layout.stages - 1):
            sender, receiver = by_stage[(replica, stage)], by_stage[(replica, stage + 1)]
            where = f"stage {stage} -> {stage + 1} of pipeline {replica}"
            if not _same(sender[ACTIVATIONS_SENT], receiver[ACTIVATIONS_RECEIVED], expected):
                bad_forward.append(where)
            if not _same(receiver[GRADIENTS_SENT], sender[GRADIENTS_RECEIVED], expected):
                bad_backward.append(where)
            crossings += layout.rank_of(replica, stage) != layout.rank_of(replica, stage + 1)
    boundaries = layout.replicas * (layout.stages - 1)
    across = f"{boundaries} stage boundaries ({crossings} between ranks)"
    return [
        Check(
            "activations",
            not bad_forward,
            f"every one of {expected} micro-batches' activations crossed {across} bit for bit"
            if not bad_forward
            else f"activations differ or are missing at {', '.join(bad_forward)}",
        ),
        Check(
            "gradients",
            not bad_backward,
            f"every one of {expected} micro-batches' gradients came back across {across} "
            "bit for bit, down to the first stage"
            if not bad_backward
            else f"gradients differ or are missing at {', '.join(bad_backward)}",
        ),
    ]


def _loss(layout: Layout, by_stage: dict[tuple[int, int], dict[str, Any]]) -> Check:
    """The loss is computed on the last stage only, once per micro-batch: what it was computed
    from came through every stage before it."""
    last = layout.stages - 1
    wrong = [
        f"stage {stage} of pipeline {replica} computed {record['losses']}"
        for (replica, stage), record in sorted(by_stage.items())
        if record["losses"] != (layout.micro_batches if stage == last else 0)
    ]
    return Check(
        "loss",
        not wrong,
        f"only the last stage of each of the {layout.replicas} pipeline"
        f"{'' if layout.replicas == 1 else 's'} computed the loss, "
        f"{layout.micro_batches} micro-batches"
        if not wrong
        else f"losses in the wrong place: {', '.join(wrong)}",
    )


def _same(sent: list[float], received: list[float], expected: int) -> bool:
    # As multisets: the schedules pass micro-batches in order, but nothing here depends on it.
    return len(sent) == len(received) == expected and sorted(sent) == sorted(received)


def _tied(layout: Layout, by_stage: dict[tuple[int, int], dict[str, Any]]) -> Check:
    """The token embedding (first stage) and the LM head (last stage) are one weight, tied."""
    last = layout.stages - 1
    off = max(
        divergence([by_stage[(r, 0)]["tied"], by_stage[(r, last)]["tied"]])
        for r in range(layout.replicas)
    )
    holders = "on one rank" if layout.pp == 1 else "on the first and last ranks of each pipeline"
    return Check(
        "tied embedding",
        off <= SYNC_TOLERANCE,
        f"the embedding's copies {holders} agree within {off:.2g} (tolerance {SYNC_TOLERANCE:g})",
    )


def _replicas(
    layout: Layout, by_stage: dict[tuple[int, int], dict[str, Any]]
) -> tuple[Check, bool, float]:
    """Each stage's copies in the data-parallel replicas: different at first, equal at the end."""
    final_off = initial_off = 0.0
    differed = True
    for stage in range(layout.stages):
        copies = [by_stage[(r, stage)] for r in range(layout.replicas)]
        final_off = max(final_off, divergence([c["final"] for c in copies]))
        initial = [c["initial"] for c in copies]
        initial_off = max(initial_off, divergence(initial))
        differed = differed and len(set(initial)) == layout.replicas
    check = Check(
        "replicas",
        final_off <= SYNC_TOLERANCE,
        f"every stage's {layout.replicas} replicas agree within {final_off:.2g} "
        f"(tolerance {SYNC_TOLERANCE:g}); each started from its own weights",
    )
    return check, differed, initial_off
