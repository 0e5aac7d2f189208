"""How long an informer waits before it lists or watches again after a failure.

A failure is a list or watch that raised, an ERROR event (410 Gone, a resourceVersion
too large, a server error), a list answered without a resourceVersion, or a watch that
ended soon after it started, whatever it delivered first (a proxy closing streams, a
server shutting down). Without a wait, each of those turns into as many
LISTs or WATCHes as the API server can answer. As client-go's reflector does, waits
grow exponentially to a cap, are jittered so that informers failing together spread
out, and start again from nothing only once a watch has proven healthy.
"""

from __future__ import annotations

import random
from collections.abc import Callable

__all__ = ["FIRST_SECONDS", "MAX_SECONDS", "SHORT_WATCH_SECONDS", "Backoff", "delay"]

FIRST_SECONDS = 0.5
MAX_SECONDS = 30.0
# A watch that ends sooner failed, even after events: a server may send one event or
# bookmark and then an error or a close, again and again. One that lived longer (the
# server closes every watch after its timeoutSeconds) is healthy.
SHORT_WATCH_SECONDS = 10.0
_MAX_DOUBLINGS = 16  # FIRST_SECONDS * 2**16 is far over the cap; keeps the power small


def delay(failures: int, jitter: float) -> float:
    """Seconds to wait after ``failures`` failures in a row, ``jitter`` in [0, 1).

    The first retry is at once: a single 410 after a compaction is routine. Then
    FIRST_SECONDS doubling up to MAX_SECONDS, each cut by up to half by ``jitter``.
    """
    if failures <= 1:
        return 0.0
    full = min(FIRST_SECONDS * 2.0 ** min(failures - 2, _MAX_DOUBLINGS), MAX_SECONDS)
    return full * (1.0 - jitter / 2)


class Backoff:
    """The failures in a row of one informer."""

    def __init__(self, jitter: Callable[[], float] = random.random) -> None:
        self.failures = 0
        self._jitter = jitter

    def failed(self) -> float:
        """Count a failure; returns the seconds to wait before trying again."""
        self.failures += 1
        return delay(self.failures, self._jitter())

    def reset(self) -> None:
        """A watch proved healthy: the next failure is retried at once."""
        self.failures = 0
