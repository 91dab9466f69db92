"""`python -m adaptcoll.check`: see adaptcoll.check.cli."""

import sys

from .cli import main

sys.exit(main())
