"""Pipeline parallelism with torch.distributed.pipelining: the GPT's blocks split into stages.

``--stage-split`` picks how many blocks each stage holds (runner/workloads/stagecost.py): as
even as the layers allow, or balanced by training FLOPs with the embedding and the head counted.
Ranks are numbered pipeline by pipeline: ``--pp-size`` ranks per pipeline, ``world / pp`` data-
parallel pipelines side by side. Stage s of a pipeline lives on its rank s % pp (for
interleaved-1f1b each rank holds ``--stages-per-rank`` stages: r, r + pp, ...). The stages are
pipeline_stage's; the tied embedding is two copies, on the first and last stage, kept equal as
Megatron-LM keeps them: their gradients are summed over the first and last rank of each
pipeline before every optimizer step. Between pipelines, each stage's gradients are averaged,
and every stage starts from replica 0's weights (broadcast, as DDP does).

Every stage is built from its own seed (the run's seed, the pipeline and the part), so the
pipelines start from different weights on purpose (the proof shows they end up equal), and a
block is built from the same seed whichever stage holds it: both splits train one model.

Shapes are given to ``PipelineStage`` ahead (``input_args``/``output_args`` on the meta device),
so no shape-inference pass runs before the first step.

Torch, the standard library and sibling modules only.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import (
    PipelineStage,
    Schedule1F1B,
    ScheduleGPipe,
    ScheduleInterleaved1F1B,
)

from dtrun.workloads.engine import LEARNING_RATE, precision
from dtrun.workloads.gpt import fingerprint_tensors, lm_loss
from dtrun.workloads.pipeline_proof import Layout, pipeline_proof
from dtrun.workloads.pipeline_stage import GPTStage, Record
from dtrun.workloads.pipeline_timing import StageInput, gather_stage_times, profile, time_stage
from dtrun.workloads.proof import Proof, single_process
from dtrun.workloads.stagecost import SCHEDULE_NAMES, Pieces, Shape, shares, split, stage_costs

# --schedule -> the schedule class; "looped" ones take every local stage, the others one.
SCHEDULES: dict[str, Callable[..., Any]] = dict(
    zip(SCHEDULE_NAMES, (ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B), strict=True)
)
LOOPED = {"interleaved-1f1b"}
BUCKET = 1 << 24  # elements per gradient all-reduce between pipelines (64 MiB of float32)


class PipelineEngine:
    name = "pipeline"
    strategy = "pipeline"
    zero_stage: int | None = None

    def __init__(self, args: argparse.Namespace, device: torch.device) -> None:
        self.args, self.device = args, device
        world, rank = dist.get_world_size(), dist.get_rank()
        pp = args.pp_size or world
        stages_per_rank = args.stages_per_rank if args.schedule in LOOPED else 1
        self.layout = Layout(pp, world // pp, stages_per_rank, args.micro_batches)
        self.replicas = self.layout.replicas
        self.data_rank = self.replica = rank // pp
        self.precision = precision(args, device)
        self.pipeline_group, self.dp_group, self.tied_group = self._groups(rank)

        count = self.layout.stages
        self.indices = self.layout.local_stages(rank)
        self.shape = Shape(args.layers, args.d_model, args.seq_len, args.vocab)
        self.pieces: Pieces | None = None  # what balanced weighed: seconds measured here
        if args.stage_split == "balanced":
            self.pieces = profile(self._stage_input(), args.heads, self.precision, device)
        self.blocks = split(args.stage_split, self.shape, count, self.pieces)
        starts = [sum(self.blocks[:i]) for i in range(count + 1)]
        self.stage_times: list[float] | None = None  # probe_stages's, by stage
        seed = (args.seed + self.replica) * 1_000_003  # apart from every other part's seed
        self.modules = [
            GPTStage(args, i, count, range(starts[i], starts[i + 1]), seed, device, self.precision)
            for i in self.indices
        ]
        self.initial = {i: _fingerprint(m) for i, m in zip(self.indices, self.modules, strict=True)}
        if self.dp_group is not None:  # every pipeline starts from pipeline 0's weights
            source = rank % pp
            with torch.no_grad():
                for module in self.modules:
                    for p in module.parameters():
                        dist.broadcast(p, src=source, group=self.dp_group)

        micro = args.batch // args.micro_batches
        stages = [
            PipelineStage(
                module,
                index,
                count,
                device,
                input_args=self._meta_input(index, micro),
                output_args=self._meta_output(index, count, micro),
                group=self.pipeline_group,
            )
            for index, module in zip(self.indices, self.modules, strict=True)
        ]
        schedule = SCHEDULES[args.schedule]
        self.schedule = schedule(
            stages if args.schedule in LOOPED else stages[0], args.micro_batches, loss_fn=lm_loss
        )
        self.optimizer = torch.optim.AdamW(
            [p for m in self.modules for p in m.parameters()], lr=LEARNING_RATE
        )

    def _groups(
        self, rank: int
    ) -> tuple[dist.ProcessGroup | None, dist.ProcessGroup | None, dist.ProcessGroup | None]:
        """This rank's pipeline, its stage's pipelines side by side, and the tied embedding's
        two holders. Every rank creates every group, in the same order (new_group's rule)."""
        pp, replicas = self.layout.pp, self.layout.replicas
        mine: list[dist.ProcessGroup | None] = [None, None, None]
        if replicas > 1:
            for r in range(replicas):
                group = dist.new_group(list(range(r * pp, (r + 1) * pp)))
                if rank // pp == r:
                    mine[0] = group
            for s in range(pp):
                group = dist.new_group([r * pp + s for r in range(replicas)])
                if rank % pp == s:
                    mine[1] = group
        if pp > 1:
            for r in range(replicas):
                holders = [r * pp, r * pp + pp - 1]
                group = dist.new_group(holders)
                if rank in holders:
                    mine[2] = group
        return mine[0], mine[1], mine[2]

    def _meta_input(self, index: int, micro: int) -> torch.Tensor:
        args = self.args
        if index == 0:
            return torch.empty(micro, args.seq_len, dtype=torch.long, device="meta")
        # Activations stay float32 under bf16 autocast: the residual stream adds to float32.
        return torch.empty(micro, args.seq_len, args.d_model, device="meta", requires_grad=True)

    def _meta_output(self, index: int, count: int, micro: int) -> torch.Tensor:
        args = self.args
        if index == count - 1:
            dtype = torch.bfloat16 if args.dtype == "bfloat16" else torch.float32
            return torch.empty(micro, args.seq_len, args.vocab, dtype=dtype, device="meta")
        return torch.empty(micro, args.seq_len, args.d_model, device="meta", requires_grad=True)

    def _run(self, batch: torch.Tensor) -> list[torch.Tensor]:
        """One schedule step, forward and backward: the first stage reads the inputs, the
        last the targets; returns the last stage's losses, one per micro-batch."""
        losses: list[torch.Tensor] = []
        kwargs: dict[str, Any] = {}
        if self.layout.stages - 1 in self.indices:
            kwargs = {"target": batch[:, 1:], "losses": losses}
        if 0 in self.indices:
            self.schedule.step(batch[:, :-1], **kwargs)
        else:
            self.schedule.step(**kwargs)
        return losses

    def step(self, batch: torch.Tensor) -> torch.Tensor | None:
        self.optimizer.zero_grad(set_to_none=True)
        losses = self._run(batch)
        self._reduce_gradients()
        self.optimizer.step()
        return torch.stack(losses).mean().detach() if losses else None

    def _reduce_gradients(self) -> None:
        grads = [p.grad for m in self.modules for p in m.parameters() if p.grad is not None]
        if self.dp_group is not None:  # the mean over the pipelines, bucket by bucket
            for bucket in _buckets(grads):
                flat = torch.cat([g.reshape(-1) for g in bucket])
                dist.all_reduce(flat, group=self.dp_group)
                flat /= self.layout.replicas
                offset = 0
                for g in bucket:
                    g.copy_(flat[offset : offset + g.numel()].view_as(g))
                    offset += g.numel()
        tied: list[torch.Tensor] = []
        for module in self.modules:
            weight = module.tied_weight()
            if weight is not None:
                if weight.grad is None:
                    raise RuntimeError("the tied embedding received no gradient")
                tied.append(weight.grad)
        if self.tied_group is not None:  # the first and last stage: one weight, both parts
            dist.all_reduce(tied[0], group=self.tied_group)
        elif len(tied) == 2:  # both on this rank (one rank per pipeline)
            total = tied[0] + tied[1]
            for grad in tied:
                grad.copy_(total)

    def prove(self, probe: torch.Tensor) -> Proof:
        """A probe step (no optimizer step) with every stage recording what crossed it."""
        for module in self.modules:
            module.record = Record()
        losses = self._run(probe)
        self.optimizer.zero_grad(set_to_none=True)
        stages: dict[int, dict[str, Any]] = {}
        for index, module in zip(self.indices, self.modules, strict=True):
            assert module.record is not None
            tied = module.tied_weight()
            stages[index] = {
                **module.record.taps,
                "tied": None if tied is None else fingerprint_tensors([tied]),
                "initial": self.initial[index],
                "final": _fingerprint(module),
                "losses": len(losses) if module.last else 0,
            }
            module.record = None
        mine = {
            "replica": self.replica,
            "stages": stages,
            "initial": sum(s["initial"] for s in stages.values()),
            "final": sum(s["final"] for s in stages.values()),
        }
        records: list[dict[str, Any] | None] = [None] * dist.get_world_size()
        dist.all_gather_object(records, mine)
        every = [r for r in records if r is not None]
        if len(every) == 1:
            return single_process([every[0]["final"]])
        return pipeline_proof(self.layout, every)

    def _stage_input(self) -> StageInput:
        args = self.args
        micro = args.batch // args.micro_batches
        return StageInput(micro, args.micro_batches, args.seq_len, args.d_model, args.vocab)

    def probe_stages(self, steps: int) -> None:
        """Time each stage's forward and backward alone on its rank (pipeline_timing)."""
        if steps <= 0:
            return
        shape = self._stage_input()
        # One position of the pipelines at a time: a stage that finished early would otherwise
        # leave the cores it shared (the embedded cluster's) to the others, and flatter them.
        mine: dict[int, float] = {}
        for turn in range(self.layout.pp):
            if dist.get_rank() % self.layout.pp == turn:
                for index, module in zip(self.indices, self.modules, strict=True):
                    mine[index] = time_stage(
                        module, module.first, module.last, shape, self.device, steps
                    )
            dist.barrier()
        self.stage_times = gather_stage_times(mine, self.layout.stages)

    def describe(self) -> dict[str, Any]:
        cost_share, param_share = shares(stage_costs(self.shape, self.blocks))
        return {
            "schedule": self.args.schedule,
            "micro_batches": self.layout.micro_batches,
            "stages": self.layout.stages,
            "stages_per_rank": self.layout.stages_per_rank,
            "pp_size": self.layout.pp,
            "stage_split": self.args.stage_split,
            "stage_blocks": self.blocks,
            "stage_cost_share": [round(share, 6) for share in cost_share],
            "stage_param_share": [round(share, 6) for share in param_share],
            # balanced only: a micro-batch's forward and backward through each piece, seconds
            "stage_pieces_s": None if self.pieces is None else asdict(self.pieces),
            "stage_time_s": None
            if self.stage_times is None
            else [round(seconds, 7) for seconds in self.stage_times],
        }

    def compute_alone(self, batch: torch.Tensor) -> str | None:
        return "a pipeline's stages wait for each other's activations and gradients"


def _fingerprint(module: nn.Module) -> float:
    return fingerprint_tensors(module.parameters())


def _buckets(grads: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    buckets: list[list[torch.Tensor]] = [[]]
    size = 0
    for g in grads:
        if buckets[-1] and size + g.numel() > BUCKET:
            buckets.append([])
            size = 0
        buckets[-1].append(g)
        size += g.numel()
    return [b for b in buckets if b]
