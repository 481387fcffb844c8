import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CapacityType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CAPACITY_TYPE_UNSPECIFIED: _ClassVar[CapacityType]
    CAPACITY_TYPE_ON_DEMAND: _ClassVar[CapacityType]
    CAPACITY_TYPE_SPOT: _ClassVar[CapacityType]
CAPACITY_TYPE_UNSPECIFIED: CapacityType
CAPACITY_TYPE_ON_DEMAND: CapacityType
CAPACITY_TYPE_SPOT: CapacityType

class ModelCapacity(_message.Message):
    __slots__ = ("model", "ready_pods", "saturated_pods", "queued", "running", "kv_headroom", "adapters_resident", "est_ttft_ms", "tokens_per_second", "headroom_requests", "adapters_available", "gpu_tokens_per_second")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    READY_PODS_FIELD_NUMBER: _ClassVar[int]
    SATURATED_PODS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    KV_HEADROOM_FIELD_NUMBER: _ClassVar[int]
    ADAPTERS_RESIDENT_FIELD_NUMBER: _ClassVar[int]
    EST_TTFT_MS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    HEADROOM_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    ADAPTERS_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    GPU_TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    model: str
    ready_pods: int
    saturated_pods: int
    queued: int
    running: int
    kv_headroom: float
    adapters_resident: _containers.RepeatedScalarFieldContainer[str]
    est_ttft_ms: float
    tokens_per_second: float
    headroom_requests: int
    adapters_available: _containers.RepeatedScalarFieldContainer[str]
    gpu_tokens_per_second: float
    def __init__(self, model: _Optional[str] = ..., ready_pods: _Optional[int] = ..., saturated_pods: _Optional[int] = ..., queued: _Optional[int] = ..., running: _Optional[int] = ..., kv_headroom: _Optional[float] = ..., adapters_resident: _Optional[_Iterable[str]] = ..., est_ttft_ms: _Optional[float] = ..., tokens_per_second: _Optional[float] = ..., headroom_requests: _Optional[int] = ..., adapters_available: _Optional[_Iterable[str]] = ..., gpu_tokens_per_second: _Optional[float] = ...) -> None: ...

class CapacityReport(_message.Message):
    __slots__ = ("cluster_id", "region", "zone", "gateway_url", "sequence", "sent_at", "models", "cost_per_gpu_hour", "gpus", "capacity_type", "draining")
    CLUSTER_ID_FIELD_NUMBER: _ClassVar[int]
    REGION_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    GATEWAY_URL_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    COST_PER_GPU_HOUR_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    cluster_id: str
    region: str
    zone: str
    gateway_url: str
    sequence: int
    sent_at: _timestamp_pb2.Timestamp
    models: _containers.RepeatedCompositeFieldContainer[ModelCapacity]
    cost_per_gpu_hour: float
    gpus: int
    capacity_type: CapacityType
    draining: bool
    def __init__(self, cluster_id: _Optional[str] = ..., region: _Optional[str] = ..., zone: _Optional[str] = ..., gateway_url: _Optional[str] = ..., sequence: _Optional[int] = ..., sent_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., models: _Optional[_Iterable[_Union[ModelCapacity, _Mapping]]] = ..., cost_per_gpu_hour: _Optional[float] = ..., gpus: _Optional[int] = ..., capacity_type: _Optional[_Union[CapacityType, str]] = ..., draining: _Optional[bool] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("sequence",)
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    def __init__(self, sequence: _Optional[int] = ...) -> None: ...

class Directive(_message.Message):
    __slots__ = ("ack", "report_interval_ms", "drain", "message")
    ACK_FIELD_NUMBER: _ClassVar[int]
    REPORT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ack: Ack
    report_interval_ms: int
    drain: bool
    message: str
    def __init__(self, ack: _Optional[_Union[Ack, _Mapping]] = ..., report_interval_ms: _Optional[int] = ..., drain: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...
