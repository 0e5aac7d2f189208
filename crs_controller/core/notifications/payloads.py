"""What a notification says, and the two bodies receivers read.

A ``Notice`` is made from an Event this replica emits for one of ``NOTIFIED_REASONS``.
Everything in it that a tenant wrote (names, messages quoting manifests or workload
servers) is made safe once, here (``core.text.safe``: no control or bidi characters,
bounded), and the clusters it names are bounded. Nothing secret goes in: a notice
holds the Event's reason and message, the CRS, its revision and cluster names.

``cloudevent`` is CloudEvents 1.0 in structured content mode (the whole event is the
JSON body, ``application/cloudevents+json``); ``slack`` is an incoming webhook's
``{"text": ...}``. Slack reads markup in that text and links on its own whatever looks
like a URL, a host name, a channel or a user, so every piece a tenant wrote is
defanged there (``slack_defang``): ``://`` is written ``[:]//`` and a dot between a
word and a letter ``[.]``, as security reports write hostile addresses; the characters
Slack reads as markup or mentions (``*``, ``_``, ``~``, a backquote, ``@``, ``#``,
and ``>`` opening a line) are replaced by look-alikes it does not read; then ``&``,
``<`` and ``>`` are escaped as Slack's markup asks, so nothing is ``<!channel>`` or
``<https://...|a link>``. A person reads the same text; Slack finds in it no link, no
mention and no formatting. The CloudEvents body carries the text as it is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from crs_controller.core.api.models import rfc3339
from crs_controller.core.text import safe

# The Event reasons that reach the receivers; one list, so a new reason is one line.
NOTIFIED_REASONS = (
    "RolloutHalted",
    "RolloutAwaitingApproval",
    "ValidationFailed",
    "RolloutComplete",
    "DeletionRefused",
    "RolloutRolledBack",
)
# Of those, the reasons a cluster's own pass finds: only the replica that owns the
# cluster emits their Event, so that replica tells them, leader or not. The others
# are the rollout's, told by the leader alone: a shard set sends each once.
FOUND_BY_THE_OWNER = ("ValidationFailed", "DeletionRefused")
CLUSTERS_SHOWN = 20
MESSAGE_LIMIT = 1000  # as an Event's message
NAME_LIMIT = 253  # an object name's own limit
SOURCE = "crs-controller"  # CloudEvents ``source``: a URI-reference naming the producer
TYPE_PREFIX = "dev.crs."
CLOUDEVENTS_CONTENT_TYPE = "application/cloudevents+json; charset=utf-8"
JSON_CONTENT_TYPE = "application/json; charset=utf-8"

# Slack's markup and mention characters, and the look-alikes it reads as plain text.
SLACK_LOOKALIKES = str.maketrans(
    {
        "*": "\N{ASTERISK OPERATOR}",
        "_": "\N{FULLWIDTH LOW LINE}",
        "~": "\N{TILDE OPERATOR}",
        "`": "\N{MODIFIER LETTER GRAVE ACCENT}",
        "@": "\N{FULLWIDTH COMMERCIAL AT}",
        "#": "\N{FULLWIDTH NUMBER SIGN}",
    }
)
_HOST_DOT = re.compile(r"(?<=\w)\.(?=[^\W\d_])")  # the dots of a host name: "evil.example"

Format = Literal["cloudevents", "slack"]
FORMATS: tuple[Format, ...] = ("cloudevents", "slack")


@dataclass(frozen=True)
class Notice:
    """One notification, whatever the format: made safe and bounded already."""

    id: str
    time: datetime
    reason: str
    namespace: str
    crs: str
    revision: str | None
    message: str
    clusters: tuple[str, ...]  # at most CLUSTERS_SHOWN, in name order
    clusters_omitted: int = 0  # the clusters concerned left out of ``clusters``


def notice(
    reason: str,
    namespace: str,
    crs: str,
    message: str,
    *,
    revision: str | None,
    clusters: Sequence[str],
    id: str,
    time: datetime,
) -> Notice | None:
    """The notice an Event of ``reason`` makes, or None when the reason is not one
    the receivers are told of."""
    if reason not in NOTIFIED_REASONS:
        return None
    names = sorted(set(clusters))
    shown = tuple(safe(n, NAME_LIMIT) for n in names[:CLUSTERS_SHOWN])
    return Notice(
        id=id,
        time=time,
        reason=reason,
        namespace=safe(namespace, NAME_LIMIT),
        crs=safe(crs, NAME_LIMIT),
        revision=None if revision is None else safe(revision, NAME_LIMIT),
        message=safe(message, MESSAGE_LIMIT),
        clusters=shown,
        clusters_omitted=len(names) - len(shown),
    )


def data(told: Notice) -> dict[str, Any]:
    """The event's own fields, the same in every format that carries them."""
    return {
        "reason": told.reason,
        "crs": told.crs,
        "namespace": told.namespace,
        "revision": told.revision,
        "message": told.message,
        "clusters": list(told.clusters),
        "clustersOmitted": told.clusters_omitted,
    }


def cloudevent(told: Notice) -> dict[str, Any]:
    """CloudEvents 1.0, structured content mode: the required attributes (``id``,
    ``source``, ``specversion``, ``type``), ``subject``, ``time``, and ``data``."""
    return {
        "specversion": "1.0",
        "type": TYPE_PREFIX + told.reason.lower(),
        "source": SOURCE,
        "id": told.id,
        "time": rfc3339(told.time),
        "subject": f"{told.namespace}/{told.crs}",
        "datacontenttype": "application/json",
        "data": data(told),
    }


def slack_escape(text: str) -> str:
    """Slack's markup escapes: only these three characters, ``&`` first."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_defang(text: str) -> str:
    """A tenant's ``text`` as Slack may show it: no link, mention or markup Slack would
    find in it (see the module's docstring), then escaped (``slack_escape``)."""
    text = _HOST_DOT.sub("[.]", text.replace("://", "[:]//"))
    text = text.translate(SLACK_LOOKALIKES)
    if text.startswith(">"):  # a quote
        text = "\N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK}" + text[1:]
    return slack_escape(text)


def slack(told: Notice) -> dict[str, Any]:
    """An incoming webhook's message: one line naming the reason and the CRS, then the
    message, the revision and the clusters concerned; every tenant's piece defanged."""
    crs = f"{slack_defang(told.namespace)}/{slack_defang(told.crs)}"
    lines = [f"*{told.reason}* {crs}", slack_defang(told.message)]
    if told.revision:
        lines.append(f"revision {slack_defang(told.revision)}")
    if told.clusters:
        more = f" and {told.clusters_omitted} more" if told.clusters_omitted else ""
        lines.append(f"clusters: {', '.join(map(slack_defang, told.clusters))}{more}")
    return {"text": "\n".join(lines)}


def body(told: Notice, format: Format) -> tuple[dict[str, Any], str]:
    """The JSON body for ``format`` and its content type."""
    if format == "slack":
        return slack(told), JSON_CONTENT_TYPE
    return cloudevent(told), CLOUDEVENTS_CONTENT_TYPE
