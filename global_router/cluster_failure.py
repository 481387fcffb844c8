"""Which gateway answers are the cluster's fault (counted toward ejection) and which may be retried.

A gateway that answers 401/403 cannot authenticate the router's hop (a rotated secret, a broken
deployment), 404 no longer serves what its report said, 408/5xx is failing or overloaded: each is
that cluster's failure, so enough of them in a row eject it, whether or not its capacity reports
still look fine. A 400/422 is the model server judging the client's request: the cluster works, and
another cluster would say the same, so it is neither a failure nor retried. A 429 is the cluster
being full right now: retried elsewhere, not a health failure.
"""

from __future__ import annotations

_FAILURE_4XX = frozenset({401, 403, 404, 408})


def counts_as_cluster_failure(status: int) -> bool:
    """An HTTP status from a cluster gateway that counts as a failure of that cluster."""
    return status >= 500 or status in _FAILURE_4XX


def retry_elsewhere(status: int) -> bool:
    """Whether a status answered before the first byte reached the client moves the request on."""
    return status == 429 or counts_as_cluster_failure(status)
