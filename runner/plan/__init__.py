"""Planning, pure: resolve (the request checked once), the built-in workloads, strategies and
presets, the launchers (launchers/, one module each), the environment, and the SweepPlan that
--dry-run prints. May import azure.catalog, spec, errors, render, workloads.sizes.
"""
