"""Running a plan: every launch of a SweepPlan (health gate, then points and repeats) and
`dtrun run`'s one launch, each executed, recorded and reported. May import plan, execute, record,
report, spec, errors.
"""
