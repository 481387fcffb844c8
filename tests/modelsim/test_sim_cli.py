"""`fleetgate sim`: one line per bound address, faults from flags, clean SIGTERM, clear config errors."""

from __future__ import annotations

import argparse
import re
import signal
from pathlib import Path

import httpx
import pytest

from common.config.loader import ConfigError
from modelsim.cli import add_arguments, build_specs
from tests.procs import fleetgate


def test_serves_pods_logs_addresses_and_stops_on_sigterm() -> None:
    proc = fleetgate("sim", "--pods", "2", "--base-port", "0", "--profile", "tiny", "--adapters", "x",
                     "--fault", "1:crash", "--metrics-format", "sglang")  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(2)]
        urls = [re.search(r"listening on (http://\S+)", ln).group(1) for ln in lines]  # type: ignore[union-attr]
        assert len(set(urls)) == 2
        r = httpx.post(urls[0] + "/v1/completions", json={"model": "x", "prompt": "hi", "max_tokens": 2})
        assert r.status_code == 200
        assert "sglang:num_running_reqs" in httpx.get(urls[0] + "/metrics").text
        try:
            httpx.get(urls[1] + "/health", timeout=2)
            raise AssertionError("pod 1 should refuse connections")
        except httpx.ConnectError:
            pass
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_bad_pod_spec_file_names_the_field(tmp_path: Path) -> None:
    spec = tmp_path / "pods.yaml"
    spec.write_text("pods:\n  - profile: tiny\n    maxLora: many\n")
    proc = fleetgate("sim", "--pod-spec", str(spec), "--base-port", "0")
    _, err = proc.communicate(timeout=20)
    assert proc.returncode != 0
    assert "pods[0].maxLora" in err

    spec.write_text("pods:\n  - profile: warp-drive\n")
    proc = fleetgate("sim", "--pod-spec", str(spec), "--base-port", "0")
    _, err = proc.communicate(timeout=20)
    assert proc.returncode != 0 and "warp-drive" in err


def test_heterogeneous_pod_spec_file(tmp_path: Path) -> None:
    spec = tmp_path / "pods.yaml"
    spec.write_text(
        "pods:\n"
        "  - {profile: tiny, replicas: 2, adapters: [a], preloadAdapters: [a]}\n"
        "  - {profile: tiny, metricsFormat: tgi, model: other-model}\n"
    )
    proc = fleetgate("sim", "--pod-spec", str(spec), "--base-port", "0")
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(3)]
        assert "metrics=tgi" in lines[2] and "other-model" in lines[2]
        url = re.search(r"listening on (http://\S+)", lines[2]).group(1)  # type: ignore[union-attr]
        assert "tgi_queue_size" in httpx.get(url + "/metrics").text
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0


def test_fault_flags_take_parameters() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    specs = build_specs(parser.parse_args(["--pods", "2", "--fault", "1:error:rate=0.25,status=503"]))
    assert specs[1].fault == "error" and specs[1].fault_params == {"rate": 0.25, "status": 503}
    with pytest.raises(ConfigError, match="rate=x"):
        build_specs(parser.parse_args(["--fault", "0:error:rate=x"]))
    with pytest.raises(ConfigError, match="status"):
        build_specs(parser.parse_args(["--fault", "0:error:status=200"]))
    with pytest.raises(ConfigError, match="I:MODE"):
        build_specs(parser.parse_args(["--pods", "1", "--fault", "3:crash"]))
