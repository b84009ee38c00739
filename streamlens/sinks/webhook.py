"""The webhook sink: each analytics event as an HTTP POST of its JSON message.

`{type: webhook, url: https://hooks.example/in}` posts every `event` message (schema v1, the same
bytes the JSONL sink writes, `Content-Type: application/json`) to `url`, one request per event, in
the order the events happened. Frames, stats and stream ends are not posted. Keys (all optional
but `url`):

- `events`: the event kinds posted (`[line_cross, zone_enter]`; default: every kind).
- `cooldown_s` (0: off): at most one post per stream, rule and event kind in this time; the others
  are skipped and counted in `skipped`. The rule is the event's `line` or `zone`, and for the
  `object_*` events the object's label. The time is the stream's media time (the events' `pts`,
  made to go on across the loops of a file), not the wall clock, so a file read faster than real
  time is held back as it would be live, and a run gives the same posts every time; a stream
  without `pts` reads the wall clock. The first event of a key opens its window (whether or not
  it is then delivered); the ones skipped do not lengthen it.
- `timeout_s` (5): how long one try may take in all, from connecting to the answer's status and
  headers (`streamlens.sinks.deadline`: an endpoint that trickles its answer is cut at this
  deadline). The answer's body is never read.
- `retries` (3): tries after a failure that may pass (no connection, a timeout, HTTP 5xx and 429),
  waiting `BACKOFF_S` (0.5 s) before the first, twice as long before each next one, at most
  `BACKOFF_MAX_S` (8 s; longer when the server's `Retry-After` asks, up to that cap). An event
  still not taken then is counted in `failed`. Any other answer but 2xx (a 4xx other than 429, a
  redirect, which is not followed) is not retried and is counted in `refused`.
- `queue_size` (1000): events held for posting. `write()` runs on the engine's thread and never
  waits: it puts the event into this queue (a `streamlens.sinks.background.Publisher`) and
  returns; when the queue is full the oldest event is dropped and counted in `dropped`. One worker
  thread posts, in order, over one keep-alive connection (a `DeadlineSession`).
- `token_env`: the environment variable whose value is sent as `Authorization: Bearer <value>`;
  read at `open()`, which fails with one line naming the key when the variable is not set, and
  warns once when the URL is plain `http://` to another machine (the token would travel in clear).
  Basic auth can go in the URL (`https://user:${PASS}@host/in`). Neither is ever logged: log lines
  show the URL's origin alone (`https://hooks.example`), since a webhook's path may be its secret.

Counters, per stream: `posted`, `failed`, `refused`, `skipped` (cooldown), `dropped` (queue full,
or still queued when `close()` gave up); `counters()` sums them. `drops()`, which the runtime
reads, gives per stream every event not delivered: dropped, failed and refused; the skipped are
left out (not delivered by design). One warning says when posting starts to fail (and why), one
when it works again (and how many events were lost meanwhile), never one per try; `close()` logs
what was lost.

Closing: `close()` posts what is still queued for at most `max(timeout_s, CLOSE_MIN_S)` seconds in
all (`CLOSE_MIN_S` is 2 s), then drops the rest (counted in `dropped`); after `interrupt()` it does
not wait at all. `interrupt()` stops the worker at once: no further try, no backoff wait; a request
already in flight is left to end within `timeout_s` on its daemon thread, and its event counted as
dropped. `open()` does not contact the endpoint: one that is down at the start is retried like one
that goes down later.

Example:
    >>> sink = WebhookSink("https://bot:s3cret@hooks.example/in", events=["line_cross"], cooldown_s=30)
    >>> sink.display_url  # its path may be its secret (Slack, Discord): the origin alone is shown
    'https://hooks.example'
    >>> rule_of({"event": "line_cross", "line": "gate"}), rule_of({"event": "object_end", "object": {"label": "car"}})
    ('gate', 'car')
"""

from __future__ import annotations

import http.client
import logging
import os
import time
from collections import Counter
from typing import Any

from ..analytics.build import MediaClock
from ..config.common import section
from ..config.sinks import WebhookSinkConfig
from ..errors import SinkError
from ..frame import FrameResult, StreamEnd
from ..urls import hide_in, is_loopback, url_host, url_origin
from .deadline import DeadlineSession, Overdue
from .background import Publisher
from .base import Sink

log = logging.getLogger("streamlens.sinks.webhook")

#: the wait before the first retry; it doubles before each next one, up to `BACKOFF_MAX_S`
BACKOFF_S = 0.5
BACKOFF_MAX_S = 8.0
#: `close()` posts what is queued for at most max(timeout_s, CLOSE_MIN_S) seconds
CLOSE_MIN_S = 2.0
#: answers worth another try (besides no answer at all)
RETRY_STATUS = frozenset({429}) | frozenset(range(500, 600))
#: what counters() reports, and which of them drops() sums (not delivered, not by design)
COUNTERS = ("posted", "failed", "refused", "skipped", "dropped")
LOSSES = ("dropped", "failed", "refused")


def rule_of(message: dict[str, Any]) -> str | None:
    """The rule an event belongs to, for its cooldown: its `line` or `zone`; for the `object_*`
    events, the object's label (None when it has neither)."""
    for key in ("line", "zone"):
        if message.get(key) is not None:
            return str(message[key])
    obj = message.get("object")
    return str(obj.get("label")) if isinstance(obj, dict) and obj.get("label") is not None else None


class WebhookSink(Sink):
    """Posts each event message to `url` (see the module's docstring for the keys)."""

    name = "webhook"
    inline = True  # write() only queues; the worker thread posts

    def __init__(self, url: str | WebhookSinkConfig, **keys: Any):
        """`WebhookSink(cfg)` with the sink's typed section, or `WebhookSink(url, **keys)` with its
        keys, checked as the pipeline file's are (`ValueError`)."""
        cfg = url if isinstance(url, WebhookSinkConfig) else section(
            WebhookSinkConfig, "webhook sink", type="webhook", url=url, **keys)
        self.url = cfg.url
        self.display_url = url_origin(cfg.url)
        self.events = None if cfg.events is None else frozenset(cfg.events)
        self.cooldown_s = cfg.cooldown_s
        self.timeout_s = cfg.timeout_s
        self.retries = cfg.retries
        self.queue_size = cfg.queue_size
        self.token_env = cfg.token_env
        self.posted: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        # (stream, payload) queued; `taken`: the one the worker is posting; `stop` ends backoff waits
        self._pub = Publisher(cfg.queue_size)
        self.dropped = self._pub.dropped
        self._cond = self._pub.cond  # guards the queue, the counters and what follows
        self._windows: dict[tuple, float] = {}  # (stream, rule, kind) -> media time its window opened
        self._clocks: dict[str, MediaClock] = {}
        self._failing = False
        self._lost_before = 0  # events lost when posting began to fail

    # -- life cycle ---------------------------------------------------------------------------

    def open(self) -> None:
        """Check the token's variable, then start the worker (the endpoint is not
        contacted). Raises `SinkError`, one line naming the key, on a mistake."""
        import requests

        try:
            requests.Request("POST", self.url).prepare()
        except requests.RequestException as e:
            raise SinkError(f"{self.key('url')}: cannot post to {self.display_url!r}: {hide_in(str(e), self.url)}") from None
        session = DeadlineSession()
        session.headers.update({"Content-Type": "application/json", "User-Agent": "streamlens-webhook"})
        if self.token_env is not None:
            token = os.environ.get(self.token_env)
            if not token:
                session.close()
                raise SinkError(f"{self.key('token_env')}: the environment variable {self.token_env} is not set "
                                "(it holds the webhook's bearer token)")
            session.auth = _Bearer(token)  # an auth of its own: a ~/.netrc entry does not replace it
            if self.url.lower().startswith("http://") and not is_loopback(url_host(self.url), resolve=False):
                log.warning("%s: the bearer token in %s goes over plain http:// to %s, readable by anyone on the "
                            "way; use https://", self.key("token_env"), self.token_env, self.display_url)
        self._pub.start(self._work, "webhook", session)

    def write(self, item: FrameResult | StreamEnd, message: dict[str, Any], payload: bytes) -> None:
        """Queue an event for posting (frames and stream ends are ignored), unless its kind is not
        posted or its rule is cooling down (counted in `skipped`). Never waits: a full queue drops
        its oldest event (counted in `dropped`)."""
        if message.get("type") != "event":
            return
        if not self._pub.open:
            raise SinkError(f"webhook sink {self.display_url}: not open")
        kind, stream = message.get("event"), message["stream"]
        if self.events is not None and kind not in self.events:
            return
        with self._cond:
            if self.cooldown_s > 0:
                clock = self._clocks.get(stream)
                if clock is None:
                    clock = self._clocks[stream] = MediaClock()
                t = clock.at(message.get("pts"), time.monotonic())
                key = (stream, rule_of(message), kind)
                opened = self._windows.get(key)
                if opened is not None and t - opened < self.cooldown_s:
                    self.skipped[stream] += 1
                    return
                self._windows[key] = t
            self._pub.put((stream, payload))
            self._cond.notify_all()

    def interrupt(self) -> None:
        """Stop posting now: no further try or backoff wait; `close()` then waits for nothing and
        drops what is queued (counted)."""
        self._pub.interrupt()

    def close(self) -> None:
        """Post what is queued for at most max(`timeout_s`, `CLOSE_MIN_S`) seconds (not at all after
        `interrupt()`), then drop the rest, counted; log what was lost. Safe to call twice."""
        if self._pub.thread is None:
            return
        # the worker ends once the queue is empty; past the deadline what is left is given up, counted as
        # dropped (an event being posted too: the worker ends after its request, on its own)
        abandoned = self._pub.close(max(self.timeout_s, CLOSE_MIN_S), then_s=1.0)
        self._report(abandoned)

    # -- counters -----------------------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        """Events posted, failed (after every retry), refused (a 4xx, a redirect), skipped (cooldown)
        and dropped (queue full, or left at close) so far, every stream together; `queued` now."""
        with self._cond:
            out = {name: sum(getattr(self, name).values()) for name in COUNTERS}
            out["queued"] = len(self._pub.queue) + len(self._pub.taken)
        return out

    def drops(self) -> dict[str, int]:
        """Events not delivered, per stream: dropped, failed and refused (not the skipped)."""
        with self._cond:
            total: Counter[str] = Counter()
            for name in LOSSES:
                total.update(getattr(self, name))
            return {stream: n for stream, n in total.items() if n}

    # -- parts --------------------------------------------------------------------------------

    def _lost(self) -> int:
        return sum(sum(getattr(self, name).values()) for name in LOSSES)

    def _work(self, session) -> None:
        """The worker: post the queue's events in order until closed or stopped."""
        try:
            self._pub.drain(lambda item: self._deliver(session, item[1]), self._settle)
        finally:
            session.close()

    def _settle(self, item: tuple[str, bytes], outcome: str | None) -> None:
        """An event's outcome, counted (under the lock): None is a post cut short by `interrupt()`."""
        getattr(self, outcome or "dropped")[item[0]] += 1
        if outcome == "posted" and self._failing:
            self._failing = False
            log.warning("webhook sink %s: posting works again (%d event(s) dropped, failed or refused meanwhile)",
                        self.display_url, self._lost() - self._lost_before)

    def _deliver(self, session, payload: bytes) -> str | None:
        """Post one event, retrying what may pass: `posted`, `failed`, `refused`, or None when
        stopped before it was delivered."""
        delay = BACKOFF_S
        for attempt in range(self.retries + 1):
            if self._pub.stop.is_set():
                return None
            status, why, retry_after = self._post(session, payload)
            if status is not None and 200 <= status < 300:
                return "posted"
            retriable = status is None or status in RETRY_STATUS
            log.debug("webhook sink %s: try %d of %d failed: %s", self.display_url, attempt + 1,
                      self.retries + 1 if retriable else attempt + 1, why)
            self._fails(why, retriable)
            if not retriable:
                return "refused"
            if attempt == self.retries:
                break
            pause = min(max(delay, retry_after or 0.0), BACKOFF_MAX_S)
            delay *= 2
            if self._pub.stop.wait(pause):
                return None
        return "failed"

    def _post(self, session, payload: bytes) -> tuple[int | None, str, float | None]:
        """One request: (HTTP status or None when there was no answer, why it failed, the server's
        `Retry-After` in seconds or None)."""
        import requests

        try:
            answer = session.post(self.url, data=payload, allow_redirects=False, deadline_s=self.timeout_s)
        except Overdue:
            return None, f"no answer within {self.timeout_s:g} s in all", None
        except requests.ConnectTimeout:
            return None, f"no connection within {self.timeout_s:g} s", None
        except requests.Timeout:
            return None, f"no answer within {self.timeout_s:g} s", None
        except requests.RequestException as e:
            return None, hide_in(_why(e), self.url), None
        status = answer.status_code
        why = f"HTTP {status} {answer.reason or ''}".rstrip()
        if 300 <= status < 400:
            why += " (redirects are not followed: give the final URL)"
        retry_after = answer.headers.get("Retry-After", "")
        answer.close()  # its body unread: the connection goes, not back to the pool
        return status, why, float(retry_after) if retry_after.strip().isdigit() else None

    def _fails(self, why: str, retriable: bool) -> None:
        """A try failed: one warning when posting begins to fail, none for the tries after it."""
        with self._cond:
            if self._failing:
                return
            self._failing = True
            self._lost_before = self._lost()
        if retriable:
            log.warning("webhook sink %s: posting fails (%s); each event is tried %d time(s) more, up to %d are "
                        "held meanwhile, and what is not delivered is counted", self.display_url, why, self.retries,
                        self.queue_size)
        else:
            log.warning("webhook sink %s: the server refuses events (%s); they are not retried, and counted as "
                        "refused", self.display_url, why)

    def _report(self, abandoned: int) -> None:
        c = self.counters()
        lost = c["dropped"] + c["failed"] + c["refused"]
        if lost or c["skipped"]:
            level = logging.WARNING if lost else logging.INFO
            log.log(level, "webhook sink %s: %d event(s) posted, %d not delivered (%d failed, %d refused, %d dropped"
                    "%s), %d skipped by cooldown", self.display_url, c["posted"], lost, c["failed"], c["refused"],
                    c["dropped"], f", {abandoned} of them left at close" if abandoned else "", c["skipped"])


class _Bearer:
    """requests' auth hook that sends `Authorization: Bearer <token>`; its repr hides the token."""

    def __init__(self, token: str):
        self._token = token

    def __call__(self, request):
        request.headers["Authorization"] = f"Bearer {self._token}"
        return request

    def __repr__(self) -> str:
        return "_Bearer(***)"


def _why(error: BaseException) -> str:
    """Why a request got no answer, in words (`Connection refused`), from the first cause that says."""
    seen: set[int] = set()
    stack: list[BaseException] = [error]
    while stack:
        e = stack.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, http.client.RemoteDisconnected):
            return "the server closed the connection without an answer"
        if isinstance(e, OSError) and e.strerror:
            return e.strerror
        stack += [c for c in (getattr(e, "reason", None), e.__cause__, e.__context__, *e.args)
                  if isinstance(c, BaseException)]
    return f"{type(error).__name__}: {error}"


__all__ = ["WebhookSink", "rule_of", "BACKOFF_S", "BACKOFF_MAX_S", "CLOSE_MIN_S"]
