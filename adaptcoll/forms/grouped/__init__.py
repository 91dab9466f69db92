"""Grouped Allreduce over many arrays (a training step's gradients): `Allreduce_multi`,
`Iallreduce_multi`, `Allreduce_multi_init` (see multi.py)."""

from .args import NAME
from .multi import MultiPrequest, allreduce_multi, allreduce_multi_init, iallreduce_multi
from .requests import ArrayRequest, MultiRequest

__all__ = [
    "NAME",
    "allreduce_multi",
    "iallreduce_multi",
    "allreduce_multi_init",
    "MultiRequest",
    "MultiPrequest",
    "ArrayRequest",
]
