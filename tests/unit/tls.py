"""Certificates for the client's unit tests: one CA, a serving certificate for
127.0.0.1, one naming only ``kubernetes`` (as reached through ``tls-server-name``) and
a client certificate, and the TLS context a test server serves with."""

from __future__ import annotations

import ssl
import tempfile
from pathlib import Path

from crs_controller.testbed.certs import CertificateAuthority, KeyPair

CA = CertificateAuthority.generate("client-test-ca")
SERVING = CA.issue_serving()
NAMED = CA.issue_serving(hosts=("kubernetes",))
CLIENT = CA.issue_client("tenant-admin")


def serving_context(pair: KeyPair = SERVING) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory() as directory:
        Path(directory, "tls.pem").write_bytes(pair.cert_pem + pair.key_pem)
        context.load_cert_chain(Path(directory, "tls.pem"))
    return context
