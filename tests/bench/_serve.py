"""Shared by tests/bench/stdio_ack.py and tests/bench/clients.py: a LAMBO_HOME with the
real MiniLM imported, and a `lambo serve` subprocess spoken to in raw JSON-RPC lines.

Raw lines (no MCP SDK client) keep the client's own cost per call in the tens of
microseconds, so a measured round trip is the serve's. Every read is bounded by a
timeout (``select`` on the pipe, our own line buffer), so a stuck serve fails the
bench instead of hanging it.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lambo_core.embed.importer import import_model  # noqa: E402
from tests.embed_fixtures import minilm_source_dir  # noqa: E402

CALL_TIMEOUT_S = 60.0


def make_home(root: Path) -> Path:
    """``root/home`` as a LAMBO_HOME with MiniLM imported and configured (one thread),
    the same steps as the e2e ``served_home`` fixture."""
    home = root / "home"
    import_model(
        minilm_source_dir(root / "minilm-src"),
        "minilm",
        home / "cache" / "models",
        pooling="mean",
    )
    config = home / "config" / "lambo.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[embedder]\nmodel = "minilm"\nthreads = 1\n')
    return home


def lambo_argv() -> list[str]:
    """The installed console script when present, else the checkout's lambo.py."""
    script = Path(sys.executable).parent / "lambo"
    if script.exists():
        return [str(script)]
    return [sys.executable, str(ROOT / "lambo.py")]


def profiled_argv(session: str, store: Path, out: Path) -> list[str]:
    """`lambo serve` under cProfile (the event-loop thread, where acks are admitted and
    answered); the profile is written to ``out`` when the serve stops cleanly."""
    code = (
        "import cProfile, sys\n"
        "from lambo_core.cli import main\n"
        "p = cProfile.Profile()\n"
        "p.enable()\n"
        "try:\n"
        "    rc = main(sys.argv[1:])\n"
        "finally:\n"
        "    p.disable()\n"
        "    p.dump_stats(OUT)\n"
        "sys.exit(rc)\n"
    ).replace("OUT", repr(str(out)))
    return [sys.executable, "-c", code, "serve", "--session", session, "--store", str(store)]


def serve_env(home: Path, log_level: str = "WARNING") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAMBO_")}
    env["LAMBO_HOME"] = str(home)
    env["LAMBO_LOG"] = log_level
    return env


class ServeError(RuntimeError):
    pass


class RawServe:
    """One `lambo serve` process; ``call`` sends a tools/call line and reads its answer."""

    def __init__(
        self,
        home: Path,
        store: Path,
        session: str,
        *,
        name: str = "serve",
        argv: list[str] | None = None,
    ) -> None:
        cmd = argv or [*lambo_argv(), "serve", "--session", session, "--store", str(store)]
        self.name = name
        self.stderr_path = home / f"{name}.stderr"
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=serve_env(home),
            cwd=home,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in = self.proc.stdin
        self._fd = self.proc.stdout.fileno()
        self._buf = bytearray()
        self.next_id = 0
        self.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "lambo-bench", "version": "1"},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    @property
    def pid(self) -> int:
        return self.proc.pid

    # -- raw lines -------------------------------------------------------------------------
    def send(self, message: dict[str, Any]) -> None:
        self._in.write(json.dumps(message).encode() + b"\n")
        self._in.flush()

    def read(self, timeout: float = CALL_TIMEOUT_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            end = self._buf.find(b"\n")
            if end >= 0:
                line = bytes(self._buf[:end])
                del self._buf[: end + 1]
                return dict(json.loads(line))
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServeError(f"{self.name}: no answer within {timeout:.0f} s")
            ready, _, _ = select.select([self._fd], [], [], left)
            if ready:
                chunk = os.read(self._fd, 1 << 16)
                if not chunk:
                    raise ServeError(f"{self.name}: serve closed its stdout ({self.tail()})")
                self._buf += chunk

    def request(
        self, method: str, params: dict[str, Any], timeout: float = CALL_TIMEOUT_S
    ) -> dict[str, Any]:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            message = self.read(timeout)
            if message.get("id") == self.next_id:
                return message

    def call(
        self, tool: str, arguments: dict[str, Any], timeout: float = CALL_TIMEOUT_S
    ) -> dict[str, Any]:
        reply = self.request("tools/call", {"name": tool, "arguments": arguments}, timeout)
        if "result" not in reply:
            raise ServeError(f"{self.name}: {tool} answered {reply}")
        result = reply["result"]
        if result.get("isError"):
            raise ServeError(f"{self.name}: {tool} refused: {result}")
        return dict(result["structuredContent"])

    # -- helpers ---------------------------------------------------------------------------
    def stats(self, agent: str = "bench", **extra: Any) -> dict[str, Any]:
        return self.call("lambo_stats", {"agent_id": agent, **extra})

    def wait_ready(self, timeout: float = 180.0) -> dict[str, Any]:
        """Until the hub's embedder has loaded (stats go to the hub, forwarded or not)."""
        deadline = time.monotonic() + timeout
        while True:
            stats = self.stats()
            if stats["embedder_state"] == "ready":
                return stats
            if stats["embedder_state"] in ("failed", "missing"):
                raise ServeError(f"{self.name}: embedder {stats['embedder_state']}")
            if time.monotonic() > deadline:
                raise ServeError(f"{self.name}: embedder not ready within {timeout:.0f} s")
            time.sleep(0.2)

    def wait_concepts(self, total: int, timeout: float = 600.0, poll: float = 0.1) -> float:
        """Poll concept_count until it reaches ``total``; the monotonic time it did."""
        deadline = time.monotonic() + timeout
        idle_since = time.monotonic()
        while True:
            stats = self.stats()
            if stats["concept_count"] >= total:
                return time.monotonic()
            idle = stats["write_queue_outstanding"] == 0
            if time.monotonic() > deadline or (idle and time.monotonic() > idle_since + 5):
                raise ServeError(
                    f"{self.name}: {stats['concept_count']} of {total} concepts "
                    f"(outstanding {stats['write_queue_outstanding']}, "
                    f"applied {stats['write_queue_applied']}; writes merged?)"
                )
            if not idle:
                idle_since = time.monotonic()
            time.sleep(poll)

    def peak_rss_kib(self) -> int:
        """VmHWM of the serve process (its peak resident set), in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise ServeError(f"{self.name}: no VmHWM in /proc/{self.pid}/status")

    def tail(self, n: int = 5) -> str:
        try:
            lines = self.stderr_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return " | ".join(lines[-n:])

    def close(self, timeout: float = 60.0) -> None:
        """EOF on stdin (a clean stop), then terminate, then kill: never left running."""
        with contextlib.suppress(OSError):
            self._in.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._stderr.close()


class Window:
    """Client-side flow control: at most ``size`` of this client's writes outstanding.

    Before a send, while ``size`` receipts are held, the oldest is waited for
    (``lambo_stats`` with ``receipt`` + ``wait_ms``, untimed by the caller). A receipt
    leaves only once settled, so the client's outstanding writes never exceed ``size``:
    with every client's window summed under the server's 1024 bound (and each agent's
    share under 64) no write is dropped.
    """

    def __init__(self, serve: RawServe, size: int) -> None:
        self.serve = serve
        self.size = size
        self.held: collections.deque[tuple[str, str]] = collections.deque()
        self.waits = 0
        self.wait_s = 0.0

    def make_room(self) -> None:
        while len(self.held) >= self.size:
            self.settle_oldest()

    def add(self, agent: str, receipt: str) -> None:
        self.held.append((agent, receipt))

    def settle_oldest(self, timeout: float = 300.0) -> None:
        agent, receipt = self.held.popleft()
        began = time.monotonic()
        deadline = began + timeout
        while True:
            stats = self.serve.stats(agent, receipt=receipt, wait_ms=30000)
            state = stats["receipt"]["state"]
            if state not in ("pending", "pending_replay"):
                break
            if time.monotonic() > deadline:
                raise ServeError(f"{self.serve.name}: receipt {receipt} still {state}")
        self.waits += 1
        self.wait_s += time.monotonic() - began


# -- numbers -------------------------------------------------------------------------------
SUBJECTS = ["The deploy job", "Alice", "The billing service", "Our parser", "The nightly backup"]
VERBS = ["failed again because", "was rewritten after", "now waits until", "stopped when"]
ENDS = [
    "the disk filled up on the build machine",
    "the team moved the database to another region",
    "a config file pointed at the old cluster",
    "the cache was cleared during the release",
]


def sentence(i: int) -> str:
    """A distinct concept-like sentence; the trailing id keeps keys (and merges) apart."""
    s = SUBJECTS[i % len(SUBJECTS)]
    v = VERBS[(i // len(SUBJECTS)) % len(VERBS)]
    e = ENDS[(i // (len(SUBJECTS) * len(VERBS))) % len(ENDS)]
    return f"{s} {v} {e} (case {i})"


def derive_args(agent: str, text: str) -> dict[str, Any]:
    return {"agent_id": agent, "concepts": [{"content": text, "concept_type": "logic"}]}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(samples: list[float], q: float) -> str:
    return f"{percentile(samples, q) * 1000:.3f}"


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])
