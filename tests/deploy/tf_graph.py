"""A static model of Terraform's dependency graph (python-hcl2 only, no providers): one node per
variable, local, output, resource, data source and module-call argument, edges from what each one
references, modules expanded recursively. Terraform evaluates each module input and output on its
own, so two modules may feed each other as long as no chain of these nodes loops; this finds such a
loop where `terraform validate` cannot run (the providers cannot be installed here)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

Doc = dict[str, Any]
Graph = dict[str, set[str]]

_VAR = re.compile(r"(?<![\w.])var\.(\w+)")
_LOCAL = re.compile(r"(?<![\w.])local\.(\w+)")
_MODULE = re.compile(r"(?<![\w.])module\.(\w+)\.(\w+)")
_MODULE_WHOLE = re.compile(r"(?<![\w.])module\.(\w+)\b(?!\.)")
_DATA = re.compile(r"(?<![\w.])data\.(\w+)\.(\w+)")
_RESOURCE = re.compile(r"(?<![\w.])([a-z][a-z0-9]*_[a-z0-9_]+)\.(\w+)")


def _named(doc: Doc, kind: str) -> dict[str, Any]:
    return {name: body for block in doc.get(kind, []) for name, body in block.items()}


def _typed(doc: Doc, kind: str) -> dict[tuple[str, str], Any]:
    return {
        (t, n): body for block in doc.get(kind, []) for t, named in block.items() for n, body in named.items()
    }


def _module_doc(directory: Path, parse: Callable[[Path], Doc]) -> Doc:
    merged: Doc = {}
    for path in sorted(directory.glob("*.tf")):
        for kind, blocks in parse(path).items():
            merged.setdefault(kind, []).extend(blocks)
    return merged


def build(directory: Path, parse: Callable[[Path], Doc], prefix: str = "", doc: Doc | None = None) -> Graph:
    """The graph of the module in `directory` (its .tf files, or `doc` when given) and its children."""
    doc = doc if doc is not None else _module_doc(directory, parse)
    graph: Graph = {}
    resources = set(_typed(doc, "resource"))
    data = set(_typed(doc, "data"))
    calls = _named(doc, "module")

    def refs(body: Any) -> set[str]:
        text = str(body)
        out = {f"{prefix}var.{m}" for m in _VAR.findall(text)}
        out |= {f"{prefix}local.{m}" for m in _LOCAL.findall(text)}
        out |= {f"{prefix}module.{m}.output.{o}" for m, o in _MODULE.findall(text) if m in calls}
        out |= {f"{prefix}module.{m}.close" for m in _MODULE_WHOLE.findall(text) if m in calls}
        out |= {f"{prefix}data.{t}.{n}" for t, n in _DATA.findall(text) if (t, n) in data}
        out |= {f"{prefix}{t}.{n}" for t, n in _RESOURCE.findall(text) if (t, n) in resources}
        return out

    for name in _named(doc, "variable"):
        graph.setdefault(f"{prefix}var.{name}", set())
    for block in doc.get("locals", []):
        for name, body in block.items():
            graph[f"{prefix}local.{name}"] = refs(body)
    for name, body in _named(doc, "output").items():
        graph[f"{prefix}output.{name}"] = refs(body)
    for (t, n), body in _typed(doc, "resource").items():
        graph[f"{prefix}{t}.{n}"] = refs(body)
    for (t, n), body in _typed(doc, "data").items():
        graph[f"{prefix}data.{t}.{n}"] = refs(body)
    for name, call in calls.items():
        child = f"{prefix}module.{name}."
        sub = build((directory / call["source"]).resolve(), parse, child)
        graph.update(sub)
        for arg, expr in call.items():
            if arg in ("source", "providers", "version") or arg.startswith("__"):
                continue
            if arg == "depends_on":
                for node in sub:
                    graph[node] |= refs(expr)
                continue
            graph.setdefault(f"{child}var.{arg}", set()).update(refs(expr))
        graph[f"{child}close"] = set(sub)
    return graph


def find_cycle(graph: Graph) -> list[str] | None:
    """One dependency loop (as the list of nodes along it), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep) :], dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def depends_on(graph: Graph, node: str, targets: Iterable[str]) -> bool:
    """Whether `node` reaches any of `targets` through the graph."""
    wanted, seen, todo = set(targets), set(), [node]
    while todo:
        current = todo.pop()
        if current in wanted:
            return True
        if current not in seen:
            seen.add(current)
            todo.extend(graph.get(current, ()))
    return False
