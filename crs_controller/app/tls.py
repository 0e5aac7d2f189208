"""The Runtime Extension's serving certificate, served again as soon as it is renewed.

cert-manager renews the certificate on its own, and Cluster API then trusts the new CA
at once, so a server still presenting the old pair fails every hook call until it
restarts. The kubelet updates a Secret volume by swapping a ``..data`` symlink; a
writer other than the kubelet may rewrite the files in place. Either way the files'
contents change: at a TLS handshake, at most every ``CHECK_INTERVAL`` seconds, both
files are read again and, when they differ from the pair in use, a new context is
built from them and this handshake and the ones after it use it. A pair that cannot
be loaded (half written, a key that does not match) is logged, naming the files and
never their contents, and the pair already in use is kept; it is read again at the
next check.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path

import structlog

from crs_controller.core.clock import Clock

log = structlog.get_logger(__name__)

# Seconds between two reads of the certificate files (each at a handshake).
CHECK_INTERVAL = 2.0

Pair = tuple[bytes, bytes]


class ReloadingCertificate:
    """The server context for ``cert`` and ``key``: ``context`` is given to the server
    once; each handshake it starts is moved to the context of the newest good pair.

    ``make`` builds a context from the files (hypercorn's settings); it is called once
    here, so a missing or bad pair fails the caller rather than the first handshake."""

    def __init__(
        self,
        cert: Path,
        key: Path,
        make: Callable[[], ssl.SSLContext],
        clock: Clock,
        interval: float = CHECK_INTERVAL,
    ) -> None:
        self._cert, self._key, self._make = cert, key, make
        self._clock, self._interval = clock, interval
        self._pair = self._read()
        self._current = self.context = make()
        self._checked = clock.now()
        self._refused: tuple[Pair | None, str, object] | None = None
        self.context.sni_callback = self._handshake

    def _handshake(self, conn: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        # Called by OpenSSL at every ClientHello, with or without a server name. An
        # exception here would fail the handshake: none is let out.
        try:
            self.refresh()
            if self._current is not self.context:
                conn.context = self._current
        except Exception as error:  # keep serving the pair in use
            log.error("TLS certificate check failed", error_type=type(error).__name__)

    def refresh(self) -> None:
        """Read the files again if ``interval`` has passed since the last read, and
        load them when they changed and form a good pair."""
        now = self._clock.now()
        if now - self._checked < self._interval:
            return
        self._checked = now
        try:
            pair = self._read()
            if pair == self._pair:
                return
            fresh = self._make()
        except OSError as error:
            self._refuse(error)
            return
        # The files may have changed between the read and the load: then the next
        # check finds them different from ``pair`` and loads them again.
        self._pair, self._current, self._refused = pair, fresh, None
        log.info("TLS certificate reloaded", cert=str(self._cert), key=str(self._key))

    def _read(self) -> Pair:
        return self._cert.read_bytes(), self._key.read_bytes()

    def _refuse(self, error: OSError) -> None:
        # ssl.SSLError is an OSError too. Logged once per pair refused, not per check.
        try:
            pair: Pair | None = self._read()
        except OSError:
            pair = None
        seen = (pair, type(error).__name__, error.filename)
        if seen == self._refused:
            return
        self._refused = seen
        log.warning(
            "TLS certificate not reloaded: still serving the previous one",
            files=[str(error.filename)] if error.filename else [str(self._cert), str(self._key)],
            error_type=type(error).__name__,
            reason=getattr(error, "reason", None) or error.strerror,
        )
