"""`python -m servesim` runs the command-line interface."""

import sys

from servesim.cli import main

sys.exit(main())
