"""POSTing a notification's body to one receiver: the only network code of the
notifications. One deadline per POST; redirects are not followed (a receiver that
moved is a refusal, not a reason to send the body elsewhere) and the answer's body is
never read. Any failure of one POST, whatever it raises, is "no answer": a receiver
never ends the sender. httpx is loaded at the first POST: a controller told of no receiver does
not carry it (with the command-line tools it brings along, about 8 MiB per process)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from crs_controller.core.notifications.delivery import DEADLINE, Receiver

if TYPE_CHECKING:
    import httpx

log = structlog.get_logger(__name__)


def postable(url: str) -> bool:
    """Whether httpx can make a request to ``url``: its host encoded by httpx's own
    rules (IDNA 2008, stricter than ``str.encode("idna")``), as each POST will. Checked
    at start, so that a receiver httpx cannot address is refused then. Loads httpx."""
    import httpx  # noqa: PLC0415 - see the module's docstring

    try:
        httpx.Request("POST", url)
    except Exception:  # any failure: the URL cannot be posted to
        return False
    return True


class WebhookPoster:
    def __init__(
        self,
        user_agent: str,
        deadline: float = DEADLINE,
        transport: httpx.AsyncBaseTransport | None = None,  # tests swap the network
    ) -> None:
        self._agent = user_agent
        self._deadline = deadline
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    def _connected(self) -> httpx.AsyncClient:
        import httpx  # noqa: PLC0415 - see the module's docstring

        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=self._deadline, follow_redirects=False, transport=self._transport
            )
        return self._client

    async def post(self, receiver: Receiver, body: bytes, content_type: str) -> int | None:
        """The answer's status code; None when none came (no connection, a timeout)."""
        headers = {"Content-Type": content_type, "User-Agent": self._agent}
        if receiver.token:
            headers["Authorization"] = f"Bearer {receiver.token}"
        client = self._connected()
        try:
            async with client.stream("POST", receiver.url, content=body, headers=headers) as answer:
                return answer.status_code
        except Exception as exc:  # whatever one POST raises is no answer
            # The exception's text may quote the URL, whose path can be a secret.
            log.info("notification not answered", receiver=receiver.shown, error=type(exc).__name__)
            return None

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
