"""The official `openai` client talks to a simulated pod: chat, completions, streaming, models."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from common.tokens import count_tokens
from modelsim.fleet import PodSpec, SimFleet
from tests.modelsim.conftest import MODEL


@pytest.fixture
def threaded_fleet() -> Iterator[SimFleet]:
    fleet = SimFleet([PodSpec(profile="tiny", adapters=["sql"])])
    fleet.start_in_thread()
    try:
        yield fleet
    finally:
        fleet.stop_thread()


def test_openai_client_chat_completion_and_streaming(threaded_fleet: SimFleet) -> None:
    client = openai.OpenAI(base_url=threaded_fleet.urls[0] + "/v1", api_key="unused", max_retries=0)

    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say something."}], max_tokens=7
    )
    assert chat.choices[0].message.role == "assistant"
    assert chat.choices[0].finish_reason == "length"
    assert chat.usage is not None and chat.usage.completion_tokens == 7
    assert count_tokens(chat.choices[0].message.content or "") == 7

    comp = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=5)
    assert comp.usage is not None and comp.usage.completion_tokens == 5
    assert comp.usage.prompt_tokens == count_tokens("Once upon a time")
    assert comp.choices[0].text

    stream = client.chat.completions.create(
        model="sql",
        messages=[{"role": "user", "content": "SELECT"}],
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    content, usage, reasons = "", None, []
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            content += ch.delta.content or ""
            if ch.finish_reason:
                reasons.append(ch.finish_reason)
    assert reasons == ["length"]
    assert usage is not None and usage.completion_tokens == 6
    assert count_tokens(content) == 6

    cstream = client.completions.create(model=MODEL, prompt="abc", max_tokens=4, stream=True)
    text = "".join(c.choices[0].text for c in cstream if c.choices)
    assert count_tokens(text) == 4

    ids = {m.id for m in client.models.list()}
    assert ids == {MODEL, "sql"}

    with pytest.raises(openai.NotFoundError) as exc:
        client.completions.create(model="nope", prompt="x", max_tokens=1)
    assert exc.value.code == "model_not_found"
