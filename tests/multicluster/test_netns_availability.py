"""Where namespaces cannot be made the suite skips with the reason: no iproute2, not root, or
`ip netns add` refused (e.g. in an unprivileged container)."""

from __future__ import annotations

import pytest

from fleetgate.netbed import netns


def test_no_ip_command_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns.shutil, "which", lambda _name: None)
    assert netns.unavailable_reason() == "the `ip` command (iproute2) is not installed"


def test_not_root_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns.shutil, "which", lambda _name: "/sbin/ip")
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    assert netns.unavailable_reason() == "network namespaces need root"


def test_refused_netns_add_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: str, timeout_s: float = 10.0) -> str:
        raise netns.NetnsError(f"ip {' '.join(args)}: Operation not permitted")

    monkeypatch.setattr(netns.shutil, "which", lambda _name: "/sbin/ip")
    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    monkeypatch.setattr(netns, "ip", refuse)
    reason = netns.unavailable_reason()
    assert reason is not None and reason.startswith("`ip netns add` failed") and "not permitted" in reason


def test_names_are_unique_per_run() -> None:
    a, b = netns.Namespaces(), netns.Namespaces()
    assert a.tag != b.tag and a.hub.startswith(netns.PREFIX) and a.name("c0") == f"{a.tag}-c0"
