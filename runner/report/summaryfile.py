"""summary.json's schema version, and summary.json read back under today's field names.

Version 4 renamed ``where_scaling_is_lost[].verdict`` (a sentence: where that node count's
scaling went) to ``finding``, so that ``verdict`` means one thing in the file: scales, loses or
inconclusive (``rows[].verdict``). A summary an older dtrun wrote still reads: read_summary
gives every renamed field its new name (docs/workloads.md, "summary.json").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dtrun.record.readback import damaged, load_json

# 4: where_scaling_is_lost[].finding; 5: intervals from the launches (a t-interval on per-launch
# log throughput, null from one launch), rows[].launch_sigma and rows[].interval_df;
# 6: rows[].confidence (the intervals' level: 0.95, or --until-decided's per-look level) and
# rows[].stopped (--until-decided: why the point took the launches it did; null otherwise);
# 7: baseline (the node count every efficiency is against, the smallest asked for, and the
# finding where that one had no result; null for all-reduce).
# Older summaries read as they are: without these fields, every interval at 95%.
SUMMARY_SCHEMA = "dtrun.summary/7"

# (list of rows in summary.json, the field's old name, its new name), oldest first
RENAMED = (("where_scaling_is_lost", "verdict", "finding"),)


def read_summary(path: Path) -> dict[str, Any]:
    """A summary.json, any version, with each renamed field under its new name; a damaged one
    is a DamagedRunError naming the file and what is wrong (runner/record/readback.py)."""
    summary = load_json(path)
    if not isinstance(summary, dict):
        raise damaged(path, "it is not a JSON object")
    return upgrade_summary(summary)


def upgrade_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """``summary`` with each renamed field under its new name, in its place among the row's
    fields. Its ``schema`` stays the version it was written with: the figures are that
    version's (version 2's, for one, were at the mean step time)."""
    upgraded = dict(summary)
    for table, old, new in RENAMED:
        rows = summary.get(table)
        if isinstance(rows, list):
            upgraded[table] = [_renamed(row, old, new) for row in rows]
    return upgraded


def _renamed(row: Any, old: str, new: str) -> Any:
    if not isinstance(row, dict) or old not in row or new in row:
        return row
    return {new if key == old else key: value for key, value in row.items()}
