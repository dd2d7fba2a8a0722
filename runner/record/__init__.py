"""The run directory: its layout, the manifest (versions, git, environment), runs.json,
health.json and run.json, written as a run goes and read back by the report. May import
azure.catalog, spec, redact, errors.
"""
