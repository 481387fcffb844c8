"""The example plugin package (`examples/fleetgate-cheapest-gpu`), installed into a throw-away venv,
is used by `fleetgate gateway --config` against `fleetgate sim` pods with its own params; nothing in
`cluster_gateway/` knows it.

The venv is made with `--system-site-packages`; since the test runner usually is a venv itself, a
`.pth` file adds the runner's site-packages (Fleetgate's dependencies) too. The example is installed
with `pip --no-deps --no-build-isolation --no-index`, so no network is needed.
"""

from __future__ import annotations

import shutil
import site
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from cluster_gateway.discovery.static import endpoints_from_static
from cluster_gateway.scheduling.plugin import PLUGINS
from common.config.gateway import StaticDiscovery, StaticEndpoint
from tests.eventually import eventually_sync
from tests.procs import ROOT, fleetgate, read_until, stop

EXAMPLE = ROOT / "examples" / "fleetgate-cheapest-gpu"
MODEL = "plugin-test-model"
LABEL = "fleetgate.io/gpu"


@pytest.fixture(scope="module")
def plugin_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv's python with the example plugin installed (skip only if no venv can be built here)."""
    root = tmp_path_factory.mktemp("plugin-venv")
    venv = root / "venv"
    try:
        subprocess.run(
            [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)],
            check=True,
            capture_output=True,
            timeout=120,
        )
    except (OSError, subprocess.SubprocessError) as e:
        pytest.skip(f"cannot build a venv here: {e}")
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    (Path(purelib) / "_fleetgate_test_runner.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    src = root / "src"  # a copy: building writes build/ and *.egg-info next to the sources
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    done = subprocess.run(
        [*pip, "--no-deps", "--no-build-isolation", "--no-index", str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0 and "No module named pip" in done.stderr:
        pytest.skip("pip is not available to install into the venv")
    assert done.returncode == 0, done.stderr
    return python


@pytest.fixture(scope="module")
def sim_urls() -> Iterator[list[str]]:
    proc = fleetgate("sim", "--pods", "2", "--base-port", "0", "--profile", "tiny", "--model", MODEL)
    try:
        urls = [read_until(proc.stdout, r"listening on (http://\S+)")[0].group(1) for _ in range(2)]
        yield urls
    finally:
        stop(proc)


def test_the_runner_itself_does_not_know_the_plugin() -> None:
    assert "cheapest_gpu" not in PLUGINS  # only the venv has the package and its entry point


def test_the_examples_own_tests_pass_once_installed(plugin_python: Path) -> None:
    done = subprocess.run(
        [plugin_python, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE / "tests")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout


def _config(tmp: Path, urls: list[str], prices: dict[str, float]) -> Path:
    cfg = {
        "discovery": {
            "static": {
                "endpoints": [
                    {"url": urls[0], "labels": {LABEL: "h100"}},
                    {"url": urls[1], "labels": {LABEL: "l4"}},
                ]
            }
        },
        "scrape": {"intervalMs": 50},
        "proxy": {"debugHeaders": True},
        "scheduling": {
            "defaultProfile": "cheap",
            "plugins": [
                {"type": "cheapest_gpu", "name": "gpu_cost", "weight": 10, "params": {"prices": prices}}
            ],
            # no freshness filter: a scrape that lags on a loaded machine must not decide the pod
            "profiles": {
                "cheap": {
                    "weights": {"queue": 1, "inflight": 1},
                    "plugins": ["gpu_cost"],
                    "filters": ["model", "healthy"],
                }
            },
        },
    }
    path = tmp / f"gateway-{len(list(tmp.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _pods_serving(python: Path, config: Path, n: int) -> set[str]:
    proc = fleetgate("gateway", "--config", str(config), "--port", "0", python=python)
    try:
        m, _ = read_until(proc.stderr, r"listening on http://127\.0\.0\.1:(\d+)")
        with httpx.Client(base_url=f"http://127.0.0.1:{m.group(1)}", timeout=10) as c:
            eventually_sync(lambda: c.get("/ready").status_code == 200, within=30, what="gateway ready")
            served = set()
            for i in range(n):
                r = c.post(
                    "/v1/chat/completions",
                    json={
                        "model": MODEL,
                        "messages": [{"role": "user", "content": f"q{i}"}],
                        "max_tokens": 2,
                    },
                )
                assert r.status_code == 200, r.text
                served.add(r.headers["x-fleetgate-pod"])
        assert stop(proc) == 0
        return served
    finally:
        stop(proc)


@pytest.mark.parametrize(
    ("prices", "cheap_gpu"), [({"h100": 4.0, "l4": 0.8}, "l4"), ({"h100": 0.5, "l4": 0.8}, "h100")]
)
def test_gateway_cli_routes_by_the_installed_plugins_params(
    plugin_python: Path, sim_urls: list[str], tmp_path: Path, prices: dict[str, float], cheap_gpu: str
) -> None:
    endpoints = endpoints_from_static(
        StaticDiscovery(
            endpoints=[
                StaticEndpoint(url=u, labels={LABEL: g})
                for u, g in zip(sim_urls, ["h100", "l4"], strict=True)
            ]
        )
    )
    expected = {e.name for e in endpoints if e.labels[LABEL] == cheap_gpu}
    assert _pods_serving(plugin_python, _config(tmp_path, sim_urls, prices), 8) == expected


def test_without_the_package_the_gateway_names_the_unknown_plugin(
    sim_urls: list[str], tmp_path: Path
) -> None:
    proc = fleetgate("gateway", "--config", str(_config(tmp_path, sim_urls, {"l4": 1.0})), "--port", "0")
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert "scheduling.plugins[0].type" in err and "cheapest_gpu" in err and "fleetgate.plugins" in err
