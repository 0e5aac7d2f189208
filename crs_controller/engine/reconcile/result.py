"""What a reconcile tells the runtime to do next (controller-runtime's
``reconcile.Result``, plus the keys it woke): come back to this key after a while,
retry it with backoff, and look at other keys (``wake``).

Reconcilers and the process's memory never call into the runtime: a note waiting to
be told is a ``Wake`` in the Result, and the runtime turns it into queue operations.
What the memory decides once and never again (a budget place freed, a rollout plan
admitting clusters) is not: a pass that fails or times out after it returns no
Result, and its retry finds nothing new to wake. The budget and the plans hand those
clusters to a callback the runtime injects, as they change. Results fold with ``|``.
"""

from __future__ import annotations

from dataclasses import dataclass

Key = tuple[str, str, str]  # ("cluster" | "crs" | "sources", namespace, name)


def cluster_key(namespace: str, name: str) -> Key:
    return ("cluster", namespace, name)


def crs_key(namespace: str, name: str) -> Key:
    return ("crs", namespace, name)


def sources_key(namespace: str, name: str) -> Key:
    """A look at whether the content of a CRS's sources moved (``Controller``)."""
    return ("sources", namespace, name)


@dataclass(frozen=True)
class Wake:
    """Look at ``key`` after ``after`` seconds (0: now)."""

    key: Key
    after: float = 0.0


@dataclass(frozen=True)
class Result:
    requeue_after: float | None = None  # this key again, after so many seconds
    retry: bool = False  # this key again, with backoff
    wake: frozenset[Wake] = frozenset()  # other keys to look at

    def __or__(self, other: Result) -> Result:
        """Both: the earlier requeue, a retry if either asks, every key woken."""
        return Result(
            earliest(self.requeue_after, other.requeue_after),
            self.retry or other.retry,
            self.wake | other.wake,
        )

    @staticmethod
    def after(seconds: float | None) -> Result:
        return Result(requeue_after=seconds)

    @staticmethod
    def waking(*wake: Wake) -> Result:
        return Result(wake=frozenset(wake))


NOTHING = Result()
RETRY = Result(retry=True)


def earliest(a: float | None, b: float | None) -> float | None:
    """The sooner of two requeue delays; None is "no requeue"."""
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
