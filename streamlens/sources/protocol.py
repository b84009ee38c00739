"""What a decode worker and its owner say to each other (worker.py: the owner's side, worker_loop.py:
the worker's), one session at a time. A session is what a spec says: a `SessionSpec` (session.py) is
one connection to a camera, a `FileSpec` (file_passes.py) one run over a file, its loops included;
`spec.run()` is the loop, `spec.lossless` how full slots are met.

    owner -> worker:  Open(session, spec)   Abort(session)   QUIT   Clip(session, start_s, end_s, path)
                      Thin(session, share)   Clock(session, start)
                      NewRing(ring_id, name, slots, slot_bytes)    (process only: a new ring)
                      NoRing(session, line)                        (process only: no room for it)
                      CREDIT                                       (process only: the answer to WAITING)
    worker -> owner:  SessionOpened(session, info)   FrameSent(session, layout, ...)
                      SessionEnded(session, reason, message, worker_drops, corrupt, detail)
                      NeedRing(session, slot_bytes)   WAITING   Crashed(message)
                      ClipDone(path, reason, refused)

The owner frees each frame's slot (its credit: a worker has `RING_SLOTS` of them) when it has copied
the frame out, before it reads the next message.
- A camera's worker never waits for the owner: when every slot is full it drops the frame it holds
  (counted in `FrameSent.worker_drops`, with the packets it skipped to catch up with a camera it
  fell behind: session.py `BEHIND_S`; packets its decoder rejected in `FrameSent.corrupt`; both
  counters also come with `SessionEnded`, and restart with each worker).
- A file's worker (a lossless session) waits instead: out of credits, it says `WAITING` and blocks
  on its pipe. The owner answers `CREDIT` as soon as it reads that: it has freed every frame sent
  before by then, since it frees each one before it reads the next message. So a file loses no
  frame to a slow consumer, the slots bound what is decoded ahead of it, and while the owner keeps
  up no message is spent on credits. An abort or quit ends the wait too.
- `Thin` tells a session the share of its frames the budget controller keeps (1.0 every frame,
  0.0 its keyframes only): the worker gives up the rest, the end of each group of pictures skipped
  undecoded where it can (decode.py `DecodeShare`), and each `FrameSent` says how many it gave up
  so far (`thinned`; also in `SessionEnded.detail`). A session starts with every frame.

A message is a NamedTuple, or a string when it has nothing to say but its kind. The messages that
come with frames cross as cheaply as plain tuples: a frame as a plain tuple of `FrameSent`'s fields,
which the owner names again (`FrameSent._make`), and `WAITING` and `CREDIT` as strings. A pickled
NamedTuple carries a reference to its class, which both ends of a process worker's pipe look up anew
in every message: measured here, a frame's send and receive took 16.5 us of CPU so, 11 as a plain
tuple (and 142 bytes, not 96); a `WAITING` answered by a `CREDIT` 29 us, not 19.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import numpy as np

    from .session import StreamInfo


# -- owner -> worker ------------------------------------------------------------------------------

class Open(NamedTuple):
    """Start a session of `spec` (a `SessionSpec` or a `FileSpec`)."""

    session: int
    spec: Any


class Clip(NamedTuple):
    """Record `session`'s packets from the key frame at or before `start_s` to past `end_s` (the
    session's own presentation times) into `path` (clips.py); a clip open into `path` is extended."""

    session: int
    start_s: float
    end_s: float
    path: str
    #: a file's: the event's frame index (a request from before a loop is refused); -1: none
    index: int = -1


class Thin(NamedTuple):
    """Keep `share` of `session`'s frames from now on (see above); `whole`: by whole groups of pictures,
    from `phase` (decode.py `DecodeShare.by_groups`)."""

    session: int
    share: float
    whole: bool = False
    phase: float = 0.0


class Clock(NamedTuple):
    """A live file's clock, as its owner paces the frames: media time 0 is `start` on
    `time.monotonic()` (one clock for every process of the machine). Sent when the owner anchors it."""

    session: int
    start: float


class Abort(NamedTuple):
    """End `session` now, if it is the one running."""

    session: int


#: end the current session, if any, and the worker
QUIT = "quit"


class NewRing(NamedTuple):
    """Attach this ring, made for the worker's `NeedRing`, and write frames into it from now on."""

    ring_id: int
    name: str
    slots: int
    slot_bytes: int


class NoRing(NamedTuple):
    """Shared memory has no room for the ring `session` asked for: it ends as `refused`, with `line`."""

    session: int
    line: str


#: every frame sent before `WAITING` has been freed
CREDIT = "credit"


# -- worker -> owner ------------------------------------------------------------------------------

class SessionOpened(NamedTuple):
    session: int
    info: StreamInfo


class FrameSent(NamedTuple):
    """A decoded frame: in a ring's slot (a process worker), or packed in `data` (a thread worker).
    It crosses as a plain tuple of these fields (see above)."""

    session: int
    #: the picture's `pixels.picture_layout`
    layout: tuple
    pts: float
    #: `time.time()` and `time.monotonic()` when it was decoded
    ts: float
    clock: float
    decode_ms: float
    #: the motion vectors: None, `("slot", dtype, shape)` (in the slot after the picture) or
    #: `("inline", array)`
    mvs: tuple | None
    #: frames dropped so far (every slot was full) and packets skipped to catch up
    worker_drops: int
    #: packets the decoder rejected so far
    corrupt: int
    #: frames given up so far at the budget controller's say (`Thin`)
    thinned: int
    #: a file's `(index, media seconds since the run began)`, else None
    position: tuple[int, float] | None
    #: where a process worker wrote it (0 and 0 from a thread worker)
    ring_id: int
    slot: int
    #: what a thread worker packed it into (None from a process worker)
    data: np.ndarray | None


class SessionEnded(NamedTuple):
    """`session` is over: why (`session.END_REASONS`), in one line, with the worker's counters and
    what the session says of its end beyond that (the fields of worker.py's `Ended`, in its order;
    `detail["thinned"]`: the frames it gave up at the budget controller's say, when it gave up any)."""

    session: int
    reason: str
    message: str
    worker_drops: int
    corrupt: int
    detail: dict


class NeedRing(NamedTuple):
    """`session` has a picture that needs slots of `slot_bytes`: make a ring (`NewRing` or `NoRing`)."""

    session: int
    slot_bytes: int


#: every slot is full and the session is lossless: answer with `CREDIT`
WAITING = "waiting"


class ClipDone(NamedTuple):
    """What became of a clip (`Clip`): written (`reason` None) or lost, and why (one line).
    `refused`: lost because the request came too late for its session or pass (a request that
    extends a clip asked for before leaves that clip as it is)."""

    path: str
    reason: str | None
    refused: bool = False


class Crashed(NamedTuple):
    """The worker failed: `message`, one line with URLs masked. It ends."""

    message: str
