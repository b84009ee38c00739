"""The live page's frames with several engines: each engine keeps its own `PreviewSink` (references
only, as one process does) and answers the supervisor's questions about it on a socket of its own
(`PreviewServer`); the supervisor's `EnginePreviews` asks the engine that has the stream, and is
what its live page reads in place of a `PreviewSink`.

Nothing crosses unless a viewer asks: a JPEG is encoded in the engine (once per frame, whatever
the number of viewers, as with one process) and sent whole; the newest frame message, a stream's
lines and zones, a message by `seq`, the events and their snapshots likewise. The supervisor asks
each engine at most one question per stream and kind at a time, and keeps the answer for
`FRESH_S`: viewers asking meanwhile get that answer, so any number of browsers cost an engine at
most one question per `FRESH_S` per stream and kind (the page asks for frames, results and the
stream's figures). An engine that does not answer within `ASK_TIMEOUT_S`
(busy, stopped, restarting) costs the question that waits for it; until it answers again it is
asked one question at a time, and every other question about its streams is answered at once with
nothing (a flood of viewers never piles up threads waiting on it); the other engines answer as
before. The events are numbered here, in the order they are first seen, over every engine; an
engine started again numbers its own from 1 (told by its `run` token), and the numbering here
goes on.

The wire: ZeroMQ REQ (here; `REQ_RELAXED` and `REQ_CORRELATE`, so that a late answer is never taken
for the next one) to ROUTER (the engine), over an `ipc://` file in the run's private folder, or
with `runtime.cluster` over `tcp://` on the actor's node with the run's CurveZMQ keys (ray.py).
A question is `[kind, JSON arguments]`; an answer `[JSON, JPEG]` (the JPEG part empty when there is
none).
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections import deque
from typing import Callable

import zmq

from ..http.preview import EVENTS, PreviewSink

log = logging.getLogger("streamlens.scale")

#: how long the supervisor waits for an engine's answer
ASK_TIMEOUT_S = 1.0
#: how long an answer is given to every viewer that asks again, before the engine is asked again
FRESH_S = 0.05
_POLL_MS = 100


class PreviewServer(PreviewSink):
    """An engine's `PreviewSink` that answers `EnginePreviews` on `endpoint` (bound at `open()`;
    `curve`: the run's CurveZMQ server keys, ray.py). Its answering thread encodes the JPEGs."""

    def __init__(self, endpoint: str, curve: dict | None = None):
        super().__init__()
        self.endpoint = endpoint  # as asked; once bound (`bound`), where it listens (a port for `*`)
        self.bound = False
        self._curve = curve
        self._ctx = zmq.Context()
        self._sock = None
        self._auth = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="preview-server", daemon=True)
        #: this run of the engine: an engine started again numbers its events from 1
        self.run_token = f"{os.getpid()}-{time.monotonic_ns()}"

    def open(self) -> None:
        from ..errors import SinkError
        from ..config.sinks import PeersConfig
        from ..sinks.zmq import guard

        self._sock = self._ctx.socket(zmq.ROUTER)
        self._sock.linger = 0
        try:
            if self._curve is not None:
                self._auth = guard(self._ctx, self._sock, "the live page's frames", PeersConfig(), self._curve)
            self._sock.bind(self.endpoint)
        except zmq.ZMQError as e:
            self._sock.close()
            raise SinkError(f"the live page's frames: cannot bind {self.endpoint}: {zmq.strerror(e.errno)}") from None
        self.endpoint = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.bound = True
        self._thread.start()

    def close(self) -> None:
        self._done.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._sock is not None:
            self._sock.close()
        if self._auth is not None:
            self._auth.close()
        self._ctx.term()

    def _serve(self) -> None:
        while not self._done.is_set():
            if not self._sock.poll(_POLL_MS):
                continue
            parts = self._sock.recv_multipart()
            if len(parts) < 4:  # not a question (identity, delimiter, kind, arguments): nobody to answer
                continue
            *route, kind, body = parts
            try:
                answer, jpeg = self.answer(kind.decode(), json.loads(body))
            except Exception:  # noqa: BLE001 - a question it cannot answer: told, never fatal
                log.debug("preview question %r", kind, exc_info=True)
                answer, jpeg = {"error": True}, b""
            try:
                self._sock.send_multipart([*route, json.dumps(answer).encode(), jpeg], flags=zmq.NOBLOCK)
            except zmq.Again:  # the supervisor is gone, or not reading: nothing waits for it here
                pass

    def answer(self, kind: str, args: dict) -> tuple[dict, bytes]:
        """The answer to one question (see `EnginePreviews`): (JSON-able, JPEG or b"")."""
        name = args.get("stream")
        if kind == "stream":
            newest = self.newest_message(name)
            lines, zones = self.geometry(name)
            return {"message": newest, "lines": lines, "zones": zones}, b""
        if kind == "message":
            return {"message": self.message(name, int(args["seq"]))}, b""
        if kind in ("preview", "annotated"):
            found = self.preview_jpeg(name) if kind == "preview" else self.annotated_jpeg(name)
            if found is None:
                return {"seq": None}, b""
            return {"seq": found[0], "message": found[2] if kind == "preview" else None}, found[1]
        if kind == "events":  # after the asker's last of this run; all of them if it knew another run
            after = int(args["after"]) if args.get("run") == self.run_token else 0
            return {"run": self.run_token, "events": [list(e) for e in self.events_since(after)]}, b""
        if kind == "snapshot":
            return {"run": self.run_token}, self.snapshot(int(args["index"])) or b""
        raise ValueError(f"no such question: {kind}")


class _Kept:
    """One answer kept for every viewer: the newest, when it came, and whether a question is out."""

    __slots__ = ("value", "at", "asking")

    def __init__(self) -> None:
        self.value, self.at, self.asking = None, -1e9, threading.Lock()


class EnginePreviews:
    """What the supervisor's live page reads of the engines' frames: the reading side of a
    `PreviewSink`, each question asked of the engine that has the stream (`locate(name)`: its
    endpoint, or None while it has none), the events of every engine (`engines()`: {engine index:
    endpoint}). `keys`: the run's CurveZMQ keys when the engines are actors; `fresh_s`: how long an
    answer is given again (0: every caller asks, unless a question on the same is out). Any thread."""

    def __init__(self, locate: Callable[[str], str | None], engines: Callable[[], dict[int, str]], keys=None,
                 fresh_s: float = FRESH_S):
        self._locate, self._engines, self._keys, self._fresh_s = locate, engines, keys, fresh_s
        self._ctx = zmq.Context()
        self._idle: dict[str, queue.SimpleQueue] = {}  # endpoint: sockets no thread is using
        self._lock = threading.Lock()
        self._kept: dict[tuple, _Kept] = {}
        self._events: deque = deque(maxlen=EVENTS)  # (index, message, engine, its own index, its run, snapshot?)
        self._event_count = 0
        self._seen: dict[int, tuple[str, int]] = {}  # engine: (its run token, its last event's own index)
        self._out = 0  # sockets asking now
        self._silent: set[str] = set()  # engines whose last question got no answer
        self._probing: set[str] = set()  # those of them asked now
        self._closed = False

    # -- asking an engine ------------------------------------------------------------------------

    def _ask(self, endpoint: str | None, kind: str, **args) -> tuple[dict, bytes] | None:
        """The engine's answer, or None when there is none in time (or no engine)."""
        with self._lock:
            if endpoint is None or self._closed or endpoint in self._probing:
                return None  # an engine that has not answered is asked one question at a time
            if endpoint in self._silent:
                self._probing.add(endpoint)
            idle = self._idle.setdefault(endpoint, queue.SimpleQueue())
            self._out += 1
        sock, answered = None, False
        try:
            try:
                sock = idle.get_nowait()
            except queue.Empty:
                sock = self._socket(endpoint)
            sock.send_multipart([kind.encode(), json.dumps(args).encode()])
            if not sock.poll(int(1000 * ASK_TIMEOUT_S)):
                log.debug("preview: no answer from %s to %s in %g s", endpoint, kind, ASK_TIMEOUT_S)
                return None
            answer, jpeg = sock.recv_multipart()
            answered = True
        except zmq.ZMQError as e:
            log.debug("preview: %s %s: %s", endpoint, kind, e)
            if sock is not None:
                sock.close(linger=0)
                sock = None
            return None
        finally:
            self._give_back(endpoint, sock, answered)
        found = json.loads(answer)
        return None if found.get("error") else (found, jpeg)

    def _give_back(self, endpoint: str, sock: zmq.Socket | None, answered: bool) -> None:
        """A socket back to the idle ones once its question is over (closed once this is closed or
        its endpoint forgotten: the last one out ends the context); the engine marked silent until
        it answers again."""
        with self._lock:
            self._out -= 1
            self._probing.discard(endpoint)
            (self._silent.discard if answered else self._silent.add)(endpoint)
            idle = self._idle.get(endpoint)
            if sock is not None and idle is not None and not self._closed:
                idle.put(sock)
                return
            if sock is not None:
                sock.close(linger=0)
            if self._closed and self._out == 0:
                self._ctx.term()

    def _socket(self, endpoint: str) -> zmq.Socket:
        sock = self._ctx.socket(zmq.REQ)
        sock.setsockopt(zmq.REQ_RELAXED, 1)  # a question may follow one that got no answer
        sock.setsockopt(zmq.REQ_CORRELATE, 1)  # and that late answer is not taken for the new one's
        sock.linger = 0
        sock.sndtimeo = int(1000 * ASK_TIMEOUT_S)
        if self._keys is not None:
            self._keys.make_client(sock)
        sock.connect(endpoint)
        return sock

    def _kept_answer(self, key: tuple, ask: Callable[[], object]):
        """What `ask()` answered, asked again once `fresh_s` old; while a question is out, the
        other callers get the answer kept (None before the first)."""
        with self._lock:
            kept = self._kept.setdefault(key, _Kept())
        if time.monotonic() - kept.at < self._fresh_s or not kept.asking.acquire(blocking=False):
            return kept.value
        try:
            kept.value, kept.at = ask(), time.monotonic()
        finally:
            kept.asking.release()
        return kept.value

    # -- the reading side of a PreviewSink -------------------------------------------------------

    def _stream(self, name: str) -> dict | None:
        found = self._kept_answer(("stream", name), lambda: self._ask(self._locate(name), "stream", stream=name))
        return found[0] if found is not None else None

    def newest_message(self, name: str) -> dict | None:
        found = self._stream(name)
        return found["message"] if found is not None else None

    def geometry(self, name: str) -> tuple[list, list]:
        found = self._stream(name)
        return (found["lines"], found["zones"]) if found is not None else ([], [])

    def message(self, name: str, seq: int) -> dict | None:
        found = self._ask(self._locate(name), "message", stream=name, seq=seq)
        return found[0]["message"] if found is not None else None

    def preview_jpeg(self, name: str) -> tuple[int, bytes, dict] | None:
        found = self._kept_answer(("preview", name), lambda: self._ask(self._locate(name), "preview", stream=name))
        if found is None or found[0]["seq"] is None:
            return None
        return found[0]["seq"], found[1], found[0]["message"]

    def annotated_jpeg(self, name: str) -> tuple[int, bytes] | None:
        found = self._kept_answer(("annotated", name), lambda: self._ask(self._locate(name), "annotated", stream=name))
        if found is None or found[0]["seq"] is None:
            return None
        return found[0]["seq"], found[1]

    def _gather_events(self) -> None:
        """Number the events the engines have made since they were last asked (an engine started
        again answers with its new run's token and all its events)."""
        for engine, endpoint in sorted(self._engines().items()):
            run, last = self._seen.get(engine, (None, 0))
            found = self._ask(endpoint, "events", after=last, run=run)
            if found is None:
                continue
            if found[0]["run"] != run:
                run, last = found[0]["run"], 0
            fresh = [(own, message, shot) for own, message, shot in found[0]["events"] if own > last]
            with self._lock:
                for own, message, shot in fresh:
                    self._event_count += 1
                    self._events.append((self._event_count, message, engine, own, run, shot))
                    last = own
            self._seen[engine] = (run, last)

    def _refresh_events(self) -> list[tuple]:
        self._kept_answer(("events",), lambda: self._gather_events())
        with self._lock:
            return list(self._events)

    def events_since(self, index: int, limit: int = EVENTS) -> list[tuple[int, dict, bool]]:
        after = [(i, m, shot) for i, m, _, _, _, shot in self._refresh_events() if i > index]
        return after[-limit:] if limit > 0 else []

    def event(self, index: int) -> dict | None:
        return next((m for i, m, *_ in self._refresh_events() if i == index), None)

    def shot_of(self, message: dict) -> int | None:
        key = (message.get("stream"), message.get("seq"), message.get("ts"))
        for i, m, *_, shot in reversed(self._refresh_events()):
            if (m.get("stream"), m.get("seq"), m.get("ts")) == key:
                return i if shot else None
        return None

    def snapshot(self, index: int) -> bytes | None:
        kept = next((e for e in self._refresh_events() if e[0] == index), None)
        if kept is None or not kept[5]:
            return None
        _, _, engine, own, run, _ = kept
        found = self._ask(self._engines().get(engine), "snapshot", index=own)
        if found is None or found[0]["run"] != run:  # its engine started again: that snapshot is gone
            return None
        return found[1] or None

    def forget(self, endpoint: str) -> None:
        """Close the idle sockets towards `endpoint`: an engine no longer answers there (an actor
        started again listens on another port)."""
        with self._lock:
            idle = self._idle.pop(endpoint, None)
            while idle is not None and not idle.empty():
                idle.get_nowait().close(linger=0)

    def close(self) -> None:
        """Close every socket: the idle ones now, one still asking once its question is over."""
        with self._lock:
            self._closed = True
            for idle in self._idle.values():
                while not idle.empty():
                    idle.get_nowait().close(linger=0)
            if self._out == 0:
                self._ctx.term()


__all__ = ["PreviewServer", "EnginePreviews", "ASK_TIMEOUT_S", "FRESH_S"]
