"""Schedules synthesized for a described network: the description format (`describe`), weighted
forests of spanning trees (`forest`), and the tools that make them (`python -m adaptcoll.schedule`)."""

from .describe import Description, DescriptionError, Link
from .forest import Forest, Schedule, ScheduleError, WeightedTree

__all__ = [
    "Description",
    "DescriptionError",
    "Link",
    "Forest",
    "Schedule",
    "ScheduleError",
    "WeightedTree",
]
