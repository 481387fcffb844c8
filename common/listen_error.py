"""The error a server raises when it cannot bind its port: one line that names the address.

`OSError("[Errno 98] Address already in use")` does not say which of a gateway's ports (HTTP,
ext_proc) or which simulated pod was taken; an operator needs `cannot listen on HOST:PORT: ...`.
It stays an `OSError` with `errno`/`strerror`, so callers that test those keep working.
"""

from __future__ import annotations


class ListenError(OSError):
    def __init__(self, host: str, port: int, cause: OSError) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def __str__(self) -> str:
        reason = (self.strerror or "").strip() or "unknown error"
        return f"cannot listen on {self.address}: {reason[0].lower()}{reason[1:]}"
