"""A userspace WAN emulator: TCP relays with per-link latency, jitter, connection loss and partitions.

The kernels Fleetgate's tests run on may have no `netem` qdisc, so latency and partitions between
network namespaces are made by relaying each link's TCP connections through this process. One
process hosts every link of a test bed; a JSON-lines control socket (a Unix socket, reachable from
outside the namespaces) changes a link's behaviour while connections are live.
"""

from common.wanrelay.control import ControlClient, serve_control
from common.wanrelay.link import Impairment, Link, LinkStats, Partition

__all__ = ["ControlClient", "Impairment", "Link", "LinkStats", "Partition", "serve_control"]
