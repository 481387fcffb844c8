"""Builders for the ext_proc response messages the picker sends back to Envoy.

Kept apart from the stream state machine so the protocol details (header value encoding, the
`envoy.lb` metadata namespace, body chunking) live in one place.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2

from cluster_gateway.envoy_front.contract import LB_METADATA_NAMESPACE
from cluster_gateway.request_path.headers import DESTINATION_HEADER
from common.errors import OpenAIError

# Envoy accepts large gRPC messages, but smaller streamed chunks keep its buffers and our
# per-message latency small; 62 KiB stays under common 64 KiB frame/buffer sizes.
BODY_CHUNK = 62 * 1024


def header_map(headers: pb.HttpHeaders) -> dict[str, str]:
    """Lower-case dict of an Envoy HeaderMap (values come as `raw_value` bytes in recent Envoys)."""
    out: dict[str, str] = {}
    for h in headers.headers.headers:
        value = h.raw_value.decode("latin-1") if h.raw_value else h.value
        name = h.key.lower()
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def _set(key: str, value: str) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=key, raw_value=value.encode("latin-1")),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )


def mutation(set_headers: Mapping[str, str], remove: Iterable[str]) -> pb.HeaderMutation:
    return pb.HeaderMutation(
        set_headers=[_set(k, v) for k, v in set_headers.items()], remove_headers=sorted(set(remove))
    )


def destination_metadata(endpoints: str) -> struct_pb2.Struct:
    md = struct_pb2.Struct()
    md.update({LB_METADATA_NAMESPACE: {DESTINATION_HEADER: endpoints}})
    return md


def headers_response(
    set_headers: Mapping[str, str] | None = None,
    remove: Iterable[str] = (),
    metadata: struct_pb2.Struct | None = None,
    *,
    response_phase: bool = False,
) -> pb.ProcessingResponse:
    common = pb.CommonResponse(header_mutation=mutation(set_headers or {}, remove))
    hr = pb.HeadersResponse(response=common)
    if response_phase:
        return pb.ProcessingResponse(response_headers=hr)
    return pb.ProcessingResponse(request_headers=hr, dynamic_metadata=metadata)


def buffered_body_response(
    set_headers: Mapping[str, str], remove: Iterable[str], metadata: struct_pb2.Struct | None
) -> pb.ProcessingResponse:
    """BUFFERED mode: headers are still held by Envoy, so the mutation rides on the body answer."""
    common = pb.CommonResponse(header_mutation=mutation(set_headers, remove))
    return pb.ProcessingResponse(request_body=pb.BodyResponse(response=common), dynamic_metadata=metadata)


def streamed_body(body: bytes, *, response_phase: bool = False) -> Iterator[pb.ProcessingResponse]:
    """FULL_DUPLEX_STREAMED: Envoy forwards only what we send back, so return the body in chunks."""
    chunks = [body[i : i + BODY_CHUNK] for i in range(0, len(body), BODY_CHUNK)] or [b""]
    for i, chunk in enumerate(chunks):
        sb = pb.StreamedBodyResponse(body=chunk, end_of_stream=i == len(chunks) - 1)
        br = pb.BodyResponse(response=pb.CommonResponse(body_mutation=pb.BodyMutation(streamed_response=sb)))
        if response_phase:
            yield pb.ProcessingResponse(response_body=br)
        else:
            yield pb.ProcessingResponse(request_body=br)


def continue_body(*, response_phase: bool) -> pb.ProcessingResponse:
    br = pb.BodyResponse(response=pb.CommonResponse())
    return (
        pb.ProcessingResponse(response_body=br) if response_phase else pb.ProcessingResponse(request_body=br)
    )


_CONTINUE_REQUEST_BODY = pb.ProcessingResponse(request_body=pb.BodyResponse(response=pb.CommonResponse()))


def continue_bodies(n: int) -> list[pb.ProcessingResponse]:
    """STREAMED request bodies: one bare CONTINUE per chunk Envoy sent (it still holds the bytes).

    The same immutable message each time: gRPC serializes it per write, nothing mutates it."""
    return [_CONTINUE_REQUEST_BODY] * n


def trailers_response(*, response_phase: bool) -> pb.ProcessingResponse:
    tr = pb.TrailersResponse()
    return (
        pb.ProcessingResponse(response_trailers=tr)
        if response_phase
        else pb.ProcessingResponse(request_trailers=tr)
    )


def immediate(
    status: int, body: bytes, headers: Mapping[str, str] | None = None, details: str = ""
) -> pb.ProcessingResponse:
    hdrs = {"content-type": "application/json", **(headers or {})}
    return pb.ProcessingResponse(
        immediate_response=pb.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=status),  # type: ignore[arg-type]
            headers=mutation(hdrs, ()),
            body=body,
            details=details,
        )
    )


def immediate_error(err: OpenAIError) -> pb.ProcessingResponse:
    return immediate(err.status, err.body_bytes(), err.headers, details=err.code or err.type)
