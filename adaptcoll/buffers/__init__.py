"""Host buffers: an mpi4py buffer specification read as mpi4py reads it, reduced to one basic type and a
count, as a 1-D NumPy view (or scratch packed through MPI), or the reason native MPI must take it.

`spec` is the one module that parses specifications; `datatypes` reduces an MPI datatype to its type
signature, `dlpack` reads host DLPack producers without consuming their capsule. Device memory is
`adaptcoll.device`'s question.
"""

from __future__ import annotations

from .spec import Message, datatype_of, parse, unpack_spec

__all__ = ["Message", "datatype_of", "parse", "unpack_spec"]
