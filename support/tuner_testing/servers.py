"""An ASGI app served on loopback in a thread, for tests that need a real HTTP peer."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def loopback_app(app: Any) -> Iterator[str]:
    """Serve an aiohttp `web.Application` on a free 127.0.0.1 port, in its own thread and
    event loop, for the block; yields its base URL. For tests of the client against servers
    that misbehave in ways `tuner sim serve` does not."""
    from aiohttp import web  # only the client tests need it

    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
