"""Server-side TLS for Fleetgate's gRPC listeners (the ext_proc port, the router's capacity port).

The certificate and key are read once at start and checked for PEM markers here, because gRPC's own
error for a missing or wrong file is a bare "failed to bind" that names no config field. A rotated
certificate takes effect when the process restarts.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from common.config.loader import ConfigError


def read_pem(path: str, field: str, marker: bytes) -> bytes:
    """The bytes of a PEM file holding a `marker` block (e.g. b"CERTIFICATE"); a ConfigError naming
    `field` (the config path, e.g. "extProc.tlsCertFile") when it cannot be read or is no such PEM."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{field}: cannot read {path}: {exc.strerror}") from None
    if b"-----BEGIN " not in data or marker not in data:
        raise ConfigError(f"{field}: {path} is not a PEM file with a {marker.decode()}")
    return data


def server_credentials(section: str, cert_file: str, key_file: str) -> grpc.ServerCredentials:
    """gRPC server credentials from `<section>.tlsCertFile` / `<section>.tlsKeyFile`."""
    key = read_pem(key_file, f"{section}.tlsKeyFile", b"PRIVATE KEY")
    cert = read_pem(cert_file, f"{section}.tlsCertFile", b"CERTIFICATE")
    return grpc.ssl_server_credentials([(key, cert)])
