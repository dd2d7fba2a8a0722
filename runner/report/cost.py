"""What each scaling point cost, and what the sweep paid for beyond its launches
(docs/report.md "Cost"). Pure arithmetic on the recorded files: manifest.json's price,
runs.json's launches and sweep wall time, and the scaling rows.

  node-hours of a point   = its nodes x the sum of its launches' wall times (each launch from
                            the moment dtrun starts it, readiness wait included, to the moment
                            its last node ended), in hours; every launch counts, failed or not
  cost of a point         = node-hours x price per node-hour
  cost per 1M tokens      = nodes x price / (tokens/s x 3600) x 10^6, at the point's measured
                            throughput (the steady state: start-up is in the point's cost, not
                            here); per step = nodes x price x median step time / 3600
  cost per token vs N0    = C(N) / C(N0) = N·X(N0) / (N0·X(N)) = 1 / E(N)
  cost-efficiency         = C(N0) / C(N) = E(N): scaling efficiency is cost-efficiency
  paid                    = the cluster's nodes x the sweep's wall time (run directory made to
                            the last launch recorded), in node-hours; a resumed sweep adds each
                            run of dtrun's nodes x its wall time
  idle during the sweep   = paid - the points' node-hours (nodes waiting while smaller points
                            ran, the health gate, readiness waits, dtrun's own work)
  before the sweep        = each run of dtrun's nodes x the time from the later of the nodes'
                            creation and the end of the last sweep on them to its start
                            (manifest.json's paid_before: runner/record/paid.py)
  billed in all           = paid + before the sweep, only when every part of both is known
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from dtrun.record.paid import CREATED
from dtrun.record.runsfile import segment_walls
from dtrun.report.metrics import ScalingRow

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True)
class PointCost:
    nodes: int
    launches: int  # every launch of the point, failed ones too: they were paid for
    launch_s: float  # the sum of their wall times
    node_hours: float
    cost_usd: float | None  # None: no price
    usd_per_million_tokens: float | None  # training points with a throughput and a price
    usd_per_step: float | None
    cost_per_token_vs_base: float | None  # C(N) / C(N0) = 1 / E(N)
    cost_efficiency: float | None  # C(N0) / C(N) = E(N)
    efficiency: float | None  # the scaling row's, beside it


@dataclass(frozen=True)
class Before:
    """What the nodes had billed before one run of dtrun on the sweep began (the first, or a
    --resume), as manifest.json's paid_before recorded it."""

    run: int  # which run of dtrun on the sweep: 1 the first, 2 the first --resume, ...
    nodes: int
    since: str  # ISO 8601 UTC
    reason: str  # "the nodes were created", or the end of the last sweep on them
    from_creation: bool  # from the nodes' creation: their boot and set-up are in it
    seconds: float
    node_hours: float
    cost_usd: float | None


@dataclass(frozen=True)
class SweepCost:
    usd_per_node_hour: float | None
    price_source: str | None
    points: tuple[PointCost, ...]
    launch_node_hours: float
    launch_cost_usd: float | None
    cluster_nodes: int
    sweep_wall_s: float | None  # None: recorded before dtrun kept it
    launch_s: float  # every launch's wall time, added up
    paid_node_hours: float | None
    idle_node_hours: float | None
    total_cost_usd: float | None  # what the cluster billed during the sweep
    idle_cost_usd: float | None
    embedded: bool
    # each run of dtrun on the sweep (the first, then each --resume): its nodes, its wall time
    segment_nodes: tuple[int, ...] = ()
    segment_wall_s: tuple[float, ...] = ()  # () when runs.json does not hold each one
    # the time paid before each run of dtrun began, where its cluster said when its nodes were
    # created; before_known: every run's did
    before: tuple[Before, ...] = ()
    before_known: bool = False
    before_node_hours: float | None = None
    before_cost_usd: float | None = None
    billed_node_hours: float | None = None  # paid + before; None unless both are known
    billed_cost_usd: float | None = None

    def summary(self) -> dict[str, Any]:
        """summary.json's "cost" object."""
        return asdict(self)


def _times(price: float | None, value: float | None) -> float | None:
    return None if price is None or value is None else price * value


def point_costs(
    runs: Sequence[Mapping[str, Any]], rows: Sequence[ScalingRow], price: float | None
) -> tuple[PointCost, ...]:
    """One PointCost per node count that ran a launch, in node-count order."""
    walls: dict[int, list[float]] = {}
    for run in runs:
        walls.setdefault(int(run["nodes"]), []).append(float(run["wall_s"]))
    by_nodes = {row.nodes: row for row in rows}
    base = rows[0] if rows else None
    points = []
    for nodes, times in sorted(walls.items()):
        node_hours = nodes * sum(times) / SECONDS_PER_HOUR
        row = by_nodes.get(nodes)
        per_token = per_step = relative = None
        if row is not None and base is not None:
            relative = (nodes * base.tokens_per_s) / (base.nodes * row.tokens_per_s)
            if price is not None:
                per_token = nodes * price / (row.tokens_per_s * SECONDS_PER_HOUR) * 1e6
                per_step = nodes * price * row.step_time_p50 / SECONDS_PER_HOUR
        points.append(
            PointCost(
                nodes=nodes,
                launches=len(times),
                launch_s=sum(times),
                node_hours=node_hours,
                cost_usd=_times(price, node_hours),
                usd_per_million_tokens=per_token,
                usd_per_step=per_step,
                cost_per_token_vs_base=relative,
                cost_efficiency=None if relative is None else 1 / relative,
                efficiency=None if row is None else row.efficiency,
            )
        )
    return tuple(points)


def _before(run: int, recorded: Mapping[str, Any], price: float | None) -> Before:
    node_hours = int(recorded["nodes"]) * float(recorded["seconds"]) / SECONDS_PER_HOUR
    return Before(
        run=run,
        nodes=int(recorded["nodes"]),
        since=str(recorded["from"]),
        reason=str(recorded["since"]),
        from_creation=recorded["since"] == CREATED,
        seconds=float(recorded["seconds"]),
        node_hours=node_hours,
        cost_usd=_times(price, node_hours),
    )


def sweep_cost(
    manifest: Mapping[str, Any], runs_data: Mapping[str, Any], rows: Sequence[ScalingRow]
) -> SweepCost:
    """The Cost section of a run directory's report, from its recorded files."""
    priced = manifest.get("price")
    price = float(priced["usd_per_node_hour"]) if priced else None
    # a launch a --resume ran again was paid for all the same
    runs = [*runs_data["runs"], *runs_data.get("replaced", [])]
    points = point_costs(runs, rows, price)
    launch_node_hours = sum(point.node_hours for point in points)
    cluster_nodes = len(manifest["inventory"]["nodes"])
    wall = runs_data.get("wall_s")
    segments = [manifest, *manifest.get("resumed", [])]  # each holds its inventory
    nodes = tuple(len(segment["inventory"]["nodes"]) for segment in segments)
    # each run of dtrun's wall time; () unless runs.json holds every one
    known = segment_walls(runs_data, len(segments))
    walls = () if None in known else tuple(float(w) for w in known if w is not None)
    paid: float | None
    if walls:
        paid = sum(n * w for n, w in zip(nodes, walls, strict=True)) / SECONDS_PER_HOUR
    elif len(segments) == 1 and wall is not None:  # recorded before dtrun kept each run's
        paid = cluster_nodes * float(wall) / SECONDS_PER_HOUR
    else:  # a run of dtrun whose wall time is not recorded: what was paid is not known
        paid = None
    # a sweep's launches never outlast it; rounding is all that could make this negative
    idle = None if paid is None else max(0.0, paid - launch_node_hours)
    before = tuple(
        _before(run, recorded, price)
        for run, recorded in enumerate((segment.get("paid_before") for segment in segments), 1)
        if recorded is not None
    )
    before_known = len(before) == len(segments)
    before_hours = sum(b.node_hours for b in before) if before else None
    # in all only when every part is known: never a total that leaves a part out unsaid
    billed = None
    if paid is not None and before_hours is not None and before_known:
        billed = paid + before_hours
    return SweepCost(
        usd_per_node_hour=price,
        price_source=str(priced["source"]) if priced else None,
        points=points,
        launch_node_hours=launch_node_hours,
        launch_cost_usd=_times(price, launch_node_hours),
        cluster_nodes=cluster_nodes,
        sweep_wall_s=None if wall is None else float(wall),
        launch_s=sum(float(run["wall_s"]) for run in runs),
        paid_node_hours=paid,
        idle_node_hours=idle,
        total_cost_usd=_times(price, paid),
        idle_cost_usd=_times(price, idle),
        embedded=manifest["inventory"]["source"] == "embedded",
        segment_nodes=nodes,
        segment_wall_s=walls,
        before=before,
        before_known=before_known,
        before_node_hours=before_hours,
        before_cost_usd=_times(price, before_hours),
        billed_node_hours=billed,
        billed_cost_usd=_times(price, billed),
    )
