"""The sinks' background publisher (streamlens/sinks/background.py) on its own: a full queue drops
its oldest items, counted; items go out in order; close() gives a stuck delivery up in bounded
time, counted once; after interrupt() it gives no time at all."""

from __future__ import annotations

import threading
import time

from streamlens.sinks.background import Publisher


def test_a_full_queue_drops_its_oldest_and_put_back_keeps_the_newest():
    pub = Publisher(3)
    with pub.cond:
        for n in range(5):
            pub.put(("cam1" if n % 2 else "cam2", n))
        assert [n for _, n in pub.queue] == [2, 3, 4] and pub.dropped == {"cam2": 1, "cam1": 1}
        taken = pub.queue.popleft()  # ("cam2", 2), as the thread takes it
        pub.put_back([("cam1", 1), taken])  # back in front, in order; beyond 3 the oldest goes
    assert [n for _, n in pub.queue] == [2, 3, 4] and pub.dropped == {"cam2": 1, "cam1": 2}


def test_drain_delivers_in_order_and_close_waits_for_it():
    pub = Publisher(100)
    got, settled = [], []
    pub.start(pub.drain, "test", lambda item: got.append(item[1]) or "ok", lambda item, out: settled.append(out))
    with pub.cond:
        for n in range(50):
            pub.put(("cam1", n))
        pub.cond.notify_all()
    assert pub.close(5.0) == 0
    assert got == list(range(50)) and settled == ["ok"] * 50 and not pub.dropped and pub.thread is None


def test_close_gives_a_stuck_delivery_up_in_bounded_time_counted_once():
    release = threading.Event()
    settled = []
    pub = Publisher(100)
    pub.start(pub.drain, "test", lambda item: release.wait(30), lambda item, out: settled.append(item))
    with pub.cond:
        for n in range(4):
            pub.put(("cam1", n))
        pub.cond.notify_all()
    while not pub.taken:
        time.sleep(0.01)
    worker = pub.thread
    started = time.monotonic()
    assert pub.close(0.2, then_s=120.0) == 4  # the one in flight and the three queued
    assert time.monotonic() - started < 60.0  # no wait of `then_s` for a thread that held an item
    release.set()
    worker.join(30)  # its late outcome, if it were counted, is in by now
    assert not worker.is_alive()
    assert pub.dropped == {"cam1": 4} and settled == []  # the late outcome is not counted again


def test_after_interrupt_close_gives_no_time():
    pub = Publisher(10)

    def settle(item, outcome):  # as the webhook does: a delivery cut short is a drop
        if outcome is None:
            pub.dropped[item[0]] += 1

    pub.start(pub.drain, "test", lambda item: pub.stop.wait(30) and None, settle)
    with pub.cond:
        for n in range(3):
            pub.put(("cam1", n))
        pub.cond.notify_all()
    pub.interrupt()
    started = time.monotonic()
    pub.close(120.0)
    assert time.monotonic() - started < 60.0 and pub.dropped == {"cam1": 3}  # not the 120 s offered
