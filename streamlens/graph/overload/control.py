"""The budget controller: it holds the live streams' p95 latency within `runtime.budget_ms`.

Latency here is end to end: from a frame becoming available (`Frame.clock`) to every sink having
published its result. Two parts hold it:

- a hard limit, in the engine: once the controller has climbed a rung, a live frame that has
  already waited `max_wait_s` when the engine comes to it can no longer meet the budget and is
  dropped there (counted `stale`). Nothing queues past the budget, and the engine drops by age, in
  arrival order, so the streams lose alike. The limit starts at the whole budget (`WAIT_SHARE`: a
  frame that old is late whatever follows); each second whose p95 is over budget takes its excess
  off it (down to `MIN_WAIT_SHARE` of the budget: the rest of a frame's way, tracking and
  publishing, takes that long now), and each second within budget gives half its slack back.
  Below the first rung the limit is `CALM_WAIT_SHARE` budgets (`wait_limit_s`): there a frame
  that old was held up by a stall (a collection, a thread not scheduled for a tenth of a second),
  not by a load, and the p95 has room for a few late frames; dropped at the budget, six RTSP
  cameras the machine carried at half the budget lost 2-16 frames a trial to stalls. A wait
  longer than that is a load, and a p95 over budget makes the controller climb. The keyframes'
  wait, the first rung, counts as below: it is taken on one second's p95, which one stall makes
  (at indoor K=64 a second of 34-48 ms among seconds of 10-20 took it, and the budget's limit then
  dropped 1-63 frames a trial in the stalls of the next seconds);
- the ladder (ladder.py), climbed by the controller once a second (`tick`): it looks at the live
  streams' last second (the p95 of every live stream's frames together, over at least
  `MIN_SAMPLES` of them: a stream's own p95 of the few frames a second it has while shedding is
  its slowest, and read so, one slow frame among a hundred was overload; and the frames dropped
  without its say: too old for the engine, a full queue, a decoder worker's full ring, and those
  that came late from a decode worker that gives up its share undecoded; not those late from
  another source, which shedding after the decoder would not help: the runtime leaves them out:
  counted, a start's burst of them sent it to its top rung for the rest of a 20 s trial at highway
  K=8 on the graph's threads) and, when that p95 is over budget or more than `TAIL_SHARE` of the
  frames were dropped (the wait limit trims a tail of frames that would have been late anyway:
  that is the p95's 5%, not overload), and more than that share of the last `EVIDENCE_WINDOWS`
  seconds' frames, or of those since its last step, missed the budget too (published late or
  dropped: one stall makes a burst of frames late, not a load, each rung taken for one was kept
  for seconds, and under a noisy scheduler they added up), climbs one rung (ladder.py says what
  each gives up, in order), then gives the step until the next tick (`settle_s`) to take effect.

Once it has climbed a rung, every live stream keeps about the same share of its frames
(`fair_shares`): one that lost more otherwise (too old for the engine or from its source, a full
queue: where those fall is the scheduler's doing and chance's) is shed less, one that lost fewer
more: what a stream kept beyond the median share over the last ten seconds (`FAIR_WINDOWS`, in
frames) it gives up over the next two. On the keyframe rungs, where the rung sheds nothing, the
streams that kept more are shed down to the median; by whole groups, all shed the rung's share.

Every frame it drops is counted (`shed`, part of `dropped`) in stats, metrics and the summary.
When that p95 has stayed under 60% of the budget, without losing more than that tail, for
`calm_s`, it comes down one rung, in the reverse order. A load within the budget but above that
(a machine that carries its streams with little room) comes down too, after `PROBE_CALMS` times
as long: the only way to know whether a rung is still needed is to try without it, and without
that try a passing load (a backup, another program) would leave frames shed for good. A step down
that had to be taken back within `calm_s` makes the next one wait twice as long (up to a minute),
so a load at the edge does not see-saw; one that held halves the wait for the next, down to the
settling time and two windows (2.75 s by default; never more than `calm_s` as configured): a
burst (cameras starting, a reconnect) can take the ladder to its top in a second or two, and a
calm wait a rung kept the streams shedding for a minute after it had passed. A new overload (not
a step down taken back) makes the first step down wait the whole `calm_s` again. Shedding reads
the CPU (room.py): with the process using much less than lately, it steps down as when calm, as far
as that room allows; past the keyframe rungs it sheds more only while the cores are busy: frames
late with cores idle are a burst, shed by whole groups of pictures instead (`whole_groups`).

Example:
    >>> t = [0.0]
    >>> c = BudgetController(33, ["cam1", "cam2"], max_stretch=2, clock=lambda: t[0])
    >>> def second(ms, drops={"cam1": 0, "cam2": 0}):   # drops: counts so far, outside the controller
    ...     t[0] += 1.0
    ...     for stream in ("cam1", "cam2"): c.observe(stream, ms[stream])
    ...     return c.tick(drops)
    >>> [second({"cam1": 50, "cam2": 20}) for _ in range(4)]
    ['keyframe intervals x1.5', 'keyframe intervals x2', 'batching for throughput', 'dropping 1 in 8']
    >>> c.shedders["cam1"].fraction, c.shedders["cam2"].fraction
    (0.125, 0.125)
    >>> second({"cam1": 20, "cam2": 20}, {"cam1": 2, "cam2": 2})   # 4 frames lost, 2 published
    'dropping 3 in 4'
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from ...metrics import nearest_rank
from .ladder import Rungs
from .room import CpuRoom
from .shedding import SHED_STEPS, Shedder, fair_shares, shed_name

#: keyframe interval factors, in the order the controller tries them
STRETCHES = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0)
#: a p95 under this share of the budget is calm
CALM_SHARE = 0.6
#: the share of the budget a live frame may have waited when the engine comes to it, at most (see the docs)
WAIT_SHARE = 1.0
#: frames the engine may lose in a second (of those it published and lost) before that counts as
#: overload: the budget is a p95, and the wait limit trims a tail that would have been late anyway
TAIL_SHARE = 0.05
#: ... and the least share that limit is taken down to
MIN_WAIT_SHARE = 0.25
#: below the first rung, the budgets a live frame may have waited when the engine comes to it (see the docs)
CALM_WAIT_SHARE = 3.0
#: the longest wait between two steps down, seconds
MAX_CALM_S = 60.0
#: steps down that held shorten the wait for the next, down to the settling time and this many windows
FAST_CALM_WINDOWS = 2
#: a load within the budget but not calm steps down after this many times the calm wait
PROBE_CALMS = 3
#: the share of a second's frames the engine lost past which the keyframe rungs are taken at once
ROUT_SHARE = 0.5
#: the p95 the controller reads is taken over at least this many frames (the p95 of 21 leaves out
#: their slowest): the p95 of a handful of frames is their slowest, and one slow frame among a few
#: then read as overload (and shedding left fewer frames still to judge by)
MIN_SAMPLES = 21
#: ... looking back at most this many windows for them
HISTORY_WINDOWS = 5
#: a second whose p95 is over budget, or that lost more than `TAIL_SHARE` of its frames, is
#: overload only if, over this many windows (or since the last step, where that is later), more
#: than that share missed the budget: one stall (a thread not scheduled for a tenth of a second, a
#: collection) makes a burst of frames late or lost but is not a load that shedding would answer,
#: and a rung taken for each such second was kept for seconds (at indoor K=48 the controller
#: climbed on single seconds' p95 of 34-40 ms between seconds of 8-25 ms, and came down a rung in
#: 15 s; tools/results/overload.md). A load is still answered at once when more than three times
#: that share of a second's frames are late, and within this many seconds when more than that share
#: of each second's are
EVIDENCE_WINDOWS = 3
#: fair shares weigh what each stream kept over this many windows (about ten seconds), so that
#: what chance took from a stream over that long is made up for
FAIR_WINDOWS = 10


class BudgetController:
    """The ladder of the module's docstring, for the live streams of one pipeline.

    `observe(stream, ms)` (any thread) takes each published frame's end-to-end latency; `tick(drops)`
    (one thread, about once a second) takes each stream's count of frames dropped so far outside
    the controller, decides, and returns what it did (or None). The runtime reads `stretch`,
    `wait`, `throughput`, `wait_limit_s` and `shedders[stream]` and applies them."""

    def __init__(self, budget_ms: float, streams: list[str], *, max_stretch: float = 4.0,
                 window_s: float = 1.0, calm_s: float = 5.0, settle_s: float = 0.75, keyframe_wait: bool = False,
                 wait_share: float = WAIT_SHARE, clock: Callable[[], float] = time.monotonic,
                 cpu: Callable[[], float] | None = None,
                 machine: Callable[[], tuple[float, float] | None] | None = None):
        """`cpu`, `machine`: the process's CPU seconds so far, the machine's idle and all (room.py)."""
        self.budget_ms = float(budget_ms)
        self.stretches = tuple(s for s in STRETCHES if s <= max(1.0, max_stretch))
        self.window_s = window_s
        self.settle_s = settle_s
        self.calm_s = self._least_calm_s = calm_s
        #: the shortest wait between two steps down that hold: the next window after the step settled
        self._fastest_calm_s = min(calm_s, settle_s + FAST_CALM_WINDOWS * window_s)
        self.clock = clock
        #: how long a live frame may have waited when the engine comes to it (seconds)
        self.max_wait_s = self._most_wait_s = self.budget_ms * wait_share / 1000
        self.shedders = {name: Shedder(i / len(streams)) for i, name in enumerate(streams)}
        self.throughput = False
        #: whether "batching for throughput" is a rung: False for a detector of one keyframe a call (`attach`)
        self.batching_rung = True
        #: whether live keyframes wait for their detections (rung 0; always True without `keyframe_wait`)
        self.wait = True
        self._wait_rung = keyframe_wait
        #: what the controller did, most recent last
        self.actions: deque[str] = deque(maxlen=64)
        #: every step taken, up or down (`actions` keeps the last 64 of them)
        self.steps = 0
        self._stretch_index = 0
        self._shed_index = 0
        #: the last rung: live sources decode their keyframes only, where they can (`Shedder`)
        self.keyframes_only = False
        self._samples = {name: deque() for name in streams}
        self._lock = threading.Lock()
        self._drops: dict[str, int] = {}
        self._losses: dict[str, int] = {}  # each stream's frames lost but shed, so far
        self._shed_so_far: dict[str, int] = {}  # ... and shed, so far
        #: each stream's last `FAIR_WINDOWS` windows: frames published, lost otherwise, shed
        self._history: dict[str, deque[tuple[int, int, int]]] = {}
        self._calm_since: float | None = None  # every stream calm since
        self._steady_since: float | None = None  # every stream within the budget since
        self._last_up: float | None = None
        self._last_down: float | None = None
        self._last_step = float("-inf")
        self._lost: deque[tuple[float, int]] = deque()  # (tick, frames lost without its say since the last)
        self._room = CpuRoom(cpu, machine) if cpu is not None else None
        #: shedding gives up whole groups of pictures, not their ends (a load that comes in bursts, see `tick`)
        self.whole_groups = False
        #: steps down taken because the process had room while shedding (see `tick`)
        self.room_steps = 0
        #: the rung the other engines of this machine have climbed (`hold_floor`, ladder.py)
        self.floor = 0

    @property
    def stretch(self) -> float:
        """The factor on every live stream's keyframe intervals (1.0: as configured)."""
        return self.stretches[self._stretch_index]

    @property
    def wait_limit_s(self) -> float:
        """How long a live frame may have waited when the engine comes to it, now: `max_wait_s` once
        the controller has climbed a rung that answers a load; `CALM_WAIT_SHARE` budgets below it,
        the keyframes' wait included (see the docs)."""
        rungs = self.applied()
        if rungs.level - (not rungs.wait):  # a rung past the keyframes' wait
            return self.max_wait_s
        return max(self.max_wait_s, CALM_WAIT_SHARE * self.budget_ms / 1000)

    @property
    def shed(self) -> float:
        """The share of every live stream's frames dropped (0.0: none)."""
        return SHED_STEPS[self._shed_index]

    @property
    def level(self) -> int:
        """Rungs climbed: 0 is the pipeline as configured."""
        return self._stretch_index + self.throughput + (not self.wait) + self._shed_index + self.keyframes_only

    def applied(self) -> Rungs:
        """What the runtime applies: this controller's own rungs, or the floor's where it is higher."""
        own = Rungs(self.wait, self._stretch_index, self.throughput, self._shed_index, self.keyframes_only)
        if self.floor <= own.level:
            return own
        return Rungs.at(self.floor, wait_rung=self._wait_rung, stretches=len(self.stretches),
                        batching=self.batching_rung)

    def hold_floor(self, level: int) -> None:
        """Apply at least `level` rungs from now on (the other engines' highest, ladder.py); this
        controller's own rung, which it still climbs and comes down on its own evidence, is unchanged."""
        self.floor = max(0, int(level))
        self._share_fairly()

    def add(self, stream: str) -> Shedder:
        """A live stream added while running (graph/run/changes.py): watched from now on, shedding what
        the others shed; its shedder. `shedders` and the samples are replaced, not changed, so a
        `tick` or a reader on another thread goes on over the ones it has."""
        shedder = Shedder((len(self.shedders) * 0.618) % 1.0)  # phases spread as streams come
        rungs = self.applied()
        shedder.fraction, shedder.keyframes_only = SHED_STEPS[rungs.shed_index], rungs.keyframes_only
        with self._lock:
            self._samples = {**self._samples, stream: deque()}
            self.shedders = {**self.shedders, stream: shedder}
        return shedder

    def shedder(self, stream: str) -> Shedder:
        """`stream`'s shedder: the one made for it at the start, or a new one (`add`) for a stream
        added since. Its owner (graph/run/stream.py) keeps it and lets its source thin for it."""
        found = self.shedders.get(stream)
        return found if found is not None else self.add(stream)

    def attach(self, sources, batches: bool = True) -> None:
        """Each source with a shedder here thins its own decoding for it where it can (`Shedder.attach`);
        `batches`: whether the detector runs more than one keyframe a call (False: the ladder has no
        "batching for throughput" rung)."""
        self.batching_rung = batches
        for source in sources:
            if source.name in self.shedders:
                self.shedders[source.name].attach(source)

    def observe(self, stream: str, ms: float, own_budget_ms: float | None = None) -> None:
        """A frame of `stream` published `ms` after it became available. `own_budget_ms`: the budget
        that frame was held to, where it had one of its own (a keyframe published with its detections
        waited for them up to `detector.budget_ms`): where it is the larger, the frame is read against
        it (its `ms` in that budget's share), so that keyframes a user lets wait longer do not make
        the controller stop their waiting."""
        if own_budget_ms and self.budget_ms and own_budget_ms > self.budget_ms:
            ms *= self.budget_ms / own_budget_ms
        samples = self._samples.get(stream)
        if samples is not None:
            with self._lock:
                samples.append((self.clock(), ms))

    def pooled_p95(self) -> float | None:
        """The p95 of every live stream's frames together over the last `window_s`, or over their
        last `MIN_SAMPLES` frames where the window holds fewer (back to `HISTORY_WINDOWS` windows);
        None: no frame in that time."""
        since = self.clock() - self.window_s
        with self._lock:
            every = [sample for samples in self._samples.values() for sample in samples]
        values = [ms for t, ms in every if t > since]
        if len(values) < MIN_SAMPLES:
            values = [ms for _, ms in sorted(every)[-MIN_SAMPLES:]]
        return nearest_rank(sorted(values), 0.95) if values else None

    def late_share(self) -> float:
        """The share of every live stream's frames that missed the budget (published over it, or lost
        without the controller's say) over the last `EVIDENCE_WINDOWS` windows, or since the last
        step where that is later (0.0: no frame in that time)."""
        since = max(self.clock() - EVIDENCE_WINDOWS * self.window_s, self._last_step)
        with self._lock:
            every = [ms for samples in self._samples.values() for t, ms in samples if t > since]
        lost = sum(n for t, n in self._lost if t > since)
        late = lost + sum(1 for ms in every if ms > self.budget_ms)
        return late / (lost + len(every)) if late else 0.0

    def tick(self, drops: dict[str, int], losses: dict[str, int] | None = None,
             pace: float | None = None) -> str | None:
        """`drops`: each stream's frames lost so far that the controller answers (graph/run/losses.py
        `Losses.for_controller`); `losses`: every frame each lost so far but those shed, for fair
        shares (None: `drops`); `pace`: the stretch the detector delivers (chooser.py `pace`)."""
        now = self.clock()
        with self._lock:
            for samples in self._samples.values():
                while samples and samples[0][0] <= now - HISTORY_WINDOWS * self.window_s:
                    samples.popleft()
            counts = {name: sum(1 for t, _ in samples if t > now - self.window_s)
                      for name, samples in self._samples.items()}
            published = sum(counts.values())
        self._record(counts, drops if losses is None else losses)
        p95 = self.pooled_p95()
        lost = sum(max(0, n - self._drops.get(name, n)) for name, n in drops.items() if name in self._samples)
        self._drops.update(drops)
        self._lost.append((now, lost))
        while self._lost[0][0] <= now - HISTORY_WINDOWS * self.window_s:
            self._lost.popleft()
        lost_share = lost / (lost + published) if lost else 0.0
        slow = p95 is not None and p95 > self.budget_ms
        over_now = slow or lost_share > TAIL_SHARE
        # the keyframes' wait, the cheapest rung, goes at a p95 over budget; a rung that costs
        # detections or frames needs the evidence of `EVIDENCE_WINDOWS` seconds too
        over = (slow and self._wait_rung and self.wait) or (over_now and self.late_share() > TAIL_SHARE)
        room = self._room is not None and self._room.has_room(now, self._shed_index > 0 or self.keyframes_only)
        if room and over:
            # frames shed and the CPU they freed unused: what is late is not a load (at the top of
            # the ladder, I-frames decoded late against a trimmed wait limit kept a run shedding 9
            # in 10 for 20-50 s after a 10 s load had passed): step down as when calm
            over, over_now, p95 = False, False, None
        self._adjust_wait(p95)
        if over:
            self._calm_since = self._steady_since = None
            if self._last_down is not None and now - self._last_down < self.calm_s:
                self.calm_s = min(MAX_CALM_S, 2 * self.calm_s)  # that step down was one too many
            else:  # a new load: the first step down waits the whole calm time again
                self.calm_s = max(self.calm_s, self._least_calm_s)
            self._last_down = None
            if self._last_up is not None and now - self._last_up < self.settle_s:
                return None  # the last step has not had its time yet
            if not self._keyframe_rungs_left and self._room is not None and not self._room.busy:
                self.whole_groups = True  # late with cores idle: a burst (see the docs)
                self._share_fairly()
                return None
            self._last_up = self._last_step = now
            action = self._note(self._step_up(lost_share, pace or 1.0))
            self._share_fairly()
            return action
        self._share_fairly()
        if self.level == 0:
            self._calm_since = self._steady_since = None
            self.whole_groups = False
            return None
        calm = room or (not over_now and (p95 is None or p95 < CALM_SHARE * self.budget_ms))
        if self._steady_since is None:
            self._steady_since = now
        if not calm:
            self._calm_since = None
        elif self._calm_since is None:
            self._calm_since = now
        if ((self._calm_since is None or now - self._calm_since < self.calm_s)
                and now - self._steady_since < PROBE_CALMS * self.calm_s):
            return None
        if self._last_down is not None or room:  # the last step down held, or there is room: sooner
            self.calm_s = self._fastest_calm_s if room else max(self._fastest_calm_s, self.calm_s / 2)
        self._calm_since = self._steady_since = self._last_down = self._last_step = now
        self.room_steps += room
        action = self._note(self._step_down(self._room.keep(1.0 - self.shed) if room else None))
        self._share_fairly()
        return action

    def _record(self, counts: dict[str, int], losses: dict[str, int]) -> None:
        """Each stream's last second into its history: frames published (`counts`), lost otherwise
        and shed."""
        shedders = self.shedders
        for name, total in losses.items():
            if name not in counts or name not in shedders:
                continue
            lost = max(0, total - self._losses.get(name, total))
            self._losses[name] = total
            shed_total = shedders[name].dropped
            shed = max(0, shed_total - self._shed_so_far.get(name, shed_total))
            self._shed_so_far[name] = shed_total
            self._history.setdefault(name, deque(maxlen=FAIR_WINDOWS)).append((counts[name], lost, shed))

    def _share_fairly(self) -> None:
        """Every shedder's share from the rung's and what each stream kept (`fair_shares`; by whole
        groups, the rung's alike), and its keyframes only: the rungs applied (own or the floor's)."""
        shedders, rungs = self.shedders, self.applied()
        if rungs.level == 0 or self.whole_groups:  # none shed; or by whole groups, each stream alike
            shares = dict.fromkeys(shedders, SHED_STEPS[rungs.shed_index] if rungs.level else 0.0)
        else:
            shares = fair_shares(SHED_STEPS[rungs.shed_index],
                                 {name: list(self._history.get(name, ())) for name in shedders})
        for name, share in shares.items():
            shedders[name].fraction = share
            shedders[name].keyframes_only = rungs.keyframes_only
            shedders[name].whole_groups = self.whole_groups

    def _adjust_wait(self, worst_ms: float | None) -> None:
        """The hard limit follows the second's p95 (see the docs). No frame published for
        `HISTORY_WINDOWS` windows gives back as much as a p95 of 0: a limit trimmed at a start's
        burst then dropped every frame as too old, and no p95 came to give it back (indoor K=128
        on the graph's threads: the limit stayed at 8 ms for 20 s, until the controller reached
        keyframes only)."""
        if worst_ms is None:
            worst_ms = 0.0
        if worst_ms > self.budget_ms:
            least = min(self._most_wait_s, MIN_WAIT_SHARE * self.budget_ms / 1000)
            self.max_wait_s = max(least, self.max_wait_s - (worst_ms - self.budget_ms) / 1000)
        else:
            self.max_wait_s = min(self._most_wait_s, self.max_wait_s + (self.budget_ms - worst_ms) / 2000)

    def _note(self, action: str | None) -> str | None:
        if action:
            self.actions.append(action)
            self.steps += 1
        return action

    def _step_up(self, lost_share: float, pace: float = 1.0) -> str | None:
        """One rung up; a stretch as far as `pace` and shedding as far as `lost_share` (of the frames
        that reached the engine, the share dropped there) say is needed. When the engine lost
        `ROUT_SHARE` of the second's frames or more, the keyframe rungs are all taken at once (in
        their order), so that frames are shed from the next tick on, not a rung a tick later."""
        if lost_share >= ROUT_SHARE and self._keyframe_rungs_left:
            self.wait = not self._wait_rung and self.wait
            self._stretch_index = len(self.stretches) - 1
            self.throughput = self.batching_rung
            taken = [f"keyframe intervals x{self.stretch:g}"] if self.stretch > 1.0 else []
            if self.throughput:
                taken.append("batching for throughput")
            return " and ".join(taken or ["keyframes no longer wait"]) + " at once"
        if self._wait_rung and self.wait:
            self.wait = False
            return "keyframes no longer wait"
        if self._stretch_index + 1 < len(self.stretches):  # at once as far as the detector lags (docs)
            index = self._stretch_index + 1
            while index + 1 < len(self.stretches) and self.stretches[index] < pace - 1e-9:
                index += 1
            self._stretch_index = index
            return f"keyframe intervals x{self.stretch:g}"
        if not self.throughput and self.batching_rung:
            self.throughput = True
            return "batching for throughput"
        if self._shed_index + 1 == len(SHED_STEPS):
            return None if self.keyframes_only else self._set_keyframes_only(True)
        needed = 1.0 - (1.0 - self.shed) * (1.0 - lost_share)  # the share that would have carried it
        index = self._shed_index + 1
        while index + 1 < len(SHED_STEPS) and SHED_STEPS[index] < needed - 1e-9:
            index += 1
        return self._set_shed(index)

    @property
    def _keyframe_rungs_left(self) -> bool:
        """Whether a rung before shedding is still to climb."""
        return ((self._wait_rung and self.wait) or self._stretch_index + 1 < len(self.stretches)
                or (self.batching_rung and not self.throughput))

    def _step_down(self, keep: float | None = None) -> str:
        """One rung down; with `keep` (room, see `tick`), the shedding rung goes as far down as the
        share of frames to keep allows, in one step."""
        if self.keyframes_only:
            return self._set_keyframes_only(False)
        if self._shed_index:
            index = self._shed_index - 1
            while keep is not None and index > 0 and 1.0 - SHED_STEPS[index - 1] <= keep:
                index -= 1
            return self._set_shed(index)
        if self.throughput:
            self.throughput = False
            return "batching for latency"
        if self._stretch_index:
            self._stretch_index -= 1
            return f"keyframe intervals x{self.stretch:g}"
        self.wait = True
        return "keyframes wait again"

    def _set_shed(self, index: int) -> str:
        self._shed_index = index
        self._share_fairly()
        return f"dropping {shed_name(self.shed)}" if self.shed else "no longer dropping"

    def _set_keyframes_only(self, on: bool) -> str:
        self.keyframes_only = on
        self._share_fairly()
        return "decoding keyframes only" if on else "decoding every frame again"

    def state(self, stream: str) -> dict:
        """What the controller does to `stream` now, for its stats: the rungs applied; `floor` (the
        other engines' highest rung) only while it, not this controller's own, holds them."""
        shedder, rungs = self.shedders.get(stream), self.applied()
        state = {"level": rungs.level, "keyframe_stretch": self.stretches[rungs.stretch_index],
                 "keyframe_wait": rungs.wait, "batching": "throughput" if rungs.throughput else "latency",
                 "shed_fraction": shedder.fraction if shedder else 0.0, "keyframes_only": rungs.keyframes_only}
        if self.floor > self.level:
            state["floor"] = self.floor
        return state
