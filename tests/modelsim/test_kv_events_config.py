"""`--kv-events-config` takes vLLM's JSON, names bad fields, and gives pod i its own ports on the sim's host."""

from __future__ import annotations

import pytest

from modelsim.kv_events import KVEventsConfig


def test_vllm_json_enables_events_and_pods_offset_their_ports() -> None:
    cfg = KVEventsConfig.parse(
        '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557",'
        ' "replay_endpoint": "tcp://*:6557", "topic": "kv", "buffer_steps": 100, "hwm": 1000}'
    )
    assert cfg is not None and cfg.topic == "kv" and cfg.buffer_steps == 100
    pod2 = cfg.for_pod(2, "127.0.0.1")
    assert pod2.endpoint == "tcp://127.0.0.1:5559" and pod2.replay_endpoint == "tcp://127.0.0.1:6559"
    assert (
        KVEventsConfig(endpoint="tcp://127.0.0.1:0").for_pod(3, "127.0.0.1").endpoint == "tcp://127.0.0.1:*"
    )


def test_disabled_configs_publish_nothing() -> None:
    assert KVEventsConfig.parse('{"enable_kv_cache_events": false}') is None
    assert KVEventsConfig.parse('{"publisher": "null"}') is None


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("[1]", "JSON object"),
        ('{"endpoint": 5}', "endpoint"),
        ('{"enable_kv_cache_events": true, "endpoint": "ipc:///tmp/x"}', "tcp://"),
        ('{"enable_kv_cache_events": true, "hwm": 0}', "hwm"),
        ('{"enable_kv_cache_events": true, "publisher": "kafka"}', "publisher"),
        ('{"enable_kv_cache_events": true, "endpont": "tcp://*:1"}', "endpont"),
        ("{nope", "not JSON"),
    ],
)
def test_bad_configs_name_the_field(text: str, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        KVEventsConfig.parse(text)
