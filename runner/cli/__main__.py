"""`python -m runner.cli`: the dtrun command line."""

from runner.cli.app import main

main()
