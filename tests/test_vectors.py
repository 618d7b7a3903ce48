"""VectorMatrix: exact top-k against brute force, growth, swap-remove, refusals."""

from __future__ import annotations

import sys
import threading

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambo_core.index.vectors import VectorMatrix, top_rows


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> npt.NDArray[np.float32]:
    m = rng.standard_normal((n, dim)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    return m


def brute_force(
    ids: list[str],
    m: npt.NDArray[np.float32],
    q: npt.NDArray[np.float32],
    k: int,
    exclude: set[str] = frozenset(),  # type: ignore[assignment]
) -> list[tuple[str, float]]:
    q = q / np.linalg.norm(q)
    scored = [(float(m[i] @ q), node) for i, node in enumerate(ids) if node not in exclude]
    scored.sort(key=lambda p: (-p[0], p[1]))
    return [(node, s) for s, node in scored[:k]]


def assert_same(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> None:
    assert [g[0] for g in got] == [w[0] for w in want]
    np.testing.assert_allclose([g[1] for g in got], [w[1] for w in want], rtol=1e-5, atol=1e-6)


def test_top_k_matches_brute_force() -> None:
    rng = np.random.default_rng(1)
    ids = [f"n{i:04d}" for i in range(500)]
    m = unit_rows(rng, 500, 32)
    vm = VectorMatrix(32)
    vm.add_many(ids, m)
    for _ in range(20):
        q = rng.standard_normal(32).astype(np.float32)
        for k in (1, 5, 10, 499, 500):
            assert_same(vm.top_k(q, k), brute_force(ids, m, q, k))


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 40),
    k=st.integers(0, 60),
    seed=st.integers(0, 2**32 - 1),
    dup=st.booleans(),
    n_exclude=st.integers(0, 10),
)
def test_top_k_property(n: int, k: int, seed: int, dup: bool, n_exclude: int) -> None:
    rng = np.random.default_rng(seed)
    m = unit_rows(rng, max(n, 1), 8)[:n]
    if dup and n >= 4:
        m[1] = m[0]  # exact ties
        m[3] = m[0]
    ids = [f"id-{rng.integers(1 << 30):x}-{i}" for i in range(n)]
    rng.shuffle(ids)
    exclude = set(ids[:n_exclude]) | {"not-present"}
    vm = VectorMatrix(8)
    for node, row in zip(ids, m, strict=True):
        vm.add(node, row)
    q = m[0] if n and dup else rng.standard_normal(8).astype(np.float32)
    assert_same(vm.top_k(q, k, exclude), brute_force(ids, m, q, k, exclude))


def test_ties_break_by_id_whatever_the_row_order() -> None:
    v = np.zeros(4, dtype=np.float32)
    v[0] = 1.0
    other = np.zeros(4, dtype=np.float32)
    other[1] = 1.0
    vm = VectorMatrix(4)
    for node in ["d", "b", "e", "a", "c"]:
        vm.add(node, v)
    vm.add("z", other)
    assert [node for node, _ in vm.top_k(v, 3)] == ["a", "b", "c"]
    assert [node for node, _ in vm.top_k(v, 3, exclude={"a"})] == ["b", "c", "d"]


def test_k_larger_than_n_and_exclude_everything() -> None:
    rng = np.random.default_rng(2)
    m = unit_rows(rng, 3, 4)
    vm = VectorMatrix(4)
    vm.add_many(["a", "b", "c"], m)
    assert len(vm.top_k(m[0], 100)) == 3
    assert vm.top_k(m[0], 100)[0][0] == "a"
    assert vm.top_k(m[0], 5, exclude={"a", "b", "c"}) == []
    assert vm.top_k(m[0], 0) == []
    assert VectorMatrix(4).top_k(m[0], 3) == []


def test_query_is_normalised_and_cast() -> None:
    rng = np.random.default_rng(3)
    m = unit_rows(rng, 10, 6)
    vm = VectorMatrix(6)
    vm.add_many([str(i) for i in range(10)], m)
    top = vm.top_k((m[4] * 7.0).astype(np.float64), 1)
    assert top[0][0] == "4"
    assert top[0][1] == pytest.approx(1.0, abs=1e-5)


def test_capacity_doubling_keeps_rows() -> None:
    rng = np.random.default_rng(4)
    m = unit_rows(rng, 300, 16)
    vm = VectorMatrix(16)
    assert vm.capacity == 64
    caps = set()
    for i in range(300):
        vm.add(f"n{i}", m[i])
        caps.add(vm.capacity)
    assert caps == {64, 128, 256, 512}
    assert len(vm) == 300
    for i in range(300):
        got = vm.get(f"n{i}")
        assert got is not None
        np.testing.assert_array_equal(got, m[i])
    # add_many across a doubling boundary, too
    more = unit_rows(rng, 400, 16)
    vm.add_many([f"x{i}" for i in range(400)], more)
    assert vm.capacity == 1024
    np.testing.assert_array_equal(vm.get("x399"), more[399])
    np.testing.assert_array_equal(vm.get("n0"), m[0])


def test_remove_swaps_last_into_the_hole() -> None:
    rng = np.random.default_rng(5)
    m = unit_rows(rng, 5, 4)
    ids = ["a", "b", "c", "d", "e"]
    vm = VectorMatrix(4)
    vm.add_many(ids, m)
    assert vm.remove("b") is True
    assert vm.ids() == ["a", "e", "c", "d"]
    assert "b" not in vm and vm.get("b") is None
    np.testing.assert_array_equal(vm.get("e"), m[4])
    assert vm.remove("b") is False
    assert vm.remove("d") is True  # removing the last row: no swap
    assert vm.ids() == ["a", "e", "c"]
    assert vm.remove_many(["a", "e", "c", "zz"]) == 3
    assert len(vm) == 0
    assert vm.top_k(m[0], 3) == []
    # ids still answer their own vector after a churn of removes and adds
    vm.add_many(ids, m)
    vm.remove("a")
    vm.remove("c")
    vm.add("a", m[0])
    for i, node in enumerate(ids):
        if node != "c":
            np.testing.assert_array_equal(vm.get(node), m[i])
            assert vm.top_k(m[i], 1)[0][0] == node


def test_add_overwrites_existing_id() -> None:
    rng = np.random.default_rng(6)
    m = unit_rows(rng, 3, 4)
    vm = VectorMatrix(4)
    vm.add("a", m[0])
    vm.add("a", m[1])
    assert len(vm) == 1
    np.testing.assert_array_equal(vm.get("a"), m[1])
    vm.add_many(["a", "b"], m[1:3])  # mixed new and existing
    assert vm.ids() == ["a", "b"]
    np.testing.assert_array_equal(vm.get("b"), m[2])


def test_wrong_width_and_dtype_refused() -> None:
    vm = VectorMatrix(4)
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        vm.add("a", np.ones(5, dtype=np.float32))
    with pytest.raises(ValueError):
        vm.add("a", np.ones((1, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="floating"):
        vm.add("a", np.ones(4, dtype=np.int32))
    with pytest.raises(ValueError):
        vm.add_many(["a", "b"], np.ones((2, 3), dtype=np.float32))
    with pytest.raises(ValueError):
        vm.add_many(["a", "b"], np.ones((3, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="distinct"):
        vm.add_many(["a", "a"], np.ones((2, 4), dtype=np.float32))
    with pytest.raises(ValueError):
        vm.top_k(np.ones(3, dtype=np.float32), 1)
    with pytest.raises(ValueError, match="non-zero"):
        vm.top_k(np.zeros(4, dtype=np.float32), 1)
    with pytest.raises(ValueError):
        VectorMatrix(0)
    assert len(vm) == 0


def test_from_rows_adopts_buffer() -> None:
    rng = np.random.default_rng(7)
    buf = np.empty((8, 4), dtype=np.float32)
    m = unit_rows(rng, 3, 4)
    buf[:3] = m
    vm = VectorMatrix.from_rows(4, ["a", "b", "c"], buf)
    assert len(vm) == 3 and vm.capacity == 8
    assert vm.top_k(m[2], 1)[0][0] == "c"
    vm.add_many(["d", "e", "f", "g", "h", "i"], unit_rows(rng, 6, 4))  # grows past 8
    np.testing.assert_array_equal(vm.get("a"), m[0])
    with pytest.raises(ValueError):
        VectorMatrix.from_rows(4, ["a"], np.empty((1, 4), dtype=np.float64))
    with pytest.raises(ValueError):
        VectorMatrix.from_rows(4, ["a", "b"], np.empty((1, 4), dtype=np.float32))


def test_reads_during_writes_stay_consistent() -> None:
    """A reader racing the writer never gets a score attributed to the wrong id."""
    rng = np.random.default_rng(8)
    dim = 16
    m = unit_rows(rng, 400, dim)
    ids = [f"n{i}" for i in range(400)]
    index = {node: i for i, node in enumerate(ids)}
    vm = VectorMatrix(dim)
    vm.add_many(ids[:200], m[:200])
    stop = threading.Event()

    def writer() -> None:
        # churn: remove from the front (swap-remove moves the last row), add at the back
        live = list(ids[:200])
        spare = list(ids[200:])
        turn = 0
        while not stop.is_set():
            gone = live.pop(turn % len(live))
            vm.remove(gone)
            new = spare.pop(0)
            vm.add(new, m[index[new]])
            live.append(new)
            spare.append(gone)
            turn += 7

    t = threading.Thread(target=writer)
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads constantly, so reads overlap writes
    t.start()
    try:
        for _ in range(300):
            q = rng.standard_normal(dim).astype(np.float32)
            q /= np.linalg.norm(q)
            for node, score in vm.top_k(q, 5):
                assert score == pytest.approx(float(m[index[node]] @ q), abs=1e-5)
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old_interval)


def test_rows_is_a_read_only_view_of_the_live_rows() -> None:
    rng = np.random.default_rng(9)
    m = unit_rows(rng, 5, 4)
    vm = VectorMatrix(4)
    vm.add_many(list("abcde"), m)
    rows = vm.rows()
    assert rows.shape == (5, 4)
    np.testing.assert_array_equal(rows, m)
    with pytest.raises(ValueError):
        rows[0, 0] = 2.0
    vm.add("f", m[0])  # the matrix itself stays writable
    assert vm.rows().shape == (6, 4)


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(2, 6000),
    k=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
    layout=st.sampled_from(["random", "clustered", "ties", "excluded"]),
)
def testkth_largest_by_block_maxima_is_exact(n: int, k: int, seed: int, layout: str) -> None:
    rng = np.random.default_rng(seed)
    k = min(k, n - 1)
    scores = rng.standard_normal(n).astype(np.float32)
    if layout == "clustered":  # every high score in one block: the bound is loose
        scores[: min(n, 300)] += 10.0
    elif layout == "ties":
        scores = np.round(scores, 1).astype(np.float32)
    elif layout == "excluded":
        scores[rng.random(n) < 0.5] = -np.inf
        scores[0] = 0.0
    kth = np.sort(scores)[n - k]
    assert top_rows(scores, k).tolist() == np.flatnonzero(scores >= kth).tolist()


def test_top_k_at_scale_matches_brute_force() -> None:
    rng = np.random.default_rng(7)
    ids = [f"n{i:05d}" for i in range(20_000)]
    m = unit_rows(rng, 20_000, 16)
    m[5000:5010] = m[5000]  # a run of exact ties inside one block
    vm = VectorMatrix(16)
    vm.add_many(ids, m)
    for q in (m[5000], *rng.standard_normal((5, 16)).astype(np.float32)):
        for k in (1, 20, 100):
            assert_same(vm.top_k(q, k), brute_force(ids, m, q, k))


def test_a_scan_in_flight_holds_back_a_remove_but_not_an_append(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rows a scan reads stay put until it ends; an append writes past them at once."""
    rng = np.random.default_rng(10)
    m = unit_rows(rng, 4, 8)
    vm = VectorMatrix(8)
    vm.add_many(list("abc"), m[:3])
    scanning, release, remove_waits = threading.Event(), threading.Event(), threading.Event()
    real_top_rows = VectorMatrix._top_rows

    def held_scan(
        live: npt.NDArray[np.float32], q: npt.NDArray[np.float32], k: int, drop: list[int]
    ) -> list[tuple[float, int]]:
        scanning.set()
        assert release.wait(10)
        return real_top_rows(live, q, k, drop)

    class NotedCondition(threading.Condition):
        def wait(self, timeout: float | None = None) -> bool:
            remove_waits.set()
            return super().wait(timeout)

    monkeypatch.setattr(vm, "_top_rows", held_scan)
    vm._no_scans = NotedCondition(vm._lock)
    done: list[str] = []
    found: list[list[tuple[str, float]]] = []

    def scan() -> None:
        found.append(vm.top_k(m[0], 3))
        done.append("scan")

    def remove() -> None:
        vm.remove("a")
        done.append("remove")

    scanner = threading.Thread(target=scan)
    scanner.start()
    assert scanning.wait(10)
    vm.add("d", m[3])  # past the scan's rows: it does not wait for the scan
    remover = threading.Thread(target=remove)
    remover.start()
    assert remove_waits.wait(10)
    assert done == []
    release.set()
    scanner.join(10)
    remover.join(10)
    assert done == ["scan", "remove"]
    assert found[0][0][0] == "a" and {node for node, _ in found[0]} == {"a", "b", "c"}
    assert "a" not in vm and sorted(vm.ids()) == ["b", "c", "d"]
