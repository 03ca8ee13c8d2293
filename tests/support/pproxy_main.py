"""``python pproxy_main.py ARGS``: pproxy's command line on asyncio's own event loop.

pproxy switches to uvloop whenever uvloop is importable, then asks for the current event
loop, which uvloop's policy does not create (nor does asyncio's own from Python 3.14), so
the proxy never starts. Here its import of uvloop fails as if it were not installed, and
a current loop exists before pproxy asks for one.
"""

from __future__ import annotations

import asyncio
import sys

sys.modules["uvloop"] = None  # type: ignore[assignment]  # pproxy: "uvloop is not installed"
asyncio.set_event_loop(asyncio.new_event_loop())

from pproxy.server import main  # noqa: E402

main(sys.argv[1:])
