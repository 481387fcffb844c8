"""`python -m common.wanrelay --control PATH`: host WAN links until SIGTERM (links are added by command)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal

from common.wanrelay.control import Relays, serve_control


async def _main(control: str) -> None:
    relays = Relays()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(control)
    server = await serve_control(relays, control)
    print(f"wan relay control listening on {control}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        server.close()
        await relays.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m common.wanrelay", description=__doc__)
    parser.add_argument("--control", required=True, metavar="PATH", help="Unix socket for commands")
    args = parser.parse_args()
    asyncio.run(_main(args.control))


if __name__ == "__main__":
    main()
