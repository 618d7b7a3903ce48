"""One writer per session: the lease, the hub's Unix socket, forwarding, and takeover.

The first serve of a session holds its lease and publishes a socket; every later
serve forwards its tool calls there, and takes the session over when the hub is
gone. Modules, in the order a serve meets them: ``socket_dir``, ``lease``,
``wire``, ``server``, ``forwarder``, ``answers``, ``election``. Spec: "More than
one client on one machine".
"""

from .answers import HUB_GONE_TEXT, HUB_SILENT_TEXT, LEASE_LOST_CALL_TEXT, hub_gone_result
from .election import SessionHub, fenced_handler
from .forwarder import Forwarder, HubGone, HubSilent, call_timeout, connect_to_hub
from .lease import (
    LeaseKeeper,
    held_on_another_host,
    holder_dead_here,
    holder_description,
    http_refusal,
    lease_free,
    other_host_refusal,
    this_host,
)
from .server import HubServer
from .socket_dir import WarnOnce, socket_name
from .wire import MAX_LINE

__all__ = [
    "HUB_GONE_TEXT",
    "HUB_SILENT_TEXT",
    "LEASE_LOST_CALL_TEXT",
    "MAX_LINE",
    "Forwarder",
    "HubGone",
    "HubServer",
    "HubSilent",
    "LeaseKeeper",
    "SessionHub",
    "WarnOnce",
    "call_timeout",
    "connect_to_hub",
    "fenced_handler",
    "held_on_another_host",
    "holder_dead_here",
    "holder_description",
    "http_refusal",
    "hub_gone_result",
    "lease_free",
    "other_host_refusal",
    "socket_name",
    "this_host",
]
