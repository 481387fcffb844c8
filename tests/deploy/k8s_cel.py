"""Evaluate a CRD's CEL rules (`x-kubernetes-validations`) on an object, as the API server does after
defaulting, with cel-python. Transition rules (those using `oldSelf`) need an old object and are
not evaluated; a rule that cannot run here is reported as a failure, never skipped silently."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import celpy


@dataclass(frozen=True)
class Violation:
    path: str
    rule: str
    message: str


def _defaulted(schema: dict[str, Any], value: Any) -> Any:
    """The object with the schema's `default`s filled in (the API server defaults before validating)."""
    if isinstance(value, dict):
        out = dict(value)
        for key, sub in schema.get("properties", {}).items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
            if key in out:
                out[key] = _defaulted(sub, out[key])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in out:
                if key not in schema.get("properties", {}):
                    out[key] = _defaulted(extra, out[key])
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_defaulted(schema["items"], v) for v in value]
    return value


_ENV = celpy.Environment()


def _check(schema: dict[str, Any], value: Any, path: str, out: list[Violation], ran: list[str]) -> None:
    for rule in schema.get("x-kubernetes-validations", []):
        text = rule["rule"]
        if "oldSelf" in text:
            continue
        ran.append(text)
        try:
            program = _ENV.program(_ENV.compile(text))
            result = program.evaluate({"self": celpy.json_to_cel(value)})
        except Exception as exc:  # an unsupported function is a failure of the check, not a pass
            out.append(Violation(path, text, f"cannot evaluate here: {exc}"))
            continue
        if isinstance(result, celpy.CELEvalError) or not bool(result):
            out.append(Violation(path, text, rule.get("message", "rule failed")))
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                _check(sub, value[key], f"{path}.{key}", out, ran)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            _check(schema["items"], item, f"{path}[{i}]", out, ran)


def cel_check(openapi_v3_schema: dict[str, Any], obj: dict[str, Any]) -> tuple[list[Violation], int]:
    """Every CEL rule the object (after defaulting) breaks, and how many rules were evaluated."""
    out: list[Violation] = []
    ran: list[str] = []
    _check(openapi_v3_schema, _defaulted(openapi_v3_schema, obj), "", out, ran)
    return out, len(ran)
