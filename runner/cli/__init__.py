"""The `dtrun` command line: one Typer per command group (launch: bench/run/exec; results:
report/compare; stack: up/down/outputs/sizes), merged by app.py. The only package that prints
for people or exits; nothing imports it. May import every other runner package.
"""
