"""Pure parts: endpoint parsing, key layout, index choice, watch-event folding."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edl.coord import keys
from edl.coord.discovery import apply_events
from edl.coord.endpoints import Endpoint, parse_endpoints
from edl.coord.errors import EndpointError


def test_parse_endpoints_forms() -> None:
    assert parse_endpoints("http://127.0.0.1:2379, 10.0.0.2:12379,etcd.svc") == [
        Endpoint("127.0.0.1", 2379),
        Endpoint("10.0.0.2", 12379),
        Endpoint("etcd.svc", 2379),
    ]
    assert parse_endpoints("http://[::1]:2379")[0].target == "[::1]:2379"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "non-empty"),
        ("https://a:1", "scheme 'https'"),
        ("http://:2379", "no host"),
        ("a:notaport", "'a:notaport'"),
        ("a:1,,b:2", "item 1 is empty"),
        ("http://a:1/v3", "without a path"),
        ("a:99999", "'a:99999'"),
    ],
)
def test_parse_endpoints_rejects(text: str, fragment: str) -> None:
    with pytest.raises(EndpointError) as error:
        parse_endpoints(text)
    assert fragment in str(error.value)


def test_parse_endpoints_names_every_bad_item() -> None:
    with pytest.raises(EndpointError) as error:
        parse_endpoints("ftp://x:1,ok:2379,y:abc")
    message = str(error.value)
    assert "ftp://x:1" in message and "y:abc" in message and "ok:2379" not in message


def test_key_layout() -> None:
    prefix = keys.normalize_prefix("edl/ns/job/")
    assert prefix == "/edl/ns/job"
    assert keys.pserver_key(prefix, 3) == b"/edl/ns/job/pservers/3"
    assert keys.parse_pserver_key(prefix, b"/edl/ns/job/pservers/3") == 3
    assert keys.parse_pserver_key(prefix, keys.desired_pservers_key(prefix)) is None
    for odd in ("pservers/\u00b2", "pservers/1/x", "pservers/-1", "pservers/"):
        assert keys.parse_pserver_key(prefix, f"{prefix}/{odd}".encode()) is None, odd
    assert keys.under(prefix, "/checkpoints/0") == b"/edl/ns/job/checkpoints/0"
    assert keys.range_end(b"/a/") == b"/a0"
    assert keys.range_end(b"a\xff") == b"b"
    with pytest.raises(ValueError):
        keys.normalize_prefix("/")


@given(st.sets(st.integers(0, 20)), st.integers(0, 20))
def test_lowest_free_index(taken: set[int], desired: int) -> None:
    index = keys.lowest_free_index(taken, desired)
    free = [i for i in range(desired) if i not in taken]
    assert index == (free[0] if free else None)


def _event(kind: str, key: bytes, value: bytes = b"") -> SimpleNamespace:
    return SimpleNamespace(
        type=1 if kind == "delete" else 0, DELETE=1, kv=SimpleNamespace(key=key, value=value)
    )


def test_apply_events_folds_puts_and_deletes() -> None:
    prefix = "/p"
    events = [
        _event("put", b"/p/pservers/0", b"a:1"),
        _event("put", b"/p/pservers/desired", b"2"),
        _event("put", b"/p/pservers/1", b"b:1"),
        _event("delete", b"/p/pservers/0"),
    ]
    assert apply_events(prefix, {0: "old:1"}, events) == {1: "b:1"}
