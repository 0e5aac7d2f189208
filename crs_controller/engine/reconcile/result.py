"""What a reconcile tells the runtime to do next with its key (controller-runtime's
``reconcile.Result``): nothing, come back after a while, or retry with backoff."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Result:
    requeue_after: float | None = None
    retry: bool = False


def earliest(a: float | None, b: float | None) -> float | None:
    """The sooner of two requeue delays; None is "no requeue"."""
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
