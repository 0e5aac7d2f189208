"""Where notifications go and how their delivery is retried: pure decisions, the
sender (``engine.runtime.notifying``) does the waiting and the posting.

Receivers come from the operator's flags alone, never from a tenant's object. A
receiver's URL is shown (logs, errors) as its scheme and host only: a Slack incoming
webhook's path is its secret.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from crs_controller.core.notifications.payloads import Format

ATTEMPTS = 4  # one POST and at most three retries
FIRST_BACKOFF = 1.0  # seconds before the first retry, doubled for each next one
MAX_BACKOFF = 30.0
DEADLINE = 10.0  # seconds one POST may take, connecting and the answer included
QUEUE_LIMIT = 100  # notifications waiting for one receiver; past it one goes (line.py)
DROPS_LOGGED_EVERY = 60.0  # seconds: one line for the notifications a receiver's line dropped
_LABEL = re.compile(r"[a-z0-9_-]{1,63}")


@dataclass(frozen=True)
class Receiver:
    url: str
    format: Format = "cloudevents"
    token: str | None = field(default=None, repr=False)  # sent as a bearer token

    @property
    def shown(self) -> str:
        """The URL as logs may show it: scheme and host, never path or query."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")


def receiver_url(text: str) -> str:
    """``text`` if it is an http or https URL with a host; else ValueError saying what
    is wrong (without repeating the URL, which may hold a secret)."""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        raise ValueError("not a URL") from exc
    if parts.scheme not in ("http", "https"):
        raise ValueError("the scheme must be http or https")
    if not parts.hostname:
        raise ValueError("the URL names no host")
    if not host_name(parts.hostname):
        raise ValueError("the host is not a valid host name")
    if parts.username is not None or parts.password is not None:
        raise ValueError("credentials in the URL are refused: use --notify-token-file")
    return text


def in_clear(url: str) -> bool:
    """Whether what is sent to ``url`` (a ``receiver_url``) crosses a network in clear
    text: http to a host other than this machine's loopback."""
    parts = urlsplit(url)
    return parts.scheme == "http" and not loopback(parts.hostname or "")


def loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if host.lower().removesuffix(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_name(host: str) -> bool:
    """Whether ``host`` (as ``urlsplit`` gives it: lower case, no brackets) is an IP
    address or a name whose IDNA (ASCII) form is dot-separated labels of letters,
    digits, ``-`` and ``_``. What the HTTP client makes of a name (its own IDNA rules)
    is checked apart, by ``engine.io.webhooks.postable``."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return True
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        return False
    labels = ascii_host.lower().removesuffix(".").split(".")
    return len(ascii_host) <= 253 and all(_LABEL.fullmatch(label) for label in labels)


def backoff(attempt: int) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1 for the first)."""
    return float(min(FIRST_BACKOFF * 2 ** max(attempt - 1, 0), MAX_BACKOFF))


def delivered(status: int | None) -> bool:
    return status is not None and 200 <= status < 300


def worth_retrying(status: int | None, attempt: int) -> bool:
    """After attempt ``attempt`` ended with ``status`` (None: no answer within the
    deadline, or no connection): a server error, a timeout or a throttle may pass;
    another refusal (a 4xx, a redirect) would be the same the next time."""
    if attempt >= ATTEMPTS or delivered(status):
        return False
    return status is None or status >= 500 or status in (408, 429)
