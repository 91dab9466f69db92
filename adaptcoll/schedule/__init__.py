"""Schedules synthesized for a described network: the description format (`describe`), weighted
forests of spanning trees (`forest`), and the tools that make them (`python -m adaptcoll.schedule`)."""

from ..plans.schedule_file import Forest, Schedule, ScheduleError, WeightedTree
from .describe import Description, DescriptionError, Link

__all__ = [
    "Description",
    "DescriptionError",
    "Link",
    "Forest",
    "Schedule",
    "ScheduleError",
    "WeightedTree",
]
