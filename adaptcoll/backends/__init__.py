"""Layer 7, backends: allocation, copies and folds on one kind of memory (`out = lower op higher`),
synchronous or polled: NumPy (`numpy_backend`), CuPy (`cupy_backend`, kernels from `kernels/`), a
deferred test backend whose folds finish later (`deferred`), the interface (`base`) and the pool of
segment buffers (`pool`).

May import: nothing of adaptcoll outside this package (the bottom of the stack, with the plans).
"""

from __future__ import annotations

__all__: list[str] = []
