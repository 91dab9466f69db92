"""`python -m adaptcoll.schedule`: see adaptcoll.schedule.cli."""

import sys

from .cli import main

sys.exit(main())
