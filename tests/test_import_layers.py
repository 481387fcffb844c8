"""Data flows one way, so imports do too: a test that reads every module's imports.

The rules (docs/cluster-gateway.md, "Code layout"): `common/` imports neither tier; the tiers never
import each other; inside the cluster gateway, a layer imports only layers before it (discovery →
metrics → scheduling → request path → the fronts), and the fronts (the embedded proxy, the two Envoy
pickers) share what they share through `envoy_front/`, never through each other.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TIERS = ("cluster_gateway", "global_router")
# The cluster gateway's packages, in the order data flows; a package may import those before it.
GATEWAY_LAYERS = ("k8s", "discovery", "metrics", "scheduling", "request_path", "envoy_front")
FRONTS = ("proxy", "extproc", "extauthz")


def imports(path: Path) -> Iterator[str]:
    """Every absolute module name `path` imports (`from x import y` yields x)."""
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def top(name: str, depth: int) -> str:
    return ".".join(name.split(".")[:depth])


def test_the_helpers_see_imports_of_both_forms(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("import a.b\nfrom c.d import e\nfrom . import f\nif True:\n    from g import h\n")
    assert sorted(imports(src)) == ["a.b", "c.d", "g"]
    assert modules("common") and modules("cluster_gateway") and modules("global_router")


def test_runtime_imports_leave_out_typing_only_blocks_and_name_submodules(tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "from pkg import sub, name\n"
        "from pkg.sub import thing\n"
        "if TYPE_CHECKING:\n    from other import T\n"
        "def f():\n    import lazy\n"
    )
    known = {"pkg", "pkg.sub", "other", "lazy"}
    assert runtime_imports(src, known) == {"pkg", "pkg.sub", "lazy"}
    src.write_text("from pkg import sub\n")
    assert runtime_imports(src, known) == {"pkg.sub"}


@pytest.mark.parametrize("package", ["common", *TIERS])
def test_common_imports_no_tier_and_the_tiers_not_each_other(package: str) -> None:
    forbidden = set(TIERS) - {package}
    bad = [(p.relative_to(ROOT), m) for p in modules(package) for m in imports(p) if top(m, 1) in forbidden]
    assert bad == []


def test_the_cluster_gateways_layers_import_only_the_layers_before_them() -> None:
    order = {name: i for i, name in enumerate(GATEWAY_LAYERS)}
    order.update({front: len(GATEWAY_LAYERS) for front in FRONTS})
    bad = []
    for layer, rank in order.items():
        for path in modules(f"cluster_gateway/{layer}"):
            for name in imports(path):
                if top(name, 1) != "cluster_gateway":
                    continue
                other = top(name, 2).removeprefix("cluster_gateway.")
                if other != layer and order.get(other, -1) >= rank:
                    bad.append((str(path.relative_to(ROOT)), name))
    assert bad == []


def runtime_imports(path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `path` imports when it runs (at load or in a function), leaving
    out `if TYPE_CHECKING:` blocks, which never run."""
    tree = ast.parse(path.read_text(), filename=str(path))
    typing_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for stmt in block.body
        for n in ast.walk(stmt)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import sub` imports the submodule; `from pkg import name` runs pkg's __init__
            subs = {f"{node.module}.{a.name}" for a in node.names} & known
            found.update(subs)
            if len(subs) < len(node.names):
                found.update({node.module} & known)
    return found


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def test_no_module_imports_itself_back_through_others() -> None:
    """An import cycle means two modules that are one job, or a job in the wrong module."""
    paths = {module_name(p): p for pkg in ("common", *TIERS) for p in modules(pkg)}
    known = set(paths)
    graph = {name: runtime_imports(path, known) - {name} for name, path in paths.items()}
    cycles = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, trail: list[str]) -> None:
        state[name] = 1
        for other in sorted(graph[name]):
            if state.get(other) == 1:
                cycles.append([*trail[trail.index(other) :], other])
            elif other not in state:
                visit(other, [*trail, other])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert cycles == []
