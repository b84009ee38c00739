"""A bounded queue between two nodes, with a policy for when it is full.

Several producers can share one channel, each under its own `key` (a stream name) with its own
capacity, so one busy stream never takes another's room. When a key's share is full, `put` either
blocks (files: nothing may be lost) or drops that key's oldest item (live streams: fresh beats
complete); every drop is counted per key. The consumer takes items in arrival order.

Every operation under the lock is O(1) (a drop marks the key's oldest entry dead; `get` skips dead
entries): with a hundred streams' threads putting, a holder preempted for the GIL while it scans
would keep the lock, and the consumer behind it, waiting for a turn of every thread.

Channels made with `share=` another one wait on the same condition, so one consumer can wait on
several at once: `get_any(channels)` takes from the first that has an item (the engine takes the
detector's results before new frames this way).

Example:
    >>> ch = Channel(capacity=2)
    >>> ch.put("a", key="cam1", drop_oldest=True); ch.put("b", key="cam1", drop_oldest=True)
    True
    True
    >>> ch.put("c", key="cam1", drop_oldest=True)
    True
    >>> ch.get(), ch.get(), ch.dropped["cam1"]
    ('b', 'c', 1)
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from typing import Any


class ChannelClosed(Exception):
    """Raised by `get` once the channel is closed and empty."""


class Channel:
    def __init__(self, capacity: int, name: str = "channel", *, share: Channel | None = None):
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        self.name = name
        #: entries `[key, item, alive]` in arrival order; a dropped one stays, dead, until reached
        self._items: deque[list] = deque()
        self._by_key: dict[str, deque[list]] = {}  # each key's live entries, oldest first
        self._live = 0
        #: shared with `share`: a waiter on either wakes for both (see `get_any`)
        self._cond = share._cond if share is not None else threading.Condition()
        self._closed = False
        self.dropped: Counter[str] = Counter()

    def put(self, item: Any, key: str = "", *, drop_oldest: bool = False) -> bool:
        """Add `item` under `key`. Returns False (item not added) once the channel is closed."""
        with self._cond:
            capacity = self.capacity
            mine = self._by_key.get(key)
            if mine is None:
                mine = self._by_key[key] = deque()
            while not self._closed and len(mine) >= capacity:
                if drop_oldest:
                    mine.popleft()[2] = False
                    self._live -= 1
                    self.dropped[key] += 1
                    break
                self._cond.wait()
            if self._closed:
                return False
            entry = [key, item, True]
            self._items.append(entry)
            mine.append(entry)
            self._live += 1
            self._cond.notify_all()
            return True

    def get(self, timeout: float | None = None) -> Any:
        """Take the oldest item; wait up to `timeout` seconds (None: forever, 0: not at all).

        Returns None on timeout; raises `ChannelClosed` when closed and empty.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._live:
                if self._closed:
                    raise ChannelClosed(self.name)
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining)
            return self._pop()

    def _pop(self) -> Any:
        """The oldest live item (there is one: `_live` > 0)."""
        items = self._items
        entry = items.popleft()
        while not entry[2]:
            entry = items.popleft()
        self._by_key[entry[0]].popleft()  # the key's oldest live entry is this one
        self._live -= 1
        self._cond.notify_all()
        return entry[1]

    def take_back(self, key: str) -> Any:
        """Remove `key`'s oldest item not yet taken and return it (None: it has none); not counted
        as dropped. The detector's queue gives a waiting keyframe's place to one worth more this way.

        Example:
            >>> ch = Channel(4)
            >>> _ = ch.put("a0", key="a"); _ = ch.put("b0", key="b")
            >>> ch.take_back("a"), ch.take_back("a"), ch.get(), ch.waiting_keys()
            ('a0', None, 'b0', [])
        """
        with self._cond:
            mine = self._by_key.get(key)
            if not mine:
                return None
            entry = mine.popleft()
            entry[2] = False
            self._live -= 1
            self._cond.notify_all()
            return entry[1]

    def waiting_keys(self) -> list[str]:
        """The keys that have items not yet taken."""
        with self._cond:
            return [key for key, mine in self._by_key.items() if mine]

    def close(self, *, discard: bool = False) -> None:
        """No more puts; `get` drains what is left (or nothing, with `discard`), then raises."""
        with self._cond:
            self._closed = True
            if discard:
                self._items.clear()
                self._by_key.clear()
                self._live = 0
            self._cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def depth(self, key: str | None = None) -> int:
        """Items waiting, for one key or in all: read without the lock (a figure for the stats,
        which ask it of every stream once a second, behind every putting thread otherwise)."""
        if key is None:
            return self._live
        mine = self._by_key.get(key)
        return len(mine) if mine is not None else 0


def get_any(channels: list[Channel], timeout: float | None = None) -> Any:
    """The oldest item of the first of `channels` that has one (they share one condition: made
    with `share=` the first); waits up to `timeout` seconds (None: forever, 0: not at all). Returns
    None on timeout; raises `ChannelClosed` when none has an item and any of them is closed.

    Example:
        >>> frames = Channel(8, "frames")
        >>> results = Channel(8, "results", share=frames)
        >>> _ = frames.put("frame 1"); _ = results.put("result 0")
        >>> get_any([results, frames]), get_any([results, frames]), get_any([results, frames], timeout=0)
        ('result 0', 'frame 1', None)
    """
    first = channels[0]
    if any(ch._cond is not first._cond for ch in channels):
        raise ValueError("get_any needs channels that share one condition (Channel(share=...))")
    deadline = None if timeout is None else time.monotonic() + timeout
    with first._cond:
        while True:
            for ch in channels:
                if ch._live:
                    return ch._pop()
            closed = next((ch for ch in channels if ch._closed), None)
            if closed is not None:
                raise ChannelClosed(closed.name)
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            first._cond.wait(remaining)


class Credits:
    """How many items each key may have between a producer and the point that is done with them:
    `acquire(key)` waits while `key` holds `limit` credits, `release(key)` gives one back. A file
    source takes a credit for each frame it decodes and the engine gives it back when the frame is
    published, so however slow the detector, a file never has more than `limit` frames in memory.
    `close()` wakes every waiter (acquire then returns False).

    Example:
        >>> credits = Credits(2)
        >>> credits.acquire("cam1"), credits.acquire("cam1"), credits.held("cam1")
        (True, True, 2)
        >>> credits.release("cam1"); credits.acquire("cam1")
        True
    """

    def __init__(self, limit: int):
        if limit < 1:
            raise ValueError("limit must be >= 1")
        self.limit = limit
        self._held: Counter[str] = Counter()
        self._cond = threading.Condition()
        self._closed = False

    def acquire(self, key: str) -> bool:
        """Take a credit for `key`, waiting while none is left; False once closed."""
        with self._cond:
            while not self._closed and self._held[key] >= self.limit:
                self._cond.wait()
            if self._closed:
                return False
            self._held[key] += 1
            return True

    def release(self, key: str, n: int = 1) -> None:
        with self._cond:
            self._held[key] = max(0, self._held[key] - n)
            self._cond.notify_all()

    def held(self, key: str) -> int:
        with self._cond:
            return self._held[key]

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def file_credits(interval: int, max_batch: int) -> int:
    """Frames a file source may have between decoding and publication: enough for one full batch
    of its keyframes at the detector while the next one gathers.

    Example:
        >>> file_credits(5, 4)
        24
    """
    return (interval + 1) * max_batch
