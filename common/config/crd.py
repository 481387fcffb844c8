"""The `FleetgateGateway` CRD, generated from the msgspec structs so it cannot drift from the config file.

`spec` is `GatewaySpec` and `status` is `GatewayStatus` (below). msgspec's JSON Schema is inlined and
rewritten into a Kubernetes *structural* schema: a `type` on every node, no `$ref`, maps as
`additionalProperties`, `exclusiveMinimum` as the OpenAPI v3.0 boolean, field descriptions from the
structs' docstrings and trailing field comments. A shape the API server cannot express (a union of
two different types) becomes a `x-kubernetes-preserve-unknown-fields` node; the gateway still
validates it at load time. Rules msgspec cannot see (Discovery's "exactly one of") are added as
`oneOf`/CEL so `kubectl apply` rejects them early.
"""

from __future__ import annotations

import inspect
import io
import re
import tokenize
from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta, Struct

from common.config.gateway import CRD_GROUP, CRD_KIND, CRD_PLURAL, CRD_VERSION, GatewaySpec

CRD_SHORT_NAMES = ["fgw"]
CRD_LIST_KIND = f"{CRD_KIND}List"
CRD_SINGULAR = CRD_KIND.lower()
CRD_NAME = f"{CRD_PLURAL}.{CRD_GROUP}"


Timestamp = Annotated[datetime, Meta(extra_json_schema={"format": "date-time"})]  # RFC 3339


class _StatusBase(Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    pass


class Condition(_StatusBase, kw_only=True):
    """A standard Kubernetes condition (`Ready`, `EndpointsDiscovered`, `StalePods`, `GlobalRouterConnected`)."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""  # CamelCase machine-readable cause
    message: str = ""  # human-readable detail
    last_transition_time: Timestamp | None = None  # when status last changed
    observed_generation: int = 0  # metadata.generation the condition was computed for


class GatewayStatus(_StatusBase, kw_only=True):
    """What the running gateway reports about itself in the CR's status subresource."""

    observed_generation: int = 0  # metadata.generation of the spec the gateway runs
    endpoints: int = 0  # pods discovered
    ready_endpoints: int = 0  # pods that pass health and metrics-freshness checks
    stale_pods: int = 0  # pods whose metrics are older than scrape.maxStalenessMs
    router_connected: bool = False  # the agent's capacity stream to the global router is up
    conditions: list[Condition] = msgspec.field(default_factory=list)


# Constraints msgspec cannot derive (they live in __post_init__), keyed by struct name.
_EXTRA_RULES: dict[str, dict[str, Any]] = {
    "Discovery": {
        "oneOf": [{"required": ["static"]}, {"required": ["kubernetes"]}],
        "x-kubernetes-validations": [
            {
                "rule": "has(self.static) != has(self.kubernetes)",
                "message": "exactly one of `static` or `kubernetes` must be set",
            }
        ],
    },
}

# Keywords copied through unchanged (all valid in apiextensions.k8s.io/v1 JSONSchemaProps).
_PASSTHROUGH = (
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "pattern",
    "format",
    "enum",
)
_CONVERTED = ("type", "default", "description", "exclusiveMinimum", "exclusiveMaximum")
_DROPPED = ("title", "$ref", "$defs", "anyOf", "additionalProperties", "properties", "required", "items")


def _field_comments(cls: type) -> dict[str, str]:
    """A struct's field comments (trailing `# ...`, else a comment line just above): its field docs here."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    trailing: dict[int, str] = {}
    standalone: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            text = re.sub(r"\bNone\b", "unset", tok.string.lstrip("#").strip())  # a YAML reader's word
            (standalone if tok.line.strip().startswith("#") else trailing)[tok.start[0]] = text
    field_line = re.compile(r"^\s+(?P<name>[a-z_][a-z0-9_]*)\s*:")
    comments: dict[str, str] = {}
    for lineno, line in enumerate(source.splitlines(), start=1):
        m = field_line.match(line)
        if not m:
            continue
        if lineno in trailing:
            comments[m.group("name")] = trailing[lineno]
        elif lineno - 1 in standalone:
            comments[m.group("name")] = standalone[lineno - 1]
    return comments


def _struct_types(root: type) -> dict[str, type]:
    """Every Struct reachable from `root`, by the name msgspec gives its `$defs` entry."""
    found: dict[str, type] = {}

    def visit(t: Any) -> None:
        if isinstance(t, msgspec.inspect.StructType):
            if t.cls.__name__ in found:
                return
            found[t.cls.__name__] = t.cls
            for f in t.fields:
                visit(f.type)
        elif isinstance(t, msgspec.inspect.UnionType):
            for member in t.types:
                visit(member)
        elif isinstance(t, msgspec.inspect.DictType):
            visit(t.value_type)
        elif isinstance(
            t, msgspec.inspect.ListType | msgspec.inspect.SetType | msgspec.inspect.FrozenSetType
        ):
            visit(t.item_type)
        elif isinstance(t, msgspec.inspect.Metadata):
            visit(t.type)

    visit(msgspec.inspect.type_info(root))
    return found


def _encoded_comments(cls: type) -> dict[str, str]:
    """Field comments keyed by the encoded (camelCase) field name."""
    by_attr = _field_comments(cls)
    return {f.encode_name: by_attr[f.name] for f in msgspec.structs.fields(cls) if f.name in by_attr}


def _json_type(values: list[Any]) -> str:
    kinds = {type(v) for v in values}
    if kinds <= {str}:
        return "string"
    if kinds <= {int}:
        return "integer"
    if kinds <= {int, float}:
        return "number"
    if kinds <= {bool}:
        return "boolean"
    raise ValueError(f"enum with mixed value types cannot be a structural schema: {values!r}")


class _Converter:
    def __init__(self, root: type) -> None:
        self.schema = msgspec.json.schema(root)
        self.defs: dict[str, Any] = self.schema.get("$defs", {})
        self.structs = _struct_types(root)
        self.comments = {name: _encoded_comments(cls) for name, cls in self.structs.items()}

    def root(self) -> dict[str, Any]:
        return self.node(self.schema)

    def node(self, s: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in s:
            struct = self.struct(s["$ref"].rsplit("/", 1)[-1])
            if "description" in s:
                struct["description"] = s["description"]
            return struct
        if "anyOf" in s:
            return self.union(s)
        unknown = set(s) - set(_PASSTHROUGH) - set(_DROPPED) - set(_CONVERTED)
        if unknown:
            raise ValueError(f"no structural equivalent for JSON Schema keywords {sorted(unknown)}")
        out: dict[str, Any] = {}
        if "description" in s:
            out["description"] = s["description"]
        if "type" in s:
            out["type"] = s["type"]
        elif "enum" in s:
            out["type"] = _json_type(s["enum"])
        else:
            raise ValueError(f"schema node without a type: {s!r}")
        for key in _PASSTHROUGH:
            if key in s:
                out[key] = s[key]
        for bound, flag in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            if bound in s:  # JSON Schema 2020-12 number → OpenAPI v3.0 boolean form
                out[flag] = s[bound]
                out[bound] = True
        if out["type"] == "array":
            out["items"] = self.node(s["items"])
        if out["type"] == "object" and isinstance(s.get("additionalProperties"), dict):
            out["additionalProperties"] = self.node(s["additionalProperties"])
        elif out["type"] == "object":  # `dict[str, Any]` (a plugin's params): kept as written
            out["x-kubernetes-preserve-unknown-fields"] = True
        default = s.get("default")
        if default is not None and default != {} and default != []:
            out["default"] = default
        return out

    def union(self, s: dict[str, Any]) -> dict[str, Any]:
        members = [m for m in s["anyOf"] if m.get("type") != "null"]
        if len(members) == 1:  # `T | None`: absent and null both mean None to the loader
            return self.node({**members[0], **{k: v for k, v in s.items() if k not in ("anyOf", "default")}})
        shapes = []
        for m in members:
            if "$ref" in m:
                shapes.append(f"an object ({m['$ref'].rsplit('/', 1)[-1]})")
            else:
                shapes.append(f"a {m.get('type', 'value')}")
        desc = s.get("description") or ""
        note = "One of: " + ", or ".join(shapes) + " (checked by the gateway when it loads the spec)."
        return {
            "description": f"{desc} {note}".strip(),
            "x-kubernetes-preserve-unknown-fields": True,
        }

    def struct(self, name: str) -> dict[str, Any]:
        d = self.defs[name]
        comments = self.comments.get(name, {})
        props: dict[str, Any] = {}
        for key, prop in d.get("properties", {}).items():
            converted = self.node(prop)
            if key in comments and "description" not in prop:
                converted = {"description": comments[key], **converted}
            props[key] = converted
        out: dict[str, Any] = {}
        if "description" in d:
            out["description"] = d["description"]
        out["type"] = "object"
        if d.get("required"):
            out["required"] = list(d["required"])
        out["properties"] = props
        out.update(_EXTRA_RULES.get(name, {}))
        return out


def structural_schema(root: type) -> dict[str, Any]:
    """The Kubernetes structural OpenAPI v3 schema of a msgspec Struct type."""
    return _Converter(root).root()


def gateway_crd() -> dict[str, Any]:
    """The whole CustomResourceDefinition object for `FleetgateGateway`."""
    spec_schema = structural_schema(GatewaySpec)
    spec_schema["description"] = (
        "The gateway's configuration; the same schema as `fleetgate gateway --config`."
    )
    status_schema = structural_schema(GatewayStatus)
    conditions = status_schema["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/part-of": "fleetgate"}},
        "spec": {
            "group": CRD_GROUP,
            "names": {
                "kind": CRD_KIND,
                "listKind": CRD_LIST_KIND,
                "plural": CRD_PLURAL,
                "singular": CRD_SINGULAR,
                "shortNames": list(CRD_SHORT_NAMES),
                "categories": ["fleetgate"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": CRD_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": "Cluster", "type": "string", "jsonPath": ".spec.clusterId"},
                        {"name": "Region", "type": "string", "jsonPath": ".spec.region"},
                        {"name": "Endpoints", "type": "integer", "jsonPath": ".status.endpoints"},
                        {"name": "Ready", "type": "integer", "jsonPath": ".status.readyEndpoints"},
                        {"name": "Stale", "type": "integer", "jsonPath": ".status.stalePods"},
                        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                    ],
                    "schema": {
                        "openAPIV3Schema": {
                            "description": "A Fleetgate cluster gateway (Tier 1) and its live status.",
                            "type": "object",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }
