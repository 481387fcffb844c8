"""The container image: multi-stage, non-root, no secrets baked in, `fleetgate` as the entrypoint.

The Dockerfile's structure is checked everywhere; where a Docker engine runs, the image is built on a
base image already in that engine (no registry needed) and runs `fleetgate --help` and a gateway in
front of simulated pods on the host network.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    joined: list[str] = []
    buf = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        joined.append(buf + line)
        buf = ""
    out = []
    for line in joined:
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def _final_stage() -> list[tuple[str, str]]:
    ins = _instructions()
    last_from = max(i for i, (word, _) in enumerate(ins) if word == "FROM")
    return ins[last_from:]


def test_multi_stage_on_a_base_image_given_as_a_build_arg() -> None:
    ins = _instructions()
    (arg,) = [args for word, args in ins if word == "ARG" and args.startswith("BASE_IMAGE")]
    assert arg == "BASE_IMAGE=python:3.11-slim"
    first_from = next(i for i, (word, _) in enumerate(ins) if word == "FROM")
    assert ins.index(("ARG", arg)) < first_from, "an ARG used in FROM must come before the first FROM"
    froms = [args for word, args in ins if word == "FROM"]
    assert len(froms) >= 2
    assert all(f.split()[0] == "${BASE_IMAGE}" for f in froms)
    assert any("--from=build" in args for word, args in _final_stage() if word == "COPY")


def test_runs_as_non_root_uid_10001() -> None:
    users = [args for word, args in _final_stage() if word == "USER"]
    assert users, "final stage sets no USER"
    uid = users[-1].split(":")[0]
    assert uid == "10001"
    # nothing after USER switches back to root
    words = [w for w, _ in _final_stage()]
    assert "RUN" not in words[words.index("USER") :]


def test_entrypoint_is_fleetgate() -> None:
    (entry,) = [args for word, args in _final_stage() if word == "ENTRYPOINT"]
    assert json.loads(entry) == ["fleetgate"]


def test_installs_the_package_with_pip() -> None:
    runs = " ".join(args for word, args in _instructions() if word == "RUN")
    assert re.search(r"pip install \"?\.(\[[a-z,]+\])?\"?( |$)", runs), runs  # this checkout, with extras


def test_every_package_is_copied_into_the_build() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wanted = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = {
        shlex.split(args)[0] for word, args in _instructions() if word == "COPY" and "--from" not in args
    }
    assert wanted <= copied
    for src in copied:
        assert (ROOT / src).exists(), f"COPY of a missing path: {src}"


def test_no_secrets_in_the_image() -> None:
    text = DOCKERFILE.read_text().upper()
    for word, args in _instructions():
        if word in ("ENV", "ARG"):
            for bad in ("TOKEN", "PASSWORD", "SECRET", "API_KEY", "CREDENTIAL"):
                assert bad not in args.upper(), f"{word} {args}"
    assert ".ENV" not in text and ".PEM" not in text and "KUBECONFIG" not in text
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    for pattern in (".git", ".venv", ".env", "**/*.pem", "**/*.key", "**/*.tfvars", "**/kubeconfig*"):
        assert pattern in ignored


def _docker_daemon() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=20, check=False).returncode == 0


def _docker(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)


def _local_base() -> str:
    """A base image already in the local engine: FLEETGATE_TEST_BASE_IMAGE (e.g. one built from a
    Debian rootfs) or python:3.11-slim if it was pulled before. Nothing is pulled from a registry."""
    base = os.environ.get("FLEETGATE_TEST_BASE_IMAGE", "python:3.11-slim")
    if _docker("image", "inspect", base).returncode != 0:
        pytest.skip(f"base image {base} is not in the local Docker engine (set FLEETGATE_TEST_BASE_IMAGE)")
    return base


def _bound_url(container: str, pattern: re.Pattern[str], deadline_s: float = 60) -> str:
    """Wait (with a deadline) for the line a server logs with its bound address."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        logs = _docker("logs", container)
        m = pattern.search(logs.stdout + logs.stderr)
        if m:
            return m.group(1)
        state = _docker("inspect", "-f", "{{.State.Running}}", container).stdout.strip()
        assert state == "true", f"{container} exited: {logs.stdout[-2000:]}{logs.stderr[-2000:]}"
        time.sleep(0.2)
    raise AssertionError(f"{container} logged no bound address within {deadline_s} s")


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    if not _docker_daemon():
        pytest.skip("no reachable Docker daemon")
    base = _local_base()
    tag = "fleetgate:test"
    build = _docker(
        "build",
        "-q",
        "--network",
        "host",
        "--build-arg",
        f"BASE_IMAGE={base}",
        "-t",
        tag,
        str(ROOT),
        timeout=900,
    )
    assert build.returncode == 0, build.stderr
    yield tag


def test_image_runs_help_as_non_root(image: str) -> None:
    who = _docker("run", "--rm", "--entrypoint", "id", image, "-u")
    assert who.stdout.strip() == "10001"
    help_ = _docker("run", "--rm", "--read-only", image, "--help")
    assert help_.returncode == 0 and "gateway" in help_.stdout and "global-router" in help_.stdout


def test_image_serves_a_gateway_in_front_of_simulated_pods(image: str) -> None:
    """Both on the host network (loopback only), each on an ephemeral port it logs."""
    names = [f"fleetgate-test-sim-{os.getpid()}", f"fleetgate-test-gw-{os.getpid()}"]
    try:
        sim = _docker("run", "-d", "--rm", "--read-only", "--tmpfs", "/tmp", "--network", "host", "--name", names[0], image,
                      "sim", "--pods", "1", "--base-port", "0", "--host", "127.0.0.1")  # fmt: skip
        assert sim.returncode == 0, sim.stderr
        pod = _bound_url(names[0], re.compile(r"listening on (http://127\.0\.0\.1:\d+)"))
        gw = _docker("run", "-d", "--rm", "--read-only", "--tmpfs", "/tmp", "--network", "host", "--name", names[1],
                     image, "gateway", "--pods", pod, "--host", "127.0.0.1", "--port", "0")  # fmt: skip
        assert gw.returncode == 0, gw.stderr
        url = _bound_url(names[1], re.compile(r"listening on (http://127\.0\.0\.1:\d+)"))
        body = {
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4,
        }
        deadline = time.monotonic() + 60
        while True:  # the gateway is ready once it has scraped the pod
            with httpx.Client(timeout=30) as client:
                resp = client.post(f"{url}/v1/chat/completions", json=body)
            if resp.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert resp.status_code == 200, resp.text
        assert resp.json()["choices"][0]["message"]["content"]
    finally:
        for name in names:
            _docker("rm", "-f", name)
