"""The pod's HTTP API as a lean ASGI app (no framework: a fleet of pods shares one CPU budget).

vLLM's OpenAI server surface: completions and chat (JSON or SSE), /v1/models, /health, /metrics,
LoRA load/unload; SGLang's native endpoints on SGLang-flavoured pods (sglang_api.py); plus the
simulator's /admin endpoints for faults and state.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import msgspec

from common.errors import OpenAIError, bad_request, rate_limited
from common.http import Message, Receive, Scope, Send, send_body, send_error, send_json
from common.openai_request import CHAT_PATH, COMPLETIONS_PATH, ParsedRequest, parse_request
from modelsim.faults import FaultError
from modelsim.request import SimRequest

if TYPE_CHECKING:
    from modelsim.pod import SimPod

MAX_BODY_BYTES = 64 * 1024 * 1024
_SSE = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
_PROM = [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")]
_encode = msgspec.json.Encoder().encode


async def read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        msg = await receive()
        if msg["type"] == "http.disconnect":
            raise ConnectionError("client disconnected")
        chunk = msg.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise OpenAIError(413, f"Request body larger than {MAX_BODY_BYTES} bytes", code="body_too_large")
        chunks.append(chunk)
        if not msg.get("more_body", False):
            return b"".join(chunks)


def _json_object(raw: bytes, what: str) -> dict[str, Any]:
    try:
        obj = msgspec.json.decode(raw) if raw else {}
    except msgspec.DecodeError as exc:
        raise bad_request(f"Request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(obj, dict):
        raise bad_request(f"{what} body must be a JSON object", code="invalid_json")
    return obj


Handler = Callable[["SimApp", Scope, Receive, Send], Awaitable[None]]


class SimApp:
    """ASGI entry point for one simulated pod."""

    def __init__(self, pod: SimPod) -> None:
        self.pod = pod
        self.created = int(time.time())
        self.routes = ROUTES
        if pod.exporter.format == "sglang":  # SGLang's native endpoints, 404 on vLLM as on the real thing
            from modelsim.sglang_api import SGLANG_ROUTES

            self.routes = {**ROUTES, **SGLANG_ROUTES}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        method: str = scope["method"]
        route = self.routes.get(path)
        try:
            if route is None:
                raise OpenAIError(404, f"Not found: {path}", code="not_found")
            allowed, handler = route
            if method != allowed:
                raise OpenAIError(405, f"Method {method} not allowed on {path}", code="method_not_allowed")
            if not path.startswith("/admin/"):
                await self.pod.faults.wait_unhung()
            await handler(self, scope, receive, send)
        except OpenAIError as err:
            await send_error(send, err)
        except ConnectionError:
            return

    # -- health, models, metrics --------------------------------------------------------------
    async def health(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_body(send, 200, b"")

    async def version(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(send, 200, _encode({"version": "0.10.0+fleetgate.sim"}))

    async def models(self, scope: Scope, receive: Receive, send: Send) -> None:
        eng = self.pod.engine
        base = {
            "id": eng.model,
            "object": "model",
            "created": self.created,
            "owned_by": "vllm",
            "root": eng.model,
            "parent": None,
            "max_model_len": eng.profile.max_model_len,
            "permission": [],
        }
        data = [base]
        for name, path in eng.lora.known.items():
            data.append(
                {
                    "id": name,
                    "object": "model",
                    "created": self.created,
                    "owned_by": "vllm",
                    "root": path,
                    "parent": eng.model,
                    "max_model_len": None,
                    "permission": [],
                }
            )
        await send_json(send, 200, _encode({"object": "list", "data": data}))

    async def metrics(self, scope: Scope, receive: Receive, send: Send) -> None:
        faults = self.pod.faults
        if faults.mode == "stale":
            if faults.frozen_metrics is None:
                faults.frozen_metrics = self.pod.exporter.last or self.pod.exporter.render()
            body = faults.frozen_metrics
        else:
            body = self.pod.exporter.render(name_filter(scope.get("query_string", b"")))
        await send_body(send, 200, body.encode(), _PROM)

    # -- LoRA management ----------------------------------------------------------------------
    async def load_lora(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = _json_object(await read_body(receive), "load_lora_adapter")
        name, path = body.get("lora_name"), body.get("lora_path")
        if not isinstance(name, str) or not name:
            raise bad_request("'lora_name' is required and must be a non-empty string", param="lora_name")
        if not isinstance(path, str) or not path:
            raise bad_request("'lora_path' is required and must be a non-empty string", param="lora_path")
        eng = self.pod.engine
        if eng.lora.max_lora < 1:
            raise bad_request("LoRA is not enabled on this server (max_lora=0)", param="lora_name")
        if name in eng.lora.known or name == eng.model:
            raise bad_request(f"The lora adapter '{name}' has already been loaded.", param="lora_name")
        eng.lora.add(name, path)
        await send_body(
            send,
            200,
            f"Success: LoRA adapter '{name}' added successfully.".encode(),
            [(b"content-type", b"text/plain; charset=utf-8")],
        )

    async def unload_lora(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = _json_object(await read_body(receive), "unload_lora_adapter")
        name = body.get("lora_name")
        if not isinstance(name, str) or not name:
            raise bad_request("'lora_name' is required and must be a non-empty string", param="lora_name")
        eng = self.pod.engine
        if name not in eng.lora.known:
            raise OpenAIError(
                404, f"The lora adapter '{name}' cannot be found.", param="lora_name", code="lora_not_found"
            )
        eng.lora.remove(name)
        await send_body(
            send,
            200,
            f"Success: LoRA adapter '{name}' removed successfully.".encode(),
            [(b"content-type", b"text/plain; charset=utf-8")],
        )

    async def reset_prefix_cache(self, scope: Scope, receive: Receive, send: Send) -> None:
        """vLLM's POST /reset_prefix_cache: drop every cached block no request holds."""
        self.pod.engine.kv.reset_prefix_cache()
        self.pod.engine.publish_kv_events()
        await send_body(send, 200, b"")

    # -- admin ----------------------------------------------------------------------------------
    async def admin_faults(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = _json_object(await read_body(receive), "faults")
        mode = body.pop("mode", None)
        try:
            values = self.pod.faults.parse(mode, body)
        except FaultError as exc:
            raise bad_request(str(exc), param=str(exc).split(":", 1)[0]) from None
        if values["mode"] == "crash":
            await send_json(send, 200, _encode(values))  # answer first, then stop listening
            asyncio.get_running_loop().call_soon(self.pod.apply_fault, values)
            return
        self.pod.apply_fault(values)
        await send_json(send, 200, _encode(self.pod.faults.describe()))

    async def admin_state(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(send, 200, _encode(self.pod.state()))

    # -- inference ------------------------------------------------------------------------------
    async def completions(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._generate(scope, receive, send, chat=False)

    async def chat(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._generate(scope, receive, send, chat=True)

    def _check_faults(self) -> None:
        f = self.pod.faults
        if f.mode == "error" and f.hit():
            raise OpenAIError(f.status, "Simulated engine failure (fault injection)", code="simulated_error")
        if f.mode == "429" and f.hit():
            raise rate_limited("Simulated server overload (fault injection)", retry_after_s=f.retry_after_s)

    async def _generate(self, scope: Scope, receive: Receive, send: Send, *, chat: bool) -> None:
        raw = await read_body(receive)
        self._check_faults()
        parsed = parse_request(raw, CHAT_PATH if chat else COMPLETIONS_PATH)
        n = parsed.body.get("n")
        if n is not None and n != 1:
            raise bad_request("The simulator supports only n=1", param="n")
        eng = self.pod.engine
        lora = eng.resolve_model(parsed.model)
        req = eng.submit(parsed.prompt_text, parsed.max_tokens, lora)
        watcher = asyncio.ensure_future(receive())
        watcher.add_done_callback(lambda t: _on_disconnect(t, eng, req))
        try:
            if parsed.stream:
                await self._stream(send, parsed, req, chat)
            else:
                await req.wait_finished()
                if req.finish_reason == "abort":
                    raise OpenAIError(503, "Request aborted: the engine stopped", code="engine_stopped")
                await send_json(send, 200, _encode(self._full_body(parsed, req, chat)))
        finally:
            watcher.cancel()

    def _usage(self, req: SimRequest) -> dict[str, Any]:
        return {
            "prompt_tokens": req.prompt_tokens,
            "total_tokens": req.prompt_tokens + req.num_output,
            "completion_tokens": req.num_output,
            "prompt_tokens_details": {"cached_tokens": req.cached_tokens},
        }

    def _full_body(self, parsed: ParsedRequest, req: SimRequest, chat: bool) -> dict[str, Any]:
        text = self.pod.filler.tokens(req.seq, 0, req.num_output)
        if chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": None,
                "finish_reason": req.finish_reason,
                "stop_reason": None,
            }
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": req.finish_reason,
                "stop_reason": None,
            }
        return {
            "id": ("chatcmpl-" if chat else "cmpl-") + req.rid,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": parsed.model,
            "choices": [choice],
            "usage": self._usage(req),
        }

    async def _stream(self, send: Send, parsed: ParsedRequest, req: SimRequest, chat: bool) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": _SSE})
        head = {
            "id": ("chatcmpl-" if chat else "cmpl-") + req.rid,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": parsed.model,
        }
        filler = self.pod.filler
        sent = 0
        while True:
            n = await req.next_tokens()
            if n == 0:
                break
            text = filler.tokens(req.seq, sent, n)
            sent += n
            done = req.finished and sent >= req.num_output
            reason = req.finish_reason if done else None
            if reason == "abort":
                break
            if chat:
                delta: dict[str, Any] = {"content": text}
                choice: dict[str, Any] = {
                    "index": 0,
                    "delta": delta,
                    "logprobs": None,
                    "finish_reason": reason,
                }
            else:
                choice = {
                    "index": 0,
                    "text": text,
                    "logprobs": None,
                    "finish_reason": reason,
                    "stop_reason": None,
                }
            payload = b"data: " + _encode({**head, "choices": [choice]}) + b"\n\n"
            if chat and sent == n:  # the role chunk goes out with the first token, not before it
                role = {
                    **head,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": ""},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ],
                }
                payload = b"data: " + _encode(role) + b"\n\n" + payload
            await send({"type": "http.response.body", "body": payload, "more_body": True})
        tail = b""
        if req.finish_reason != "abort" and parsed.include_usage:
            tail += b"data: " + _encode({**head, "choices": [], "usage": self._usage(req)}) + b"\n\n"
        if req.finish_reason != "abort":
            tail += b"data: [DONE]\n\n"
        await send({"type": "http.response.body", "body": tail, "more_body": False})


@lru_cache(maxsize=64)
def name_filter(query: bytes) -> frozenset[str] | None:
    """The `name[]` values of a `/metrics` query string (prometheus_client's filter), or None.
    Cached: a scraper sends the same few query strings over and over."""
    if b"name" not in query:
        return None
    names = parse_qs(query.decode("latin-1")).get("name[]")
    return frozenset(names) if names else None


def _on_disconnect(task: asyncio.Future[Message], engine: Any, req: SimRequest) -> None:
    if task.cancelled() or task.exception() is not None:
        return
    if task.result().get("type") == "http.disconnect" and not req.finished:
        engine.abort(req)


ROUTES: dict[str, tuple[str, Handler]] = {
    "/health": ("GET", SimApp.health),
    "/version": ("GET", SimApp.version),
    "/v1/models": ("GET", SimApp.models),
    "/metrics": ("GET", SimApp.metrics),
    "/metrics/": ("GET", SimApp.metrics),  # vLLM's prometheus_client Mount answers here too
    COMPLETIONS_PATH: ("POST", SimApp.completions),
    CHAT_PATH: ("POST", SimApp.chat),
    "/v1/load_lora_adapter": ("POST", SimApp.load_lora),
    "/v1/unload_lora_adapter": ("POST", SimApp.unload_lora),
    "/reset_prefix_cache": ("POST", SimApp.reset_prefix_cache),
    "/admin/faults": ("POST", SimApp.admin_faults),
    "/admin/state": ("GET", SimApp.admin_state),
}
