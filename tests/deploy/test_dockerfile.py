"""The container image: multi-stage, non-root, no secrets baked in, `fleetgate` as the entrypoint.

No image can be built here (no registry, no daemon): the Dockerfile's structure is checked instead, and
a real build runs when a Docker daemon is reachable.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

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


def test_multi_stage_on_python_311_slim() -> None:
    froms = [args for word, args in _instructions() if word == "FROM"]
    assert len(froms) >= 2
    assert all(f.split()[0] == "python:3.11-slim" for f in froms)
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
    assert "pip install ." in runs


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


def test_image_builds_and_runs_as_non_root_when_docker_is_available() -> None:
    if not _docker_daemon():
        pytest.skip("no reachable Docker daemon (and base images cannot be pulled here)")
    build = subprocess.run(
        ["docker", "build", "-q", "-t", "fleetgate:test", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert build.returncode == 0, build.stderr
    who = subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "id", "fleetgate:test", "-u"],
        capture_output=True,
        text=True,
    )
    assert who.stdout.strip() == "10001"
    help_ = subprocess.run(["docker", "run", "--rm", "fleetgate:test"], capture_output=True, text=True)
    assert help_.returncode == 0 and "subcommands" in help_.stdout
