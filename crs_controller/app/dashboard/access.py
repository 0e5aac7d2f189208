"""Who may read the fleet page: whoever holds this run's token. The page shows all
the operator's kubeconfig may list, and a loopback address keeps out the network but
not the other users of the same host, so the address alone guards nothing.

The command makes a new token each run and prints it in the page's URL (as Jupyter
does). Opening that URL sets a cookie holding the token (HttpOnly: no script reads
it; SameSite=Strict: no other site's page sends it) and redirects to the URL without
it, so it does not stay in the address bar or the history. Every request after that,
the page's own files and its data alike, carries the cookie; a request with neither
the cookie nor the token in its query is refused. Both are compared in constant time.
The token is never logged and never named in an answer."""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode

# 256 bits, URL- and cookie-safe (``A-Z a-z 0-9 - _``).
TOKEN_BYTES = 32
TOKEN_PARAMETER = "token"
COOKIE = "crs-dashboard"


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


@dataclass
class Access:
    """This run's token, and the cookie that carries it once the page is opened."""

    token: str = field(default_factory=new_token, repr=False)
    # Cookies keep apart by host, not port: named for the port once it is known, two
    # runs on one host do not replace each other's.
    cookie: str = COOKIE

    def serve_on(self, port: int) -> None:
        self.cookie = f"{COOKIE}-{port}"

    def holds(self, presented: str) -> bool:
        return hmac.compare_digest(presented.encode(), self.token.encode())

    def set_cookie(self) -> bytes:
        """The ``Set-Cookie`` value: for this host's every path, for this browser
        session (the token ends with the run anyway), never sent by another site."""
        return f"{self.cookie}={self.token}; HttpOnly; SameSite=Strict; Path=/".encode()


@dataclass(frozen=True)
class Verdict:
    """What a request's credentials allow: ``allowed``; ``by_token`` when the token
    came in the query (then ``rest`` is the query without it)."""

    allowed: bool
    by_token: bool = False
    rest: str = ""


def admit(access: Access, query: str, cookie_headers: Iterable[str]) -> Verdict:
    """A token in the query decides alone; otherwise the cookie of that name does."""
    pairs = parse_qsl(query, keep_blank_values=True)
    tokens = [value for name, value in pairs if name == TOKEN_PARAMETER]
    if tokens:
        rest = urlencode([(name, value) for name, value in pairs if name != TOKEN_PARAMETER])
        return Verdict(len(tokens) == 1 and access.holds(tokens[0]), True, rest)
    presented = cookies(cookie_headers).get(access.cookie)
    return Verdict(presented is not None and access.holds(presented))


def cookies(headers: Iterable[str]) -> dict[str, str]:
    """The cookies of ``Cookie`` headers (``a=1; b=2``); a name given twice keeps its
    first value, as browsers send the most specific first."""
    found: dict[str, str] = {}
    for header in headers:
        for pair in header.split(";"):
            name, sep, value = pair.strip().partition("=")
            if sep:
                found.setdefault(name, value)
    return found
