"""TLS on the ext_proc port (Envoy AI Gateway's way to reach an endpoint picker): a TLS client gets a
pick over a real grpc.aio server on loopback, a plaintext client does not, bad files fail clearly."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from cluster_gateway.envoy_front.tls import server_credentials
from cluster_gateway.pool import EndpointPool
from common.config.gateway import ExtProc
from common.config.loader import ConfigError

from .conftest import add_pod, start_picker
from .test_picker_protocol import DEST, body_msgs, chat_body, headers_msg


def _pem(path: str) -> bytes:
    return Path(path).read_bytes()


def test_no_tls_fields_means_plaintext() -> None:
    assert server_credentials(ExtProc(enabled=True)) is None


def test_bad_tls_settings_name_the_field(tls_cert: tuple[str, str], tmp_path: Path) -> None:
    crt, key = tls_cert
    with pytest.raises(ConfigError, match="set together"):
        server_credentials(ExtProc(tls_cert_file=crt))
    with pytest.raises(ConfigError, match=r"extProc\.tlsKeyFile: cannot read"):
        server_credentials(ExtProc(tls_cert_file=crt, tls_key_file=str(tmp_path / "missing.pem")))
    with pytest.raises(ConfigError, match=r"extProc\.tlsCertFile: .* not a PEM file"):
        server_credentials(ExtProc(tls_cert_file=key, tls_key_file=key))


async def test_a_tls_client_gets_a_pick_and_a_plaintext_client_does_not(tls_cert: tuple[str, str]) -> None:
    crt, key = tls_cert
    pool = EndpointPool()
    add_pod(pool, "idle", 9002)
    creds = server_credentials(ExtProc(enabled=True, tls_cert_file=crt, tls_key_file=key))
    picker, server = await start_picker(pool, credentials=creds)
    try:
        root = grpc.ssl_channel_credentials(_pem(crt))
        async with grpc.aio.secure_channel(picker.target, root) as channel:
            health = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=10
            )
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            requests = [headers_msg("/v1/chat/completions"), *body_msgs(chat_body(), chunks=1)]
            call = pb_grpc.ExternalProcessorStub(channel).Process(iter(requests), timeout=10)
            first = await call.read()
            mutation = first.request_headers.response.header_mutation.set_headers
            assert {h.header.key: h.header.raw_value.decode() for h in mutation}[DEST] == "127.0.0.1:9002"
            call.cancel()

        async with grpc.aio.insecure_channel(picker.target) as plain:
            with pytest.raises(grpc.aio.AioRpcError):
                await health_pb2_grpc.HealthStub(plain).Check(health_pb2.HealthCheckRequest(), timeout=5)
    finally:
        await server.stop(0)
