import pytest

from common.errors import OpenAIError
from common.openai_request import parse_request


def test_chat_request_fields() -> None:
    r = parse_request(
        b'{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":7,"stream":true,'
        b'"stream_options":{"include_usage":true}}',
        "/v1/chat/completions",
    )
    assert (r.model, r.max_tokens, r.stream, r.include_usage) == ("m", 7, True, True)
    assert "hello" in r.prompt_text and r.prompt_tokens > 0


def test_completion_prompt_list() -> None:
    r = parse_request(b'{"model":"m","prompt":["ab","cd"]}', "/v1/completions")
    assert r.prompt_text == "abcd" and r.max_tokens is None and not r.stream


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b"{not json", None),
        (b"[]", None),
        (b'{"messages":[{"role":"user","content":"x"}]}', "model"),
        (b'{"model":"m","messages":[]}', "messages"),
        (b'{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0}', "max_tokens"),
        (b'{"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"}', "stream"),
    ],
)
def test_bad_bodies_are_400_with_param(raw: bytes, param: str | None) -> None:
    with pytest.raises(OpenAIError) as ei:
        parse_request(raw, "/v1/chat/completions")
    assert ei.value.status == 400
    assert ei.value.param == param
    assert ei.value.body()["error"]["type"] == "invalid_request_error"
