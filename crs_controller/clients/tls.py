"""The TLS context of an endpoint: its certificate authority and client certificate.

Key material is loaded into the TLS context in memory and never written to disk, and
an encrypted key is refused rather than a pass phrase asked for (OpenSSL would ask on
the terminal and block the whole process).
"""

from __future__ import annotations

import os
import ssl
import tempfile
from pathlib import Path

from crs_controller.clients.kubeconfig import Endpoint
from crs_controller.core.errors import Unreachable, UnsupportedKubeconfig


def ssl_context(endpoint: Endpoint, name: str) -> ssl.SSLContext:
    """The TLS context of an endpoint, built in memory from its inline data."""
    try:
        if endpoint.ca_pem:
            context = ssl.create_default_context(cadata=endpoint.ca_pem.decode("ascii"))
        else:
            context = ssl.create_default_context()
    except (ssl.SSLError, ValueError) as exc:
        raise Unreachable(f"{name}: certificate-authority data is not a PEM certificate") from exc
    if endpoint.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if bool(endpoint.cert_pem) != bool(endpoint.key_pem):
        raise Unreachable(f"{name}: a client certificate needs both its certificate and key")
    if endpoint.cert_pem and endpoint.key_pem:
        try:
            _load_chain(context, endpoint.cert_pem + b"\n" + endpoint.key_pem)
        except _EncryptedKey:
            raise UnsupportedKubeconfig(
                f"{name}: users[].user.client-key-data is encrypted: not supported"
                " (no pass phrase is ever asked for)"
            ) from None
        except (ssl.SSLError, ValueError, OSError) as exc:
            raise Unreachable(f"{name}: client certificate or key is not valid PEM") from exc
    return context


class _EncryptedKey(Exception):
    """The key asked for a pass phrase."""


def _no_pass_phrase() -> bytes:
    """The password callback of ``load_cert_chain``: without one, OpenSSL asks for an
    encrypted key's pass phrase on the terminal and blocks the whole process."""
    raise _EncryptedKey


def _load_chain(context: ssl.SSLContext, pem: bytes) -> None:
    """``load_cert_chain`` only reads files: give it an anonymous in-memory file
    (Linux memfd), else a private temp file removed at once. Either way, only the
    file written here is ever removed."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("crs-client-cert", os.MFD_CLOEXEC)
        try:
            _write_all(fd, pem)
            context.load_cert_chain(f"/proc/self/fd/{fd}", password=_no_pass_phrase)
        finally:
            os.close(fd)
        return
    directory = Path(tempfile.mkdtemp(prefix="crs-tls-"))  # mode 0700
    path = directory / "chain.pem"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_all(fd, pem)
        finally:
            os.close(fd)
        context.load_cert_chain(str(path), password=_no_pass_phrase)
    finally:
        path.unlink(missing_ok=True)
        directory.rmdir()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
