"""What a sweep's records say: workload results parsed, scaling metrics, plots, report.md/html,
summary.json and `dtrun compare`. Reads a run directory only. May import record, azure, spec,
errors, render, workloads.sizes.
"""
