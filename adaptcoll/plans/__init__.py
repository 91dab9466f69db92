"""Layer 7, plans: plain data, no MPI, pure functions of their arguments, the same on every rank.
Communication trees (`trees`), topologies (`topology`), a rank's place in a set of trees and the
segments dealt to each (`dealing`), weighted forests of a schedule file (`forests` over the file
format, `schedule_file`), segment plans (`segments`), block plans (`blocks`) and the node level's map
of ranks to nodes (`nodemap`).

May import: nothing of adaptcoll outside this package (it is the bottom of the stack, with the
backends).
"""

from __future__ import annotations

__all__: list[str] = []
