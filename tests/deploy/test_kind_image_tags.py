"""deploy/kind/lib.sh tags the image by its content, so a re-run after a code change deploys a new
tag. Run with a stand-in `docker` on PATH (a unit test of the shell functions: no engine here)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "deploy" / "kind" / "lib.sh"


def _content_tag(tmp_path: Path, image_id: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "docker"
    fake.write_text(f'#!/usr/bin/env bash\n[ "$1 $2" = "image inspect" ] && echo "{image_id}"\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FLEETGATE_KIND_STATE": str(tmp_path)}
    return subprocess.run(
        ["bash", "-c", f'source "{LIB}"; content_tag fleetgate:kind-build'],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_tag_is_the_image_content_digest(tmp_path: Path) -> None:
    a = _content_tag(tmp_path, "sha256:" + "ab" * 32)
    b = _content_tag(tmp_path, "sha256:" + "cd" * 32)
    assert a.returncode == 0, a.stderr
    assert a.stdout == "fleetgate:kind-" + "ab" * 6
    assert b.stdout == "fleetgate:kind-" + "cd" * 6 != a.stdout


def test_a_strange_id_is_refused(tmp_path: Path) -> None:
    bad = _content_tag(tmp_path, "not-an-id")
    assert bad.returncode != 0 and "unexpected image id" in bad.stderr


def test_images_load_as_an_archive_not_with_load_docker_image() -> None:
    """kind's `load docker-image` fails on Docker's containerd image store (kubernetes-sigs/kind#3795)."""
    text = LIB.read_text() + (LIB.parent / "up.sh").read_text()
    assert "kind load image-archive" in text and "kind load docker-image" not in text
    assert "--build-arg BASE_IMAGE=" in text
