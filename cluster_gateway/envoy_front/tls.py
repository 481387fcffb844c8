"""TLS for the ext_proc port, from `extProc.tlsCertFile` / `extProc.tlsKeyFile`.

Envoy AI Gateway (and the reference endpoint picker's default) speak TLS to the picker; Envoy there
does not verify the certificate, so a self-signed one is enough. Files are read once at start
(`common.tls`): a rotated certificate takes effect when the pod restarts.
"""

from __future__ import annotations

import grpc

from common.config.gateway import ExtProc
from common.config.loader import ConfigError
from common.tls import server_credentials as tls_credentials


def server_credentials(cfg: ExtProc) -> grpc.ServerCredentials | None:
    """Server credentials when TLS is configured, None for plaintext (the plain-Envoy bootstrap)."""
    if cfg.tls_cert_file is None and cfg.tls_key_file is None:
        return None
    if cfg.tls_cert_file is None or cfg.tls_key_file is None:
        raise ConfigError("extProc.tlsCertFile and extProc.tlsKeyFile must be set together")
    return tls_credentials("extProc", cfg.tls_cert_file, cfg.tls_key_file)
