"""Helpers to check Kubernetes structural schemas and validate objects against them with `jsonschema`."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema

# Keywords a structural schema may not use inside allOf/anyOf/oneOf/not (apiextensions rules).
_FORBIDDEN_IN_JUNCTORS = ("description", "type", "default", "additionalProperties", "nullable")
_JUNCTORS = ("allOf", "anyOf", "oneOf", "not")


def structural_violations(node: Any, path: str = "") -> list[str]:
    """Why a schema is not structural (empty when it is): the API server would reject the CRD otherwise."""
    problems: list[str] = []
    if not isinstance(node, dict):
        return [f"{path or '/'}: not an object"]
    for bad in ("$ref", "$defs", "definitions", "$schema", "title"):
        if bad in node:
            problems.append(f"{path}: has `{bad}`")
    untyped_ok = node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-int-or-string")
    if "type" not in node and not untyped_ok:
        problems.append(f"{path or '/'}: no `type`")
    if "properties" in node and "additionalProperties" in node:
        problems.append(f"{path}: both `properties` and `additionalProperties`")
    if node.get("additionalProperties") is False:
        problems.append(f"{path}: `additionalProperties: false`")
    if isinstance(node.get("exclusiveMinimum"), int | float) and not isinstance(
        node["exclusiveMinimum"], bool
    ):
        problems.append(f"{path}: numeric exclusiveMinimum (OpenAPI v3.0 wants a boolean)")
    for key, child in node.get("properties", {}).items():
        problems += structural_violations(child, f"{path}.{key}")
    if isinstance(node.get("additionalProperties"), dict):
        problems += structural_violations(node["additionalProperties"], f"{path}[*]")
    if "items" in node:
        problems += structural_violations(node["items"], f"{path}[]")
    for junctor in _JUNCTORS:
        branches = node.get(junctor, [])
        for i, branch in enumerate(branches if isinstance(branches, list) else [branches]):
            for word in _FORBIDDEN_IN_JUNCTORS:
                if word in branch:
                    problems.append(f"{path}.{junctor}[{i}]: `{word}` is not allowed inside {junctor}")
    return problems


def _to_draft4(node: Any) -> Any:
    """Emulate the API server with jsonschema's Draft 4 (OpenAPI v3.0's base): unknown fields are
    rejected, as `kubectl apply`'s default strict field validation does."""
    if isinstance(node, list):
        return [_to_draft4(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_draft4(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if node.get("type") == "object" and "properties" in node and "additionalProperties" not in node:
        out["additionalProperties"] = False
    return out


def validator(openapi_v3_schema: dict[str, Any]) -> jsonschema.Draft4Validator:
    schema = _to_draft4(copy.deepcopy(openapi_v3_schema))
    schema["properties"]["metadata"] = {"type": "object"}  # ObjectMeta is validated by the server itself
    return jsonschema.Draft4Validator(schema)
