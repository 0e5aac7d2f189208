"""Certificates for the client's unit tests: one CA, a serving certificate for
127.0.0.1 and a client certificate, and the TLS context a test server serves with."""

from __future__ import annotations

import ssl
import tempfile
from pathlib import Path

from crs_controller.testbed.certs import CertificateAuthority

CA = CertificateAuthority.generate("client-test-ca")
SERVING = CA.issue_serving()
CLIENT = CA.issue_client("tenant-admin")


def serving_context() -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as directory:
        Path(directory, "tls.pem").write_bytes(SERVING.cert_pem + SERVING.key_pem)
        context.load_cert_chain(Path(directory, "tls.pem"))
    return context
