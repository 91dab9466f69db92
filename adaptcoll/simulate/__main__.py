"""`python -m adaptcoll.simulate`: see adaptcoll.simulate.cli."""

import sys

from .cli import main

sys.exit(main())
