"""`freeze_startup_heap`: what startup left as garbage is collected, not frozen for ever,
and what the process makes afterwards stays collectable."""

from __future__ import annotations

import gc
import weakref

from edl.runtime.heap import freeze_startup_heap


class Cycle:
    def __init__(self) -> None:
        self.me = self


def test_startup_garbage_is_collected_and_later_garbage_stays_collectable() -> None:
    before = Cycle()
    startup_garbage = weakref.ref(before)
    del before
    alive = Cycle()
    try:
        freeze_startup_heap()
        assert startup_garbage() is None, "a cycle dropped before the freeze was kept"
        assert gc.get_freeze_count() > 0
        assert gc.is_tracked(alive)
        assert not any(o is alive for o in gc.get_objects()), "a live object was not frozen"
        later = Cycle()
        later_garbage = weakref.ref(later)
        del later
        gc.collect()
        assert later_garbage() is None, "a cycle made after the freeze was not collected"
    finally:
        gc.unfreeze()  # this test process goes on to other tests
