"""`python -m tickwork.cli`: the `tickwork` command."""

import sys

from tickwork.cli import main

sys.exit(main())
