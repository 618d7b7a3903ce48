"""The session lease in PostgreSQL: one row per session in ``leases``.

``acquire`` is one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` statement, so two
serves on two machines racing for a session cannot both win: the loser's insert
waits on the row the winner wrote and then finds it live. The token grows on
every acquisition and never goes back (a release keeps the row, expired). The
fence every write checks reads this row ``FOR SHARE`` (``connection.py``). The
lease statements themselves are not fenced.
"""

from __future__ import annotations

from dataclasses import replace

from ...model import Lease
from .connection import Database

LEASE_COLUMNS = "session, holder, pid, agent, acquired_at, heartbeat_at, expires_at, token, socket"


def holder_host(holder: str) -> str:
    """The host of an ``agent@host#pid`` holder ("" when it names none)."""
    _, at, rest = holder.partition("@")
    return rest.rpartition("#")[0] or rest if at else ""


def _lease_from(row: tuple[object, ...]) -> Lease:
    return Lease(
        session=str(row[0]),
        holder=str(row[1]),
        pid=int(row[2]),  # type: ignore[call-overload]
        agent=str(row[3]),
        acquired_at=float(row[4]),  # type: ignore[arg-type]
        heartbeat_at=float(row[5]),  # type: ignore[arg-type]
        expires_at=float(row[6]),  # type: ignore[arg-type]
        token=int(row[7]),  # type: ignore[call-overload]
        socket=None if row[8] is None else str(row[8]),
    )


def acquire(db: Database, lease: Lease, now: float) -> Lease | None:
    """Take the lease if it is free, expired (expires_at <= now), or already the holder's;
    the stored lease (token = previous + 1, or 1), or None while another holds it."""
    rows = db.write(
        None,
        lambda cur: cur.execute(
            "INSERT INTO leases(session, token, holder, agent, pid, host, socket, acquired_at, "
            "heartbeat_at, expires_at) VALUES (%s, 1, %s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (session) DO UPDATE SET token = leases.token + 1, "
            "holder = excluded.holder, agent = excluded.agent, pid = excluded.pid, "
            "host = excluded.host, socket = excluded.socket, "
            "acquired_at = excluded.acquired_at, heartbeat_at = excluded.heartbeat_at, "
            "expires_at = excluded.expires_at "
            "WHERE leases.holder = excluded.holder OR leases.expires_at <= %s "
            "RETURNING token",
            (lease.session, lease.holder, lease.agent, lease.pid, holder_host(lease.holder),
             lease.socket, lease.acquired_at, lease.heartbeat_at, lease.expires_at, now),
        ).fetchall(),
    )  # fmt: skip
    return replace(lease, token=int(rows[0][0])) if rows else None


def renew(db: Database, session: str, token: int, now: float, ttl: float) -> bool:
    """Extend the lease; False when the token is not current or the lease was released."""
    return (
        db.write(
            None,
            lambda cur: (
                cur.execute(
                    "UPDATE leases SET heartbeat_at = %s, expires_at = %s "
                    "WHERE session = %s AND token = %s AND expires_at > 0",
                    (now, now + ttl, session, token),
                ).rowcount
            ),
        )
        == 1
    )


def release(db: Database, session: str, token: int) -> None:
    """Give the lease up if the token is current; the row stays (expires_at 0)."""
    db.write(
        None,
        lambda cur: cur.execute(
            "UPDATE leases SET expires_at = 0 WHERE session = %s AND token = %s",
            (session, token),
        ),
    )


def record_socket(db: Database, session: str, token: int, socket: str) -> bool:
    """Record where the holder of ``token`` published; False when it is not current."""
    return (
        db.write(
            None,
            lambda cur: (
                cur.execute(
                    "UPDATE leases SET socket = %s WHERE session = %s AND token = %s",
                    (socket, session, token),
                ).rowcount
            ),
        )
        == 1
    )


def get(db: Database, session: str) -> Lease | None:
    rows = db.read(f"SELECT {LEASE_COLUMNS} FROM leases WHERE session = %s", (session,))
    return _lease_from(rows[0]) if rows else None
