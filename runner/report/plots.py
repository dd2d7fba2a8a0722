"""The report's plots, drawn with matplotlib's object-oriented API on the Agg canvas (no pyplot
state, no GUI backend). Each returns its PNG's bytes, for the report to write into the run
directory (atomically, with the rest); the same rows give the same bytes, so a rebuilt report is
identical to the first."""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from dtrun.azure.sizefacts import ExpectedBusbw
from dtrun.report.metrics import ScalingRow
from dtrun.report.results import SizeRow
from dtrun.report.stats import interval_level
from dtrun.spec.text import percent, plural
from dtrun.workloads.sizes import format_size

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# PNG metadata names the matplotlib version only; no date, so rebuilds match byte for byte.
_METADATA = {"Software": None}


def _figure() -> tuple[Figure, Axes]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.2), dpi=110)
    return fig, fig.subplots()


def _png(fig: Figure) -> bytes:
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata=_METADATA)
    return buffer.getvalue()


def thousands(value: float, _position: object = None) -> str:
    """An axis label with thousands separators: 25,000 tokens/s, not 25000; small fractions
    (0.5 GB/s) as they are."""
    if abs(value) >= 1000 or value == round(value):
        return f"{value:,.0f}"
    return f"{value:g}"


def _separated(ax: Axes, *, x: bool = True) -> None:
    """Thousands separators on the y axis and, with ``x``, the x axis (node counts)."""
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(thousands))
    if x:
        ax.xaxis.set_major_formatter(FuncFormatter(thousands))


def _bars(rows: Sequence[ScalingRow], value: str) -> list[list[float]]:
    """Error bars below and above each row's ``value`` from its interval (none without
    one; never negative, should a figure sit outside its own interval)."""
    below, above = [], []
    for row in rows:
        figure, low, high = (getattr(row, f"{value}{end}") for end in ("", "_low", "_high"))
        below.append(0.0 if low is None else max(0.0, figure - low))
        above.append(0.0 if high is None else max(0.0, high - figure))
    return [below, above]


def plot_throughput(rows: Sequence[ScalingRow], *, title: str, unit: str = "tokens") -> bytes:
    """tokens/s (median step) against nodes with its interval and the ideal linear line."""
    fig, ax = _figure()
    nodes = [row.nodes for row in rows]
    ax.plot(nodes, [row.ideal_tokens_per_s for row in rows], "--", color="grey", label="ideal")
    ax.errorbar(nodes, [row.tokens_per_s for row in rows], yerr=_bars(rows, "tokens_per_s"),
                marker="o", capsize=4, label=_measured(rows))  # fmt: skip
    for row in rows:
        ax.annotate(
            percent(row.efficiency, row.target_efficiency),
            (row.nodes, row.tokens_per_s),
            textcoords="offset points",
            xytext=(6, -12),
            fontsize=8,
        )
    ax.set_xticks(nodes)
    ax.set_xlabel("nodes")
    ax.set_ylabel(f"{unit}/s (median step)")
    ax.set_ylim(bottom=0)
    _separated(ax)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    return _png(fig)


def plot_efficiency(rows: Sequence[ScalingRow], *, title: str) -> bytes:
    """Scaling efficiency against nodes with its interval, the ideal 100% line and the
    target the verdicts are judged against."""
    fig, ax = _figure()
    nodes = [row.nodes for row in rows]
    bars = [[value * 100 for value in side] for side in _bars(rows, "efficiency")]
    target = rows[0].target_efficiency * 100
    ax.plot(nodes, [100.0] * len(nodes), "--", color="grey", label="ideal")
    ax.axhline(target, ls=":", color="C3", label=f"target {target:g}%")
    ax.errorbar(nodes, [row.efficiency * 100 for row in rows], yerr=bars, marker="o",
                capsize=4, label=_measured(rows))  # fmt: skip
    for row in rows:
        ax.annotate(
            f"{percent(row.efficiency, row.target_efficiency)} {row.verdict}",
            (row.nodes, row.efficiency * 100),
            textcoords="offset points",
            xytext=(6, -12),
            fontsize=8,
        )
    ax.set_xticks(nodes)
    ax.set_xlabel("nodes")
    ax.set_ylabel("scaling efficiency (%), median step")
    top = max(row.efficiency_high or row.efficiency for row in rows) * 100
    ax.set_ylim(0, max(110.0, top + 10))
    _separated(ax)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    return _png(fig)


def _measured(rows: Sequence[ScalingRow]) -> str:
    """The measured line's label: its intervals' level as the report names it (95%, or
    per-look with --until-decided) and n."""
    return f"measured, {interval_level([row.confidence for row in rows])} CI (n = {_n(rows)})"


def _n(rows: Sequence[ScalingRow]) -> str:
    """n as steps x launches; "varies" when the points differ (a sweep cut short)."""
    counts = {(row.steps_n, row.launches_n) for row in rows}
    if len(counts) > 1:
        return "varies"
    ((steps, launches),) = counts
    return f"{steps} steps x {plural(launches, 'launch')}"


def plot_busbw(
    series: Mapping[int, Sequence[SizeRow]],
    expected: Mapping[int, ExpectedBusbw | None],
    *,
    title: str,
) -> bytes:
    """In-place busbw against message size, one line per node count, with each node count's
    expected busbw from the catalog as a dotted line (or band, for a range) where known."""
    fig, ax = _figure()
    sizes: set[int] = set()
    for index, (nodes, rows) in enumerate(sorted(series.items())):
        colour = f"C{index}"
        xs = [row.size for row in rows]
        sizes.update(xs)
        ax.plot(xs, [row.in_place.busbw for row in rows], marker="o", ms=3, color=colour,
                label=f"{plural(nodes, 'node')}")  # fmt: skip
        want = expected.get(nodes)
        if want is not None:
            if want.low == want.high:
                ax.axhline(
                    want.low, ls=":", color=colour, label=f"expected, {plural(nodes, 'node')}"
                )
            else:
                ax.axhspan(want.low, want.high, color=colour, alpha=0.12,

                           label=f"expected, {plural(nodes, 'node')}")  # fmt: skip
    ax.set_xscale("log", base=2)
    ticks = sorted(sizes)
    if len(ticks) > 8:
        ticks = ticks[:: -(-len(ticks) // 8)]
    ax.set_xticks(ticks)
    ax.set_xticklabels([format_size(size) for size in ticks], fontsize=8)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s), in place")
    ax.set_ylim(bottom=0)
    _separated(ax, x=False)  # the sizes are labelled by format_size
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)
