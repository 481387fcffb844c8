"""What a pod serves, from its OpenAI `GET /v1/models` (or TGI's `/info`): base models vs LoRA adapters.

vLLM lists each LoRA adapter with `"parent": <base model>` and each base model (or alias) with
`"parent": null`; the scheduler and the capacity agent need that split, so it is kept rather than
flattened to ids. A list in which no entry has a `parent` key says nothing about adapters: a
single entry is then the base model, but several are only names (`exact` is False).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ServedModels:
    base_models: frozenset[str]
    adapters: dict[str, str] = field(default_factory=dict)  # adapter id → parent base model
    exact: bool = True  # False: the names' kinds are unknown (all land in base_models)

    @property
    def names(self) -> frozenset[str]:
        return self.base_models | self.adapters.keys()


def parse_models_list(body: bytes | str) -> ServedModels:
    """Parse an OpenAI model list. Raises ValueError/KeyError/TypeError on a malformed body."""
    doc = json.loads(body)
    data = doc["data"]
    if not isinstance(data, list):
        raise TypeError("`data` is not a list")
    bases: set[str] = set()
    adapters: dict[str, str] = {}
    said = False  # some entry has a `parent` key: the server tells adapters apart
    for entry in data:
        if not isinstance(entry, dict):
            raise TypeError("a `data` entry is not an object")
        name = str(entry["id"])
        said = said or "parent" in entry
        parent = entry.get("parent")
        if parent and str(parent) != name:  # a self-parent is no adapter
            adapters[name] = str(parent)
        else:
            bases.add(name)
    if said or len(data) <= 1:
        return ServedModels(frozenset(bases - adapters.keys()), adapters, exact=True)
    return ServedModels(frozenset(bases | adapters.keys()), {}, exact=False)


def parse_tgi_info(body: bytes | str) -> ServedModels:
    """TGI without `/v1/models`: `/info` names the one model it serves (TGI has no adapter list)."""
    return ServedModels(frozenset({str(json.loads(body)["model_id"])}))


__all__ = ["ServedModels", "parse_models_list", "parse_tgi_info"]
