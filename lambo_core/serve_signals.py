"""How a serve process meets a stop signal and ends: cleanly before it serves, by a stop
event while it serves, and without the interpreter's teardown after a stop that left a
thread inside onnxruntime."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys

import anyio

log = logging.getLogger(__name__)

#: the signals a serve stops cleanly on (a client's SIGTERM, Ctrl-C, a closed terminal)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def exit_without_teardown(code: int) -> None:
    """End the process now, its output and log flushed, skipping the interpreter's teardown
    (which would destroy onnxruntime under a thread still inside it)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def exit_cleanly_until_serving() -> None:
    """A stop signal before the serve is running (it is still importing, reading its
    config) ends the process with 0: nothing was acked yet, so there is nothing to hand
    on. ``serve_stdio`` takes the signals over once it serves."""

    def leave(signum: int, frame: object) -> None:
        log.info("%s before serving: nothing was acked yet; stopping", signal.Signals(signum).name)
        raise SystemExit(0)

    for signum in STOP_SIGNALS:
        signal.signal(signum, leave)


async def stop_on_signal(stop: anyio.Event) -> None:
    with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async for signum in signals:
            if not stop.is_set():
                log.info("%s: stopping cleanly", signal.Signals(signum).name)
                stop.set()
