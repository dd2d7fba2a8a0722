"""`dtrun check`'s judging: the check workload's figures read by robust statistics across the
fleet and against the size's expected figures (docs/check.md). Pure: no launch, no I/O."""
