"""SGLang's native HTTP endpoints, served by pods that present as SGLang (metrics_format "sglang").

Why: sglang-router (the peer router in `bench routing`) discovers a worker's model through
`/server_info` and `/model_info` (falling back to the deprecated `/get_*` names), polls `/get_load`
for its load-aware policies, probes `/health_generate` and fans out `/flush_cache`. A real vLLM server
answers none of these (404), so vLLM-flavoured pods keep not serving them.

Shapes follow SGLang's `http_server.py`: `/model_info` is `get_model_info`, `/server_info` is the
server args merged with scheduler info plus `internal_states` and `version`, `/get_load` is one
`{dp_rank, num_reqs, num_waiting_reqs, num_tokens}` entry per data-parallel rank (one here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from common.http import Receive, Scope, Send, send_body, send_json

if TYPE_CHECKING:
    from modelsim.app import Handler, SimApp

SGLANG_VERSION = "0.5.3+fleetgate.sim"
_TEXT = [(b"content-type", b"text/plain; charset=utf-8")]


def model_info(app: SimApp) -> dict[str, Any]:
    eng = app.pod.engine
    return {
        "model_path": eng.model,
        "tokenizer_path": eng.model,
        "is_generation": True,
        "preferred_sampling_params": None,
        "weight_version": "default",
        "has_image_understanding": False,
        "has_audio_understanding": False,
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
    }


def server_info(app: SimApp) -> dict[str, Any]:
    eng = app.pod.engine
    p = eng.profile
    max_total_tokens = eng.kv.num_blocks * p.block_size
    lora = eng.lora
    return {
        # server args (the subset routers and dashboards read)
        "model_path": eng.model,
        "tokenizer_path": eng.model,
        "served_model_name": eng.model,
        "host": "127.0.0.1",
        "port": int(app.pod.url.rsplit(":", 1)[1]),
        "tp_size": 1,
        "dp_size": 1,
        "context_length": p.max_model_len,
        "max_running_requests": p.max_num_seqs,
        "max_total_tokens": max_total_tokens,
        "chunked_prefill_size": p.max_num_batched_tokens,
        "max_prefill_tokens": p.max_num_batched_tokens,
        "page_size": p.block_size,
        "disable_radix_cache": not eng.enable_prefix_caching,
        "enable_lora": lora.max_lora > 0 or None,
        "max_loras_per_batch": lora.max_lora,
        "lora_paths": dict(lora.known) or None,
        "enable_metrics": True,
        # scheduler info
        "max_total_num_tokens": max_total_tokens,
        "max_req_input_len": p.max_model_len - 1,
        "internal_states": [
            {
                "last_gen_throughput": (
                    eng.last_batch_tokens / eng.last_step_s if eng.last_step_s and eng.running else 0.0
                ),
                "memory_usage": {"token_capacity": max_total_tokens},
            }
        ],
        "version": SGLANG_VERSION,
    }


def load(app: SimApp) -> list[dict[str, int]]:
    """SGLang's GetLoadReqOutput: used KV tokens plus the prompt tokens still waiting."""
    eng = app.pod.engine
    used = eng.kv.num_used * eng.profile.block_size
    waiting_tokens = sum(r.prompt_tokens for r in eng.waiting)
    return [
        {
            "dp_rank": 0,
            "num_reqs": len(eng.running) + len(eng.waiting),
            "num_waiting_reqs": len(eng.waiting),
            "num_tokens": used + waiting_tokens,
        }
    ]


async def get_model_info(app: SimApp, scope: Scope, receive: Receive, send: Send) -> None:
    await send_json(send, 200, msgspec.json.encode(model_info(app)))


async def get_server_info(app: SimApp, scope: Scope, receive: Receive, send: Send) -> None:
    await send_json(send, 200, msgspec.json.encode(server_info(app)))


async def get_load(app: SimApp, scope: Scope, receive: Receive, send: Send) -> None:
    await send_json(send, 200, msgspec.json.encode(load(app)))


async def health_generate(app: SimApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Like SGLang: healthy only if the engine really produces a token."""
    req = app.pod.engine.submit("health check", 1, None)
    await req.wait_finished()
    status = 200 if req.finish_reason != "abort" else 503
    await send_body(send, status, b"")


async def flush_cache(app: SimApp, scope: Scope, receive: Receive, send: Send) -> None:
    """SGLang flushes the radix cache only when idle, and says so either way."""
    eng = app.pod.engine
    if eng.running or eng.waiting:
        body = (
            "Cache flush failed. There are running or waiting requests; "
            "the operation is performed only when the server is idle."
        )
        await send_body(send, 400, body.encode(), _TEXT)
        return
    eng.kv.reset_prefix_cache()
    body = "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n"
    await send_body(send, 200, body.encode(), _TEXT)


SGLANG_ROUTES: dict[str, tuple[str, Handler]] = {
    "/model_info": ("GET", get_model_info),
    "/get_model_info": ("GET", get_model_info),
    "/server_info": ("GET", get_server_info),
    "/get_server_info": ("GET", get_server_info),
    "/get_load": ("GET", get_load),
    "/health_generate": ("GET", health_generate),
    "/flush_cache": ("POST", flush_cache),
}
