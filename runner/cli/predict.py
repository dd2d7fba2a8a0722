"""`dtrun predict`: what larger node counts would give, from a measured sweep or a description of
results measured elsewhere, before paying for them (docs/prediction.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from dtrun.cli import options as opts
from dtrun.cli.common import console, human_output_to_stderr, print_json, user_errors
from dtrun.cli.cost import PricePerNodeHour, checked_usd
from dtrun.spec.bounds import within
from dtrun.spec.request import BUSBW, BenchSpec
from dtrun.spec.text import one_line

DEFAULT_TARGET = BenchSpec.target_efficiency  # without a run to take it from (--from)

if TYPE_CHECKING:
    from dtrun.predict.predict import Prediction

app = typer.Typer()


@app.command()
def predict(
    run_dir: Annotated[
        Path | None,
        typer.Argument(help="A run directory with two or more measured node counts."),
    ] = None,
    nodes: Annotated[
        str,
        typer.Option(
            "--nodes",
            "-n",
            help=f"Node counts to predict, comma-separated{within(BenchSpec, 'node_counts')}.",
        ),
    ] = "",
    from_file: Annotated[
        Path | None,
        typer.Option(
            "--from",
            metavar="FILE",
            help="Results measured elsewhere, described in YAML or JSON (docs/prediction.md), "
            "in place of a run directory.",
        ),
    ] = None,
    size: Annotated[
        str | None,
        typer.Option(
            help="The size to predict for: its busbw across nodes from the catalog (and its "
            "list price), in place of what the run measured."
        ),
    ] = None,
    busbw: Annotated[
        float | None,
        typer.Option(
            metavar="GBS",
            help=f"All-reduce busbw across nodes, GB/s, in place of the run's ({BUSBW.words}).",
        ),
    ] = None,
    target_efficiency: Annotated[
        float | None,
        typer.Option(
            help="Efficiency a node count must reach to scale, as a fraction (0.9: 90%); "
            "default: the run's own target, 0.9 with --from"
            f"{within(BenchSpec, 'target_efficiency')}.",
            rich_help_panel=opts.OUT_PANEL,
        ),
    ] = None,
    price_per_node_hour: PricePerNodeHour = None,
    json_out: opts.Json = False,
) -> None:
    """Predict the efficiency, step time and cost of larger node counts before paying for them.

    From a sweep's run directory (dtrun predict runs/<id> --nodes 8,16) or from results
    measured elsewhere (dtrun predict --from measured.yaml --nodes 8,16).
    """
    from dtrun.cli.parse import parse_node_counts
    from dtrun.plan.checks import check_predict

    with human_output_to_stderr(json_out), user_errors():
        counts = parse_node_counts(nodes) if nodes else ()
        check_predict(
            sources=(run_dir is not None) + (from_file is not None),
            counts=counts,
            target=DEFAULT_TARGET if target_efficiency is None else target_efficiency,
            size=size,
            busbw=busbw,
        )
        override = checked_usd("price_per_node_hour", price_per_node_hour)
        result = _predict(run_dir, from_file, counts, target_efficiency, size, busbw, override)
        print_prediction(result)
        if json_out:
            print_json(result.to_json())


def _predict(
    run_dir: Path | None,
    from_file: Path | None,
    counts: tuple[int, ...],
    target: float | None,
    size: str | None,
    busbw: float | None,
    override: float | None,
) -> Prediction:
    from dataclasses import replace

    from dtrun.azure.catalog import get_size
    from dtrun.azure.prices import list_price
    from dtrun.azure.sizefacts import expected_busbw, no_busbw_because
    from dtrun.predict.predict import predict

    if size is not None:
        size = get_size(size, setting="--size").name  # unknown or retired: exit 2, the known
    if from_file is not None:
        from dtrun.predict.files import read_description

        desc = read_description(from_file)
        said: tuple[str, ...] = ()
        if busbw is not None:
            desc = replace(desc, busbw_gbs=busbw)
            said = (f"busbw {busbw:g} GB/s across nodes (--busbw)",)
        elif size is not None:  # the size's busbw across nodes, as from a run
            catalog = expected_busbw(size, 2, desc.procs_per_node)
            if catalog is not None:
                middle = (catalog.low + catalog.high) / 2
                desc = replace(desc, busbw_gbs=middle)
                said = (f"busbw {middle:g} GB/s across nodes: {size}'s ({catalog.source})",)
            else:
                said = (no_busbw_because(size, desc.procs_per_node),)
        price = None if override is None else (override, "--price-per-node-hour")
        if price is None and size is not None:
            listed = list_price(size, None)
            price = None if listed is None else (listed.usd_per_node_hour, listed.source)
        result = predict(desc, counts, DEFAULT_TARGET if target is None else target, price=price)
        return replace(result, assumptions=(*said, *result.assumptions))
    from dtrun.cli.results import _run_dir
    from dtrun.report.build import analyse
    from dtrun.report.predicted import from_report

    assert run_dir is not None
    report = analyse(_run_dir(run_dir))
    found = from_report(report, size=size, busbw=busbw)
    price = found.price if override is None else (override, "--price-per-node-hour")
    if size is not None and override is None:
        listed = list_price(size, report.manifest["inventory"].get("region"))
        price = None if listed is None else (listed.usd_per_node_hour, listed.source)
    if target is None:  # the run's own, as its report's verdicts and Next node counts judge
        target = float(report.manifest["bench"].get("target_efficiency", DEFAULT_TARGET))
    result = predict(
        found.description,
        counts,
        target,
        price=price,
        launches=found.launches,
        statistic=found.statistic,
    )
    return replace(result, assumptions=(*found.said, *result.assumptions))


def print_prediction(result: Prediction) -> None:
    from dtrun.cli.tables import Column, Grid, print_grid
    from dtrun.spec.text import percent, percent_range, plural

    out = console()
    measured = ", ".join(
        f"{plural(n, 'node')} {percent(e, result.target_efficiency)}" for n, e in result.measured
    )
    columns = (
        Column("nodes", 5),
        Column("efficiency (range)", 5),
        Column("verdict", 4, justify="left", wrap=True),
        Column("step time", 3),
        Column("cost", 2, justify="left", wrap=True),
    )
    rows = []
    for p in result.predictions:
        if p.efficiency is None:
            rows.append((str(p.nodes), "-", f"{p.verdict}: {p.why}", "-", "-"))
            continue
        step = "-" if p.step_time_s is None else f"{p.step_time_s * 1000:,.1f} ms"
        low, high = p.efficiency_low or 0.0, p.efficiency_high or 0.0
        cost = "-"
        if p.cost is not None:
            cost = f"{p.cost.node_hours:.3f} node-hours"
            if p.cost.usd is not None:
                cost = f"${p.cost.usd:,.2f} ({cost})"
        target = result.target_efficiency
        shown = f"{percent(p.efficiency, target)} ({percent_range(low, high, target)})"
        rows.append((str(p.nodes), shown, p.verdict, step, cost))
    title = f"predicted from {result.source} (measured efficiency, {result.statistic}: {measured})"
    caption = (
        f"{result.mode} scaling; efficiency against the smallest measured node count, range in "
        f"brackets; verdict against the {result.target_efficiency * 100:g}% target"
    )
    costed = next((p.cost.what for p in result.predictions if p.cost is not None), None)
    if costed:
        caption += f"; cost: {costed}"
    print_grid(out, Grid(columns, rows, title, caption, min_columns=3))
    for p in result.predictions:
        if p.efficiency is not None and p.verdict == "cannot tell":
            out.print(one_line(f"{p.nodes} nodes: cannot tell: {p.why}"), highlight=False,
                      soft_wrap=True)  # fmt: skip
    price = result.price or "no price: pass --price-per-node-hour USD to cost it"
    out.print(one_line(f"price: {price}"), markup=False, highlight=False, soft_wrap=True)
    for line in result.assumptions:
        out.print(one_line(f"assumed: {line}"), markup=False, highlight=False, soft_wrap=True)
