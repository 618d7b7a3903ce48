"""Where an interrupted import resumes: a small JSON file under the data dir, keyed on the
file's identity (the SHA-256 of its bytes, so a pipe on stdin resumes too), the session and
the store. It holds the last line N such that every line up to N has settled, what each id
of the file became, and the counts so far. Written atomically; removed once the import ends.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHECKPOINT_VERSION = 1


def checkpoint_path(directory: Path, data: bytes, session: str, store: str) -> Path:
    digest = hashlib.sha256()
    digest.update(hashlib.sha256(data).digest())
    digest.update(b"\0" + session.encode() + b"\0" + store.encode())
    return directory / f"{digest.hexdigest()[:32]}.json"


@dataclass
class Checkpoint:
    path: Path
    done_through: int = 0
    landed: dict[str, list[str]] = field(default_factory=dict)  # id -> [node, text, type]
    counts: dict[str, int] = field(default_factory=dict)
    refused: list[list[Any]] = field(default_factory=list)  # [line, reason]

    @classmethod
    def load(cls, path: Path) -> Checkpoint:
        """The saved checkpoint, or a fresh one (also for an unreadable file: a resume
        that cannot be trusted starts over, and merging makes the re-sent lines matched)."""
        try:
            raw = json.loads(path.read_text("utf-8"))
            if raw.get("version") != CHECKPOINT_VERSION:
                return cls(path)
            return cls(
                path,
                int(raw["done_through"]),
                {str(k): [str(x) for x in v] for k, v in raw["landed"].items()},
                {str(k): int(v) for k, v in raw["counts"].items()},
                [[int(n), str(r)] for n, r in raw["refused"]],
            )
        except (OSError, ValueError, KeyError, TypeError):
            return cls(path)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = {
            "version": CHECKPOINT_VERSION,
            "done_through": self.done_through,
            "landed": self.landed,
            "counts": self.counts,
            "refused": self.refused,
        }
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(body, ensure_ascii=False), "utf-8")
        os.replace(temporary, self.path)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
