"""Read the routing-relevant fields of an OpenAI request body, with OpenAI-format errors.

Both tiers and the simulator route or account on the same few fields (model, prompt text,
max_tokens, stream); parsing them in one place keeps their error messages identical.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from common.errors import bad_request
from common.tokens import count_tokens

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"


@dataclass(slots=True)
class ParsedRequest:
    body: dict[str, Any]
    model: str
    prompt_text: str
    max_tokens: int | None
    stream: bool
    include_usage: bool

    @property
    def prompt_tokens(self) -> int:
        return count_tokens(self.prompt_text)


def _message_text(content: Any, idx: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}, ...]
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    raise bad_request(
        f"messages[{idx}].content must be a string or a list of parts", param=f"messages[{idx}].content"
    )


def chat_prompt_text(messages: Any) -> str:
    """Flatten chat messages the way a chat template would, role-tagged, so shared prefixes stay shared."""
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty array", param="messages")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise bad_request(f"messages[{i}] must be an object with a string 'role'", param=f"messages[{i}]")
        out.append(f"<|{m['role']}|>{_message_text(m.get('content'), i)}\n")
    return "".join(out)


def completion_prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
        return "".join(prompt)
    if isinstance(prompt, list) and all(isinstance(p, int) for p in prompt):
        return "x" * (4 * len(prompt))  # token ids: only the length matters for routing
    raise bad_request("'prompt' must be a string or an array of strings", param="prompt")


MAX_JSON_DEPTH = 64  # far beyond any OpenAI request (messages → content parts → fields: ~6)


def _too_deep(value: Any, limit: int) -> bool:
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(v, dict):
            stack.extend((x, depth + 1) for x in v.values() if isinstance(x, dict | list))
        elif isinstance(v, list):
            stack.extend((x, depth + 1) for x in v if isinstance(x, dict | list))
    return False


def parse_request(raw: bytes, path: str, max_depth: int = MAX_JSON_DEPTH) -> ParsedRequest:
    """Decode and validate an OpenAI completions or chat request body.

    Nesting is bounded (400 beyond `max_depth`): the decoder would otherwise recurse until Python's
    limit on a body like 100k `[`. The depth walk runs only when the body has more brackets than
    the limit (counted in C), so ordinary requests never pay for it.
    """
    try:
        body = msgspec.json.decode(raw) if raw else None
    except msgspec.DecodeError as exc:
        raise bad_request(f"Request body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:
        raise bad_request(
            f"Request body is nested deeper than {max_depth} levels", code="invalid_json"
        ) from None
    if raw.count(b"[") + raw.count(b"{") > max_depth and _too_deep(body, max_depth):
        raise bad_request(f"Request body is nested deeper than {max_depth} levels", code="invalid_json")
    if not isinstance(body, dict):
        raise bad_request("Request body must be a JSON object", code="invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' is required and must be a non-empty string", param="model")
    if path.endswith("/chat/completions"):
        text = chat_prompt_text(body.get("messages"))
        mt = body.get("max_completion_tokens", body.get("max_tokens"))
    else:
        if "prompt" not in body:
            raise bad_request("'prompt' is required", param="prompt")
        text = completion_prompt_text(body.get("prompt"))
        mt = body.get("max_tokens")
    if mt is not None and (not isinstance(mt, int) or isinstance(mt, bool) or mt < 1):
        raise bad_request("'max_tokens' must be a positive integer", param="max_tokens")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad_request("'stream' must be a boolean", param="stream")
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise bad_request("'stream_options' must be an object", param="stream_options")
    return ParsedRequest(
        body=body,
        model=model,
        prompt_text=text,
        max_tokens=mt,
        stream=stream,
        include_usage=bool(opts.get("include_usage", False)),
    )
