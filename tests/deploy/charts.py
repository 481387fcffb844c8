"""Chart rendering for tests: Helm's own engine through helm-python-sdk (libhelm), or a helm binary.

No template engine of our own: when neither is available the rendering tests skip with the reason.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHARTS = ROOT / "deploy" / "helm"
GATEWAY_CHART = CHARTS / "fleetgate-cluster-gateway"
ROUTER_CHART = CHARTS / "fleetgate-global-router"


def _sdk() -> Any:
    try:
        import helm_python
    except ImportError:
        return None
    return helm_python


def have_renderer() -> bool:
    return _sdk() is not None or shutil.which("helm") is not None


def require_renderer() -> None:
    if not have_renderer():
        pytest.skip("neither helm-python-sdk (pip install helm-python-sdk) nor a helm binary is available")


class RenderError(RuntimeError):
    """Helm refused the values or a template failed (e.g. a `fail` with our message)."""


def render_files(
    chart: Path, values: dict[str, Any] | None = None, namespace: str = "fleetgate"
) -> dict[str, str]:
    """Template path → rendered text, as `helm template` would produce (CRDs not included)."""
    require_renderer()
    sdk = _sdk()
    if sdk is not None:
        with sdk.Chart.load(str(chart)) as c:
            try:
                out: dict[str, str] = c.render(values or {}, name="fg", namespace=namespace, is_install=True)
            except sdk.HelmError as exc:
                raise RenderError(str(exc)) from exc
            return out
    values_file = yaml.safe_dump(values or {})
    proc = subprocess.run(
        ["helm", "template", "fg", str(chart), "--namespace", namespace, "-f", "-"],
        input=values_file,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if proc.returncode != 0:
        raise RenderError(proc.stderr)
    files: dict[str, str] = {}
    current = ""
    for line in proc.stdout.splitlines(keepends=True):
        if line.startswith("# Source: "):
            current = line.removeprefix("# Source: ").strip()
        files[current] = files.get(current, "") + line
    return files


def render(
    chart: Path, values: dict[str, Any] | None = None, namespace: str = "fleetgate"
) -> list[dict[str, Any]]:
    """All rendered Kubernetes objects."""
    docs: list[dict[str, Any]] = []
    for name, text in render_files(chart, values, namespace).items():
        if name.endswith("NOTES.txt"):
            continue
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def notes(chart: Path, values: dict[str, Any] | None = None) -> str:
    files = render_files(chart, values)
    return next((text for name, text in files.items() if name.endswith("NOTES.txt")), "")


def one(docs: list[dict[str, Any]], kind: str, name_suffix: str = "") -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(name_suffix)]
    assert len(matches) == 1, (
        f"expected one {kind} *{name_suffix}, got {[d['metadata']['name'] for d in matches]}"
    )
    return matches[0]


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(d["kind"] for d in docs)


def lint(chart: Path, values: dict[str, Any] | None = None) -> list[str]:
    """Lint findings at warning level or worse (empty = clean)."""
    require_renderer()
    sdk = _sdk()
    if sdk is not None:
        report = sdk.lint(str(chart), values, strict=True)
        return [f"{m['path']}: {m['error']}" for m in report["messages"] if m["severity"] >= 2] + list(
            report["errors"]
        )
    proc = subprocess.run(
        ["helm", "lint", "--strict", str(chart)], capture_output=True, text=True, timeout=60
    )
    return [] if proc.returncode == 0 else [proc.stdout + proc.stderr]
