"""Whether a new version of a ConfigMap or Secret a CRS names changed what its
clusters would apply.

ConfigMaps and Secrets are watched as metadata only, so an event says a source has a
new version, not that its content moved: a label or an annotation written is a new
version too. The CRS's sources are loaded (one GET per version, shared with every
pass that wants it, ``io/sources``) and each gives its change number, which moves
whenever a load of it finds other content than the load before it, or finds it
unreadable where it was readable, or the other way round. The clusters look again
when the numbers differ from those they were last woken for: a content change
wakes them at once, a version that changes nothing wakes none. A change and its
undoing (A, B, A) that a pass loaded in between are two changes: a cluster that
took B is woken back to A.
"""

from __future__ import annotations

from collections.abc import Mapping

from crs_controller.core.spec.objects import CRS
from crs_controller.engine.index import read_by
from crs_controller.engine.reconcile.context import CRSContext

Seen = Mapping[tuple[str, str], int]  # (kind, name) -> the source's change number


async def sources_seen(ctx: CRSContext, crs: CRS) -> Seen:
    """Each source of ``crs``, loaded now, with its change number."""
    return {
        (ref.kind, ref.name): await ctx.sources.change(crs.namespace, ref) for ref in read_by(crs)
    }


def last_seen(ctx: CRSContext, crs: CRS) -> Seen | None:
    """Each source of ``crs`` with the change number its last load found, loading
    nothing; None when one was not loaded yet."""
    seen: dict[tuple[str, str], int | None]
    seen = {(ref.kind, ref.name): ctx.sources.noted(crs.namespace, ref) for ref in read_by(crs)}
    known = {key: number for key, number in seen.items() if number is not None}
    return known if len(known) == len(seen) else None


def moved(woken: Seen | None, now: Seen) -> bool:
    """Must the clusters look again? Yes unless they were woken for these very
    sources at these very changes (``woken`` None: never, as after a restart)."""
    return woken is None or dict(woken) != dict(now)
