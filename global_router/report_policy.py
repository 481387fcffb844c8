"""What a cluster's capacity report may claim: a pinned gateway URL and plausible numbers.

Why: an agent token is a routing credential. Without pins, whoever holds one could point the
cluster's share of live traffic (prompts included) at any URL, the cloud metadata service or the
router itself, or claim 4 billion requests of headroom and pull the whole fleet's traffic. Every
report passes `check()` before it reaches the fleet view; a refused one changes no routing.

Rules, in order (the first broken one is the refusal's reason):
1. `gateway_url` is a plain http(s) URL: no user:password@, no query or fragment, a valid port,
   and a hostname that is not a disguised IP (`2130706433`, `0x7f.1`).
2. Its address class: link-local and cloud metadata addresses/names, unspecified and multicast
   addresses are always refused; loopback (127/8, ::1, localhost) only with `allowLoopback`.
3. Not one of the router's own listeners (HTTP, capacity gRPC, Redis).
4. The pin: equal to one of `gatewayUrls` or with a host matching one of `gatewayHosts`.
5. Plausibility caps from `capacity.limits` (e.g. headroom <= ready pods x maxHeadroomPerPod).
Hostnames are not resolved here (that would race DNS and cost a lookup per report): pin names the
operator controls, and the address-class rules catch literal addresses.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from common.config.loader import ConfigError
from common.config.router import AgentAuth, ReportLimits
from common.proto.fleetgate.v1 import capacity_pb2

# Cloud metadata endpoints (AWS/GCP/Azure/OpenStack 169.254.169.254, AWS IPv6, Alibaba, Oracle).
_METADATA_IPS = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200", "192.0.0.192")
)
_METADATA_NAMES = frozenset(
    {"metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal"}
)
_WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


class PolicyRefusal(ValueError):
    """A report the policy refuses; `reason` labels the metric, the message goes to the agent."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class _Url:
    scheme: str
    host: str  # lower-case, IPv6 without brackets
    port: int
    path: str

    @classmethod
    def parse(cls, raw: str) -> _Url:
        u = urlsplit(raw)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise PolicyRefusal("bad_url", f"gateway_url {raw!r} is not an http(s) URL")
        if u.username is not None or u.password is not None:
            raise PolicyRefusal("bad_url", "gateway_url must not carry user:password@")
        if u.query or u.fragment:
            raise PolicyRefusal("bad_url", "gateway_url must not carry a query or fragment")
        try:
            port = u.port
        except ValueError:
            raise PolicyRefusal("bad_url", "gateway_url has an invalid port") from None
        default = 443 if u.scheme == "https" else 80
        return cls(u.scheme, u.hostname.lower(), port or default, u.path.rstrip("/"))


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _disguised_ip(host: str) -> bool:
    """True for legacy numeric forms that resolvers turn into an address (`2130706433`, `0x7f.1`)."""
    if _ip(host) is not None:
        return False
    try:
        socket.inet_aton(host)
    except OSError:
        return False
    return True


def is_loopback_host(host: str) -> bool:
    ip = _ip(host)
    if ip is not None:
        return ip.is_loopback
    return host == "localhost" or host.endswith(".localhost")


def _address_class_refusal(host: str, allow_loopback: bool) -> str | None:
    if _disguised_ip(host):
        return f"gateway host {host!r} is a non-canonical IP address"
    if host.rstrip(".") in _METADATA_NAMES:
        return f"gateway host {host!r} is a cloud metadata service"
    ip = _ip(host)
    if ip is not None:
        if ip in _METADATA_IPS:
            return f"gateway address {host} is a cloud metadata service"
        if ip.is_link_local:
            return f"gateway address {host} is link-local"
        if ip.is_unspecified or ip.is_multicast:
            return f"gateway address {host} is not a unicast address"
    if is_loopback_host(host) and not allow_loopback:
        return f"gateway host {host!r} is loopback (set allowLoopback for this agent to allow it)"
    return None


def local_addresses() -> frozenset[str]:
    """This machine's own addresses (best effort), to spot reports naming a wildcard-bound router."""
    out: set[str] = set()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None):
            out.add(str(info[4][0]).lower())
    except OSError:
        pass
    return frozenset(out)


class _Pin:
    def __init__(self, agent: AgentAuth, index: int) -> None:
        self.allow_loopback = agent.allow_loopback
        self.urls: set[_Url] = set()
        for j, raw in enumerate(agent.gateway_urls):
            try:
                self.urls.add(_Url.parse(raw))
            except PolicyRefusal as exc:
                raise ConfigError(f"capacity.agents[{index}].gatewayUrls[{j}]: {exc}") from None
        self.hosts = [h.lower() for h in agent.gateway_hosts]

    def allows(self, url: _Url) -> bool:
        return url in self.urls or any(fnmatch.fnmatchcase(url.host, p) for p in self.hosts)

    def describe(self) -> str:
        urls = sorted(f"{u.scheme}://{u.host}:{u.port}{u.path}" for u in self.urls)
        return ", ".join([*urls, *(f"host {h}" for h in self.hosts)])


class ReportPolicy:
    """Per-cluster pins and fleet-wide plausibility caps; `check()` raises PolicyRefusal."""

    def __init__(
        self,
        agents: Sequence[AgentAuth],
        limits: ReportLimits,
        *,
        own_addresses: Iterable[tuple[str, int]] = (),
        local_ips: frozenset[str] | None = None,
    ) -> None:
        self.limits = limits
        self._pins: dict[str, _Pin] = {}
        for i, agent in enumerate(agents):
            pin = _Pin(agent, i)
            prev = self._pins.get(agent.cluster_id)
            if prev is not None:  # several entries for one cluster (token rotation): union of pins
                prev.urls |= pin.urls
                prev.hosts += pin.hosts
                prev.allow_loopback = prev.allow_loopback or pin.allow_loopback
            else:
                self._pins[agent.cluster_id] = pin
        self._own: list[tuple[str, int]] = [(h.lower().strip("[]"), p) for h, p in own_addresses]
        self._local_ips = local_ips if local_ips is not None else local_addresses()

    def add_own_address(self, host: str, port: int) -> None:
        """Listeners known only after binding (port 0 in tests)."""
        self._own.append((host.lower().strip("[]"), port))

    def _is_own(self, url: _Url) -> bool:
        for host, port in self._own:
            if port != url.port:
                continue
            if url.host == host:
                return True
            if host in _WILDCARD_HOSTS and (is_loopback_host(url.host) or url.host in self._local_ips):
                return True
            if is_loopback_host(host) and is_loopback_host(url.host):
                return True
        return False

    def check(self, cluster_id: str, report: capacity_pb2.CapacityReport) -> None:
        self.check_url(cluster_id, report.gateway_url)
        self.check_numbers(report)

    def check_url(self, cluster_id: str, raw: str) -> None:
        url = _Url.parse(raw)
        pin = self._pins.get(cluster_id)
        if pin is None:  # authenticated but unconfigured cannot happen; refuse rather than trust
            raise PolicyRefusal("unpinned", f"cluster {cluster_id!r} has no pinned gateway")
        refusal = _address_class_refusal(url.host, pin.allow_loopback)
        if refusal is not None:
            raise PolicyRefusal("forbidden_address", refusal)
        if self._is_own(url):
            raise PolicyRefusal("forbidden_address", "gateway_url points at the router's own listener")
        if not pin.allows(url):
            raise PolicyRefusal(
                "unpinned_url",
                f"gateway_url {raw!r} is not pinned for cluster {cluster_id!r} (allowed: {pin.describe()}); "
                "fix the gateway's publicUrl or the router's capacity.agents[].gatewayUrls",
            )

    def check_numbers(self, report: capacity_pb2.CapacityReport) -> None:
        lim = self.limits
        if len(report.models) > lim.max_models:
            raise PolicyRefusal(
                "implausible", f"{len(report.models)} models exceed maxModels {lim.max_models}"
            )
        for i, m in enumerate(report.models):
            pods = m.ready_pods
            if pods > lim.max_ready_pods:
                raise PolicyRefusal(
                    "implausible", f"models[{i}].ready_pods {pods} exceeds maxReadyPods {lim.max_ready_pods}"
                )
            if m.headroom_requests > pods * lim.max_headroom_per_pod:
                raise PolicyRefusal(
                    "implausible",
                    f"models[{i}].headroom_requests {m.headroom_requests} exceeds ready_pods x "
                    f"maxHeadroomPerPod ({pods} x {lim.max_headroom_per_pod})",
                )
            if m.running > pods * lim.max_running_per_pod:
                raise PolicyRefusal(
                    "implausible",
                    f"models[{i}].running {m.running} exceeds ready_pods x maxRunningPerPod "
                    f"({pods} x {lim.max_running_per_pod})",
                )
            if m.tokens_per_second > pods * lim.max_tokens_per_second_per_pod:
                raise PolicyRefusal(
                    "implausible",
                    f"models[{i}].tokens_per_second exceeds ready_pods x maxTokensPerSecondPerPod",
                )
            if m.gpu_tokens_per_second > lim.max_tokens_per_second_per_pod:
                raise PolicyRefusal(
                    "implausible", f"models[{i}].gpu_tokens_per_second exceeds maxTokensPerSecondPerPod"
                )
            n_adapters = max(len(m.adapters_resident), len(m.adapters_available))
            if n_adapters > lim.max_adapters:
                raise PolicyRefusal(
                    "implausible", f"models[{i}] lists {n_adapters} adapters (maxAdapters {lim.max_adapters})"
                )
