"""`dtrun bench`'s price and cost limit, and `dtrun up`'s hourly cost: what a sweep or a stack
will cost, said before anything bills (docs/report.md "Cost")."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from dtrun.cli.common import echo
from dtrun.spec.bounds import bound_of, within
from dtrun.spec.request import BenchSpec
from dtrun.spec.text import plural

if TYPE_CHECKING:
    from pathlib import Path

    from dtrun.azure.prices import Price
    from dtrun.cli.options import Where
    from dtrun.plan.estimate import Estimate
    from dtrun.spec.cluster import ClusterSpec, Inventory

_COST = "Cost"


# `dtrun bench`'s SweepOptions carry these two.
# Taken as text, read by checked_usd: typer's float() took 1_000, ' 5' and other scripts' digits.
PricePerNodeHour = Annotated[
    str | None,
    typer.Option(
        metavar="USD",
        help="What one node costs an hour, in US dollars: over the catalog's list price "
        "(spot, reserved, your own rate), and the only price on the embedded cluster, hosts "
        "files and Slurm. Without a price the report's cost columns say 'no price'"
        f"{within(BenchSpec, 'price_per_node_hour')}.",
        rich_help_panel=_COST,
        show_default=False,
    ),
]
MaxCost = Annotated[
    str | None,
    typer.Option(
        metavar="USD",
        help="Refuse (exit 2, nothing started) a sweep whose estimated cost is above this "
        "(--dry-run prints the estimate and how it is made)"
        f"{within(BenchSpec, 'max_cost')}.",
        rich_help_panel=_COST,
        show_default=False,
    ),
]


def checked_usd(
    field: Literal["price_per_node_hour", "max_cost"], value: str | float | None
) -> float | None:
    """A money option, as given (text) or recorded (a number), checked (a plain, finite
    amount) against its BenchSpec field's range."""
    from dtrun.cli.parse import parse_amount
    from dtrun.plan.checks import check_usd

    bound = bound_of(BenchSpec, field)
    if isinstance(value, str):
        return check_usd(bound, parse_amount(bound.flag, value), value)
    return check_usd(bound, value)


def bench_estimate(spec: BenchSpec, inventory: Inventory | None, nodes: int) -> Estimate:
    """The sweep's estimate on this cluster; before it is open (``inventory`` None), on
    ``nodes`` nodes at --price-per-node-hour."""
    from dtrun.azure.prices import sweep_price
    from dtrun.plan.estimate import estimate

    price = sweep_price(
        spec.price_per_node_hour,
        inventory.size if inventory else None,
        inventory.region if inventory else None,
    )
    guess = estimate(
        spec.node_counts,
        spec.launches,
        workload=spec.workload if spec.program is None else "program",
        steps=spec.steps,
        timeout_s=spec.timeout_s,
        cluster_nodes=len(inventory.nodes) if inventory else nodes,
        price=price,
        probed=tuple(n for n in spec.node_counts if n * spec.procs_per_node > 1)
        if spec.program is not None and spec.probe
        else (),
    )
    return replace(guess, most=spec.until_decided)  # launching until decided: the most


def refuse_early(spec: BenchSpec, where: Where, nodes: int) -> None:
    """--max-cost, before the cluster opens (an allocation dtrun asks Slurm for bills from its
    start): where the price is --price-per-node-hour, or where no catalog price can come (no
    stack), the refusal comes before anything is asked for."""
    from dtrun.plan.estimate import check_max_cost

    if spec.max_cost is None or (where.stack is not None and spec.price_per_node_hour is None):
        return  # a stack's list price is known once its outputs are read
    check_max_cost(bench_estimate(spec, None, nodes), spec.max_cost)


def refuse_on(spec: BenchSpec, inventory: Inventory) -> Estimate:
    """--max-cost on the open cluster, before the sweep's run directory exists."""
    from dtrun.plan.estimate import check_max_cost

    guess = bench_estimate(spec, inventory, len(inventory.nodes))
    check_max_cost(guess, spec.max_cost)
    return guess


def print_estimate(guess: Estimate, before: str | None = None) -> None:
    for line in guess.lines():
        echo(f"# ==== {line}")
    if before is not None:
        echo(f"# ==== {before}")


def before_line(results: Path, inventory: Inventory, price: Price | None) -> str | None:
    """--dry-run: what the nodes have billed so far, which a sweep started now would record as
    its time paid before (runner/record/paid.py); None where the cluster does not say when its
    nodes were created."""
    import datetime

    from dtrun.record.paid import paid_before

    before = paid_before(results, inventory, datetime.datetime.now(datetime.UTC))
    if before is None:
        return None
    node_hours = before["nodes"] * before["seconds"] / 3600
    money = "" if price is None else f", ${node_hours * price.usd_per_node_hour:,.2f}"
    return (
        f"paid before the sweep: {plural(before['nodes'], 'node')} from {before['from']} "
        f"({before['since']}) to now: {node_hours:.3f} node-hours{money}, which a sweep "
        "started now adds to what it pays"
    )


def stack_hourly(spec: ClusterSpec) -> str:
    """What a stack's VMs cost an hour at list price, as `dtrun up` says before creating it."""
    from dtrun.azure.prices import list_price, regions_priced

    node = list_price(spec.vm_size, spec.location)
    head = list_price(spec.head_vm_size, spec.location)
    head_text = (
        f" + the head VM {spec.head_vm_size} ${head.usd_per_node_hour:g}"
        if head is not None
        else f" + the head VM {spec.head_vm_size} (not in dtrun's price list)"
    )
    if node is None:
        where = ", ".join(regions_priced(spec.vm_size)) or "no region"
        return (
            f"cost: no list price for {spec.vm_size} in {spec.location} (dtrun's list has "
            f"{where}: docs/facts.md §13); {plural(spec.node_count, 'node')}{head_text}, billed "
            "by the "
            "second from creation to `dtrun down`"
        )
    total = spec.node_count * node.usd_per_node_hour + (head.usd_per_node_hour if head else 0.0)
    spot = "; Spot VMs bill less, at Azure's spot rate" if spec.spot else ""
    return (
        f"cost: {spec.node_count} x {spec.vm_size} at ${node.usd_per_node_hour:g} an hour"
        f"{head_text} = ${total:,.2f} an hour at list price ({node.source}){spot}; billed from "
        "creation to `dtrun down`, storage and traffic not included"
    )


def after_expiry(spec: ClusterSpec, stack: str) -> str | None:
    """What keeps billing once the cluster's expiry has run (docs/azure.md "Expiry"); None
    when nothing expires (dtrun up warns of that apart)."""
    from dtrun.azure.prices import list_price
    from dtrun.spec.cluster import ExpiryAction, StorageKind

    if not spec.expiry.enabled:
        return None
    if spec.expiry.action is ExpiryAction.GROUP:
        return (
            "after expiry: nothing of this cluster bills (it deletes the whole resource "
            "group); if the head is stopped, expiry cannot run and it bills until "
            f"`dtrun down --stack {stack}`"
        )
    head = list_price(spec.head_vm_size, spec.location)
    price = f" at ${head.usd_per_node_hour:g} an hour" if head is not None else ""
    storage = spec.storage
    size = f"{storage.size_gib} GiB provisioned"
    what = {
        StorageKind.AZURE_FILES: f"the Azure Files premium share ({size})",
        StorageKind.NETAPP: f"the NetApp capacity pool and volume ({size})",
        StorageKind.LUSTRE: f"the Managed Lustre file system ({storage.lustre_sku}, {size})",
    }[storage.kind]
    return (
        f"after expiry (it deletes the GPU scale set only), these still bill until "
        f"`dtrun down --stack {stack}`: the head VM {spec.head_vm_size}{price} with its disk and "
        f"public IP, the nodes' NAT gateway with its public IP, and {what}; set "
        "dtrun:expiryAction group to have expiry delete them too"
    )
