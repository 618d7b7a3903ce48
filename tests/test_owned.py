"""PerOwner: one value per live owner, made once, gone with the owner."""

from __future__ import annotations

import gc

import pytest

from lambo_core.owned import PerOwner


class Owner:
    pass


def test_get_makes_once_and_peek_never_makes() -> None:
    made: list[int] = []

    def make() -> list[int]:
        made.append(1)
        return []

    per: PerOwner[Owner, list[int]] = PerOwner(make)
    a, b = Owner(), Owner()
    assert per.peek(a) is None
    first = per.get(a)
    assert per.get(a) is first and len(made) == 1
    assert per.get(b) is not first and len(made) == 2


def test_values_go_with_their_owner() -> None:
    per: PerOwner[Owner, dict[str, int]] = PerOwner(dict)
    owner = Owner()
    per.get(owner)["x"] = 1
    assert len(per._values) == 1
    del owner
    gc.collect()
    assert len(per._values) == 0


def test_setdefault_keeps_the_first_and_put_replaces() -> None:
    per: PerOwner[Owner, str] = PerOwner()
    owner = Owner()
    assert per.setdefault(owner, "first") == "first"
    assert per.setdefault(owner, "second") == "first"
    per.put(owner, "third")
    assert per.peek(owner) == "third"
    with pytest.raises(KeyError):
        per.get(Owner())
