"""The project's own exception tree.

Every error a user can fix carries a condition ``reason`` so the reconciler can put it
on the ClusterResourceSet status as is. Messages never contain Secret data.
"""

from __future__ import annotations

import logging


class CRSError(Exception):
    """Base of every error raised by crs-controller."""

    reason = "Error"


class ResourceError(CRSError):
    """A referenced ConfigMap/Secret cannot be used as it is."""

    reason = "InvalidResource"


class ResourceNotFound(ResourceError):
    reason = "ResourceNotFound"


class WrongSecretType(ResourceError):
    reason = "WrongSecretType"


class InvalidManifest(ResourceError):
    reason = "InvalidManifest"


class InvalidSpec(CRSError):
    """The ClusterResourceSet spec is unusable (e.g. a bad duration or selector)."""

    reason = "InvalidSpec"


class APIError(CRSError):
    """An API server answered with an error, or could not be reached.

    ``body`` is truncated so that large or sensitive payloads never reach logs.
    """

    reason = "APIError"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        body: str = "",
        causes: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = body[:300]
        # (field path, reason) pairs of the server's Status: what went wrong and where,
        # without the values that the message may quote.
        self.causes = causes[:10]


class NotFound(APIError):
    pass


class Conflict(APIError):
    pass


class InvalidObjectName(APIError):
    """A name, namespace or apiVersion that cannot be a segment of a Kubernetes API
    path ('.', '..', '/', '%', control characters...). It is never sent: that object
    fails alone, and nothing it names can lead a request elsewhere."""

    reason = "InvalidObjectName"


class Unreachable(APIError):
    """The cluster cannot be used at all for now: every request to it would fail."""

    reason = "ClusterUnreachable"


class AnswerTooLarge(Unreachable):
    """An answer, or a paged LIST, beyond what the client decodes: too many bytes,
    JSON values, nesting levels, items or pages. ``limit`` names which, so a LIST can
    retry a page that was too many bytes with fewer items."""

    def __init__(self, message: str, *, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


class UnsupportedKubeconfig(Unreachable):
    """A workload kubeconfig asks for something the controller refuses to do (run a
    command, read a local file, fall back to its own credentials)."""

    reason = "UnsupportedKubeconfig"


class NotOurs(CRSError):
    """The Cluster a pass works on became another shard member's (or nobody's, while
    this replica is not acting) during the pass: it ends without writing more."""

    reason = "NotOurs"


RIGHTS_MISSING = (401, 403)  # the server does not know us, or knows and refuses


def failure_level(error: CRSError, otherwise: int = logging.WARNING) -> int:
    """How loud a failed request to the API is logged: 401 and 403 are rights that
    are missing and will not come back by retrying (error, for the alert on warnings
    and errors); a Conflict is another writer's turn (info); anything else is
    ``otherwise`` (a server or network trouble that may pass)."""
    if isinstance(error, APIError) and error.status in RIGHTS_MISSING:
        return logging.ERROR
    if isinstance(error, Conflict):
        return logging.INFO
    return otherwise
