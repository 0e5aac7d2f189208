"""A server's refusal mapped onto our own error tree (``NotFound``, ``Conflict``,
``Unreachable``, ``APIError``) with response bodies truncated, so nothing large or
secret travels up into logs or conditions; a server that does not answer as a
Kubernetes API server is reported as such, whatever it sends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crs_controller.clients.answers import Budget, decode
from crs_controller.clients.transport import Response
from crs_controller.core.errors import APIError, Conflict, NotFound, Unreachable


def is_json(response: Response) -> bool:
    return "json" in response.headers.get("content-type", "")


def not_kubernetes(response: Response) -> str:
    """Why an answer is not taken: what it was, in short (never its body)."""
    content_type = response.headers.get("content-type", "none").split(";")[0][:60]
    return (
        f"the server did not answer as a Kubernetes API server "
        f"(HTTP {response.status_code}, content type {content_type})"
    )


def api_error(where: str, response: Response, raw: bytes, budget: Budget) -> APIError:
    """The error of an answer that is not a 2xx; ``raw``: its body."""
    code = response.status_code
    status = decode(raw, where, budget) if is_json(response) else None
    if code == 404 and not (isinstance(status, dict) and status.get("kind") == "Status"):
        # kube-apiserver's answer for a path it does not serve (plain text): a kind
        # whose CRD is not installed, that object's failure only. Discovery of v1,
        # which every API server serves, still tells a server that is not one.
        return NotFound(f"{where}: 404 (not served)", status=code)
    if not isinstance(status, dict) or status.get("kind") != "Status":
        # Not an API server's Status: a proxy, a load balancer, or not Kubernetes.
        return Unreachable(f"{where}: {not_kubernetes(response)}", status=code)
    # The Status is the server's to write, and a hostile one could make it long.
    reason = str(status.get("reason", ""))[:100] or str(code)
    # The server's message can quote object content (e.g. an invalid Secret), so
    # callers decide whether to show it; we keep it truncated on the side, next to
    # the value-free (field, reason) causes.
    message = f"{where}: {code} {reason}"
    detail = str(status.get("message", ""))[:300]
    causes = _causes(status)
    if code == 404:
        return NotFound(message, status=code, body=detail, causes=causes)
    if code == 409:
        return Conflict(message, status=code, body=detail, causes=causes)
    if code == 401:
        message += ": the credentials were refused"
        return Unreachable(message, status=code, body=detail, causes=causes)
    if code == 429 or code >= 500:
        return Unreachable(message, status=code, body=detail, causes=causes)
    return APIError(message, status=code, body=detail, causes=causes)


def _causes(status: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    details = status.get("details")
    causes = details.get("causes") if isinstance(details, Mapping) else None
    found = []
    for cause in causes if isinstance(causes, list) else []:
        if isinstance(cause, Mapping):
            found.append((str(cause.get("field", ""))[:200], str(cause.get("reason", ""))[:100]))
    return tuple(found)
