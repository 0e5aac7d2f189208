"""Generation drift: has someone changed what we applied?

Right after an apply the binding records the sum of the objects'
``metadata.generation``; the API server bumps a generation on every spec change,
so a different sum later means someone edited an object (the "compounded
Generation" of the original proposal). One number per resource keeps the binding
small.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["generation_drift", "generation_sum"]


def generation_sum(generations: Sequence[int | None]) -> int:
    """The sum to record; None (an object without a generation) counts as 0."""
    return sum(generation or 0 for generation in generations)


def generation_drift(recorded_sum: int | None, live_generations: Sequence[int | None]) -> bool:
    """True if the live objects differ from what was recorded.

    In ``live_generations`` None means the object is missing (pass 0 for an existing
    object that has no generation). Without a recorded sum there is nothing to
    compare with, so no verdict: False.
    """
    if recorded_sum is None:
        return False
    if any(generation is None for generation in live_generations):
        return True
    return generation_sum(live_generations) != recorded_sum
