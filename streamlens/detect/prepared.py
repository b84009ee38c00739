"""A small, thread-safe store of frames already preprocessed, for `Detector.prepare(frame)`.

Preprocessing (resize, pad, channel order, normalise) can run on the thread that decoded a frame,
in parallel with inference on the engine thread: the DataLoader pattern. The store holds the frame
itself next to its prepared input, so an entry can never be mistaken for another frame's (an id is
only reused once its object is gone, and the store keeps it alive). It is bounded: when it is full
the oldest entries go, and `detect()` simply prepares those frames again (live streams drop frames
that were prepared but never detected).

Example:
    >>> store = PreparedStore(capacity=2)
    >>> a, b, c = object(), object(), object()
    >>> store.put(a, "A"); store.put(b, "B"); store.put(c, "C")
    >>> store.take(a), store.take(c), store.take(c)
    (None, 'C', None)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any


class PreparedStore:
    """`put(frame, prepared)` from any thread; `take(frame)` gives it back once (or None)."""

    def __init__(self, capacity: int = 256):
        self.capacity = capacity
        self._items: OrderedDict[int, tuple[object, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, frame: object, prepared: Any) -> None:
        with self._lock:
            self._items[id(frame)] = (frame, prepared)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def take(self, frame: object) -> Any:
        with self._lock:
            entry = self._items.get(id(frame))
            if entry is None or entry[0] is not frame:
                return None
            del self._items[id(frame)]
            return entry[1]

    def __len__(self) -> int:
        return len(self._items)
