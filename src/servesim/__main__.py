"""`python -m servesim` runs the command-line interface."""

from servesim.cli import run

run()
