"""TLS for the ext_proc port, from `extProc.tlsCertFile` / `extProc.tlsKeyFile`.

Envoy AI Gateway (and the reference endpoint picker's default) speak TLS to the picker; Envoy there
does not verify the certificate, so a self-signed one is enough. Files are read once at start: a
rotated certificate takes effect when the pod restarts.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from common.config.gateway import ExtProc
from common.config.loader import ConfigError


def _read_pem(path: str, field: str, marker: bytes) -> bytes:
    """A PEM file's bytes; gRPC's own error for a bad file is a bare 'failed to bind'."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"extProc.{field}: cannot read {path}: {exc.strerror}") from None
    if b"-----BEGIN " not in data or marker not in data:
        raise ConfigError(f"extProc.{field}: {path} is not a PEM file with a {marker.decode()}")
    return data


def server_credentials(cfg: ExtProc) -> grpc.ServerCredentials | None:
    """Server credentials when TLS is configured, None for plaintext (the plain-Envoy bootstrap)."""
    if cfg.tls_cert_file is None and cfg.tls_key_file is None:
        return None
    if cfg.tls_cert_file is None or cfg.tls_key_file is None:
        raise ConfigError("extProc.tlsCertFile and extProc.tlsKeyFile must be set together")
    key = _read_pem(cfg.tls_key_file, "tlsKeyFile", b"PRIVATE KEY")
    cert = _read_pem(cfg.tls_cert_file, "tlsCertFile", b"CERTIFICATE")
    return grpc.ssl_server_credentials([(key, cert)])
