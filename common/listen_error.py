"""The error a server raises when it cannot bind its port: one line that names the address.

`OSError("[Errno 98] Address already in use")` does not say which of a gateway's ports (HTTP,
ext_proc) or which simulated pod was taken; an operator needs `cannot listen on HOST:PORT: ...`.
It stays an `OSError` with `errno`/`strerror`, so callers that test those keep working.
"""

from __future__ import annotations

import errno


class ListenError(OSError):
    def __init__(self, host: str, port: int, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @classmethod
    def grpc(cls, host: str, port: int, what: str, *, tls: bool = False) -> ListenError:
        """grpc reports a failed bind as a RuntimeError with no errno or reason."""
        reason = f"the {what} could not bind it (port in use" + (
            ", or a TLS key and cert that do not match)" if tls else ")"
        )
        return cls(host, port, OSError(errno.EADDRINUSE, reason))

    def __str__(self) -> str:
        reason = (self.strerror or "").strip() or "unknown error"
        return f"cannot listen on {self.address}: {reason[0].lower()}{reason[1:]}"
