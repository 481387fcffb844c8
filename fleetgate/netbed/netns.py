"""Network namespaces and veth pairs for the test bed, made and removed with `ip` (needs root).

Every name carries the run's tag `fgtb-<pid>-<hex>`, so parallel runs never collide and a later run
can remove what a killed one left behind (its pid is gone). Veth pairs are created from inside the
hub namespace straight into their peer namespace: no link, address or route of the host's own
namespace is ever touched, and the test addresses exist only inside the namespaces made here.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path

PREFIX = "fgtb-"
_TAG = re.compile(rf"^{PREFIX}(\d+)-[0-9a-f]+-")


class NetnsError(RuntimeError):
    """An `ip` command failed; the message has its stderr."""


def ip(*args: str, timeout_s: float = 10.0) -> str:
    try:
        done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetnsError(f"ip {' '.join(args)}: {exc}") from None
    if done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done.stdout


def unavailable_reason() -> str | None:
    """Why namespaces cannot be made here (the suite skips with it), or None when they can."""
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}-probe"
    try:
        ip("netns", "add", probe)
    except NetnsError as exc:
        return f"`ip netns add` failed: {exc}"
    with contextlib.suppress(NetnsError):
        ip("netns", "del", probe)
    return None


def remove_orphans() -> list[str]:
    """Delete test-bed namespaces whose creating process is gone (a run killed before teardown)."""
    removed = []
    for line in ip("netns", "list").splitlines():
        name = line.split()[0] if line.strip() else ""
        m = _TAG.match(name)
        if m is None or _alive(int(m.group(1))):
            continue
        with contextlib.suppress(NetnsError):
            ip("netns", "del", name)
            removed.append(name)
    for path in Path(tempfile.gettempdir()).glob(f"{PREFIX}*"):  # the dead runs' Unix-socket dirs
        m = _TAG.match(path.name + "-")
        if m is not None and path.is_dir() and not _alive(int(m.group(1))):
            shutil.rmtree(path, ignore_errors=True)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Namespaces:
    """The namespaces of one test-bed run: a hub (`wan`) plus leaves, each wired to the hub by one veth.

    Leaf i's pair is the subnet 10.250.<i>.0/24: `.1` on the hub side, `.2` inside the leaf. The hub
    does not forward IP, so the only way between leaves is through a relay process in the hub.
    """

    def __init__(self, reserved_ports: str = "") -> None:
        """`reserved_ports` (sysctl syntax, e.g. "6379,50051-50066"): the fixed ports the run's
        servers bind. They are kept out of every namespace's ephemeral range: otherwise an outgoing
        connection of one process (a router's Redis client) can take, say, 50052 as its source port
        before its neighbour binds 50052 to listen, and the neighbour fails with "address in use"."""
        self.tag = f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}"
        self.hub = f"{self.tag}-wan"
        self.reserved_ports = reserved_ports
        self.created: list[str] = []

    def name(self, leaf: str) -> str:
        return f"{self.tag}-{leaf}"

    def _add(self, ns: str) -> None:
        ip("netns", "add", ns)
        self.created.append(ns)
        ip("-n", ns, "link", "set", "lo", "up")
        if self.reserved_ports:
            self.sysctl(ns, f"net.ipv4.ip_local_reserved_ports={self.reserved_ports}")

    def sysctl(self, ns: str, setting: str) -> None:
        """Set a per-namespace sysctl inside `ns` (the host's value is untouched)."""
        ip("netns", "exec", ns, "sysctl", "-qw", setting)

    def create_hub(self) -> None:
        self._add(self.hub)
        # no forwarding in the hub: leaves reach each other through relays only
        self.sysctl(self.hub, "net.ipv4.ip_forward=0")

    def add_leaf(self, leaf: str, subnet: int) -> tuple[str, str]:
        """Make namespace `leaf` on 10.250.<subnet>.0/24; returns (hub-side IP, leaf-side IP)."""
        if not 0 <= subnet <= 255:
            raise ValueError(f"subnet {subnet} out of range")
        ns = self.name(leaf)
        self._add(ns)
        hub_if = f"v{subnet}"
        ip("-n", self.hub, "link", "add", hub_if, "type", "veth", "peer", "name", "eth0", "netns", ns)
        hub_ip, leaf_ip = f"10.250.{subnet}.1", f"10.250.{subnet}.2"
        ip("-n", self.hub, "addr", "add", f"{hub_ip}/24", "dev", hub_if)
        ip("-n", ns, "addr", "add", f"{leaf_ip}/24", "dev", "eth0")
        ip("-n", self.hub, "link", "set", hub_if, "up")
        ip("-n", ns, "link", "set", "eth0", "up")
        return hub_ip, leaf_ip

    def exec_argv(self, ns: str, argv: list[str]) -> list[str]:
        """`argv` run inside namespace `ns` (`ip netns exec` execs it: the child's pid is argv's)."""
        return ["ip", "netns", "exec", ns, *argv]

    def delete_all(self) -> list[str]:
        """Remove every namespace of this run (their veths go with them); returns failures."""
        failed = []
        for ns in reversed(self.created):
            try:
                ip("netns", "del", ns)
            except NetnsError as exc:
                failed.append(str(exc))
        self.created.clear()
        return failed
