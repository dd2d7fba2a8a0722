"""List prices of the catalog's InfiniBand sizes, per region (docs/facts.md §13), and the one
price a sweep is costed at.

Pay-as-you-go Linux, USD per VM-hour, as SkyPilot's Azure catalog lists them (it is built from
Azure's Retail Prices API). Only the figures read there are here: a size or region missing from
the table has no list price, and the cost columns then say "no price" rather than guess;
``--price-per-node-hour`` covers it (and spot, reservations and negotiated rates).
"""

from __future__ import annotations

from dataclasses import dataclass

CURRENCY = "USD"
PRICES_AS_OF = "2026-11-24"  # the day these figures were read from the source below
PRICES_SOURCE = (
    "SkyPilot's Azure catalog (skypilot-org/skypilot-catalog catalogs/v6/azure/vms.csv, "
    "commit 098741e7), pay-as-you-go Linux list prices from Azure's Retail Prices API"
)

# (size, region) -> USD per VM-hour. docs/facts.md §13 lists each figure with its source row.
LIST_PRICES: dict[tuple[str, str], float] = {
    ("Standard_ND96isr_H100_v5", "eastus"): 98.32,
    ("Standard_ND96isr_H100_v5", "eastus2"): 98.32,
    ("Standard_ND96isr_H100_v5", "westus"): 127.816,
    ("Standard_ND96amsr_A100_v4", "eastus"): 32.77,
    ("Standard_ND96amsr_A100_v4", "eastus2"): 32.77,
    ("Standard_ND96amsr_A100_v4", "southcentralus"): 39.324,
    ("Standard_ND96asr_v4", "eastus"): 27.197,
    ("Standard_ND96asr_v4", "southcentralus"): 32.63,
    ("Standard_ND96asr_v4", "westus2"): 27.197,
    ("Standard_ND40rs_v2", "eastus"): 22.032,
    ("Standard_ND40rs_v2", "southcentralus"): 26.438,
    ("Standard_ND40rs_v2", "westus2"): 22.032,
    ("Standard_HB120rs_v2", "eastus"): 3.6,
    ("Standard_HB120rs_v2", "southcentralus"): 3.96,
    ("Standard_HB120rs_v2", "westus2"): 3.6,
    ("Standard_HB120rs_v3", "eastus"): 3.6,
    ("Standard_HB120rs_v3", "southcentralus"): 3.96,
    ("Standard_HB120rs_v3", "westus3"): 3.6,
    ("Standard_HB176rs_v4", "eastus"): 7.2,
    ("Standard_HB176rs_v4", "southcentralus"): 8.64,
    ("Standard_HC44rs", "eastus"): 3.168,
    ("Standard_HC44rs", "southcentralus"): 3.484,
    ("Standard_HC44rs", "westus2"): 3.168,
    ("Standard_HX176rs", "eastus"): 8.64,
    ("Standard_HX176rs", "southcentralus"): 10.368,
}


@dataclass(frozen=True)
class Price:
    """What one node costs an hour, and where that figure comes from."""

    usd_per_node_hour: float
    source: str


def list_price(size: str | None, region: str | None) -> Price | None:
    """The catalog's list price of a size in a region; None where the table has none."""
    if size is None or region is None:
        return None
    value = LIST_PRICES.get((size, region.lower()))
    if value is None:
        return None
    return Price(
        value,
        f"list price of {size} in {region.lower()}, pay-as-you-go Linux, as of {PRICES_AS_OF} "
        "(docs/facts.md §13)",
    )


def sweep_price(override: float | None, size: str | None, region: str | None) -> Price | None:
    """The price a sweep is costed at: --price-per-node-hour, else the list price, else none."""
    if override is not None:
        return Price(override, "--price-per-node-hour")
    return list_price(size, region)


def regions_priced(size: str) -> list[str]:
    """The regions the table has a list price for this size in (for messages)."""
    return sorted(region for name, region in LIST_PRICES if name == size)
