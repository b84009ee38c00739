"""Overload: past what the machine carries, latency holds, keyframes give way first, then frames,
shed alike across the live streams, every one counted. Crafted lane states, crafted latencies and
a fake clock: nothing here depends on the machine's speed."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from streamlens.config import TrackerConfig
from streamlens.detect.motion import MotionDetector
from streamlens.frame import EndOfStream, Frame, FrameResult
from streamlens.graph.admit import Admission
from streamlens.graph.channel import Channel
from streamlens.graph.overload.control import (CALM_WAIT_SHARE, MIN_WAIT_SHARE, PROBE_CALMS, SHED_STEPS, WAIT_SHARE,
                                      BudgetController, Shedder)
from streamlens.graph.engine import DetectWorker, Engine, Lane
from streamlens.graph.overload.shedding import fair_shares
from streamlens.graph.schedule.chooser import KeyframeChooser
from streamlens.graph.schedule.keyframes import SceneCutDetector
from streamlens.track import build_tracker

from .test_budget import Clock, feed

CALM = SimpleNamespace(confidence=1.0, untracked_motion=0.0, births=1, losses=0, keyframe=None)


# -- the controller --------------------------------------------------------------------------------


def test_the_order_of_steps_is_keyframes_then_batching_then_frames_for_every_stream_alike():
    clock = Clock()
    streams = [f"cam{i}" for i in range(6)]
    c = BudgetController(33, streams, max_stretch=4, clock=clock, keyframe_wait=True)
    # one stream far over budget, the others well within: the whole ladder is climbed in order
    ms = {name: 10.0 for name in streams} | {"cam3": 80.0}
    actions = feed(c, clock, ms, seconds=9)
    assert actions == ["keyframes no longer wait", "keyframe intervals x1.5", "keyframe intervals x2",
                       "keyframe intervals x3", "keyframe intervals x4", "batching for throughput",
                       "dropping 1 in 8", "dropping 1 in 4", "dropping 1 in 3"]
    # the same share for every live stream: the stream over budget is not singled out
    assert {s.fraction for s in c.shedders.values()} == {1 / 3} and c.shed == 1 / 3
    assert all(c.state(name)["shed_fraction"] == 1 / 3 for name in streams)


def test_frames_lost_in_the_engine_make_shedding_jump_to_the_share_that_carries_the_load():
    clock = Clock()
    c = BudgetController(33, ["a", "b"], max_stretch=1, clock=clock)
    drops = {"a": 0, "b": 0}
    assert feed(c, clock, {"a": 40, "b": 40}, drops) == ["batching for throughput"]
    # a second in which 64 frames were published (32 a stream) and 64 lost in the engine: half the
    # load was too much; shedding goes at once to the first share that would have carried it
    assert feed(c, clock, {"a": 20, "b": 20}, {"a": 32, "b": 32}) == ["dropping 1 in 2"]
    # with 1 in 2 shed, a third of what still came was lost: 1 - (1/2)(2/3) = 2/3
    assert feed(c, clock, {"a": 20, "b": 20}, {"a": 48, "b": 48}) == ["dropping 2 in 3"]
    assert [s.fraction for s in c.shedders.values()] == [2 / 3, 2 / 3]
    # nothing lost and within budget: it holds (the step down waits for calm)
    assert feed(c, clock, {"a": 25, "b": 25}, {"a": 48, "b": 48}, seconds=3) == [None] * 3


def test_when_the_engine_loses_most_frames_the_keyframe_rungs_are_taken_at_once_then_frames_shed():
    """Past a hundred streams a rung a tick left nearly every frame lost for seconds: with half or
    more of a second's frames lost, the keyframe rungs go in one step (still first), frames next."""
    clock = Clock()
    c = BudgetController(33, ["a", "b"], max_stretch=4, clock=clock, keyframe_wait=True)
    assert feed(c, clock, {"a": 20, "b": 20}, {"a": 0, "b": 0}) == [None]
    assert feed(c, clock, {"a": 20, "b": 20}, {"a": 100, "b": 100}) == [
        "keyframe intervals x4 and batching for throughput at once"]
    assert (c.wait, c.stretch, c.throughput, c.shed) == (False, 4.0, True, 0.0)
    assert feed(c, clock, {"a": 20, "b": 20}, {"a": 200, "b": 200}) == ["dropping 5 in 6"]  # 200 of 264 lost
    # a loss under that share climbs a rung a tick, as before
    slow = BudgetController(33, ["a"], max_stretch=4, clock=clock)
    feed(slow, clock, {"a": 20}, {"a": 0})
    assert feed(slow, clock, {"a": 20}, {"a": 20}) == ["keyframe intervals x1.5"]


def test_a_tail_of_frames_too_old_for_the_budget_is_not_overload():
    clock = Clock()
    c = BudgetController(33, ["a", "b"], max_stretch=1, clock=clock)
    assert feed(c, clock, {"a": 15, "b": 15}, {"a": 0, "b": 0}) == [None]
    # 64 frames published in the second, 3 dropped for their age (4.5%): the p95's share, not overload
    assert feed(c, clock, {"a": 15, "b": 15}, {"a": 2, "b": 1}) == [None]
    # 4 of 68 (5.9%) in one second, after seconds within the tail: a burst, not yet a load
    assert feed(c, clock, {"a": 15, "b": 15}, {"a": 6, "b": 1}) == [None]
    # the same again: 11 of the last three seconds' 203 frames (5.4%) missed the budget
    assert feed(c, clock, {"a": 15, "b": 15}, {"a": 10, "b": 1}) == ["batching for throughput"]


def test_shedding_climbs_to_its_last_rung_and_no_further():
    clock = Clock()
    c = BudgetController(33, ["a"], max_stretch=1, clock=clock)
    feed(c, clock, {"a": 40}, {"a": 0})
    assert feed(c, clock, {"a": 20}, {"a": 10_000}) == ["dropping 9 in 10"]
    assert c.shed == SHED_STEPS[-1]
    # the last rung: live files decoded on their own thread decode their keyframes only
    assert feed(c, clock, {"a": 20}, {"a": 20_000}) == ["decoding keyframes only"]
    assert c.keyframes_only and c.shedders["a"].keyframes_only and c.state("a")["keyframes_only"]
    assert feed(c, clock, {"a": 20}, {"a": 30_000}) == [None]  # nothing left to give here: the engine
    # still drops what it cannot carry in time
    assert feed(c, clock, {"a": 5}, {"a": 30_000}, seconds=6)[-1] == "decoding every frame again"  # first down
    assert not c.shedders["a"].keyframes_only and c.shed == SHED_STEPS[-1]


class Cpu:
    """The run's CPU seconds as `BudgetController(cpu=)` reads them: `cores` in use, integrated
    over the fake clock's time."""

    def __init__(self, clock: Clock, cores: float):
        self.clock, self.cores, self.used, self.last = clock, cores, 0.0, 0.0

    def __call__(self) -> float:
        self.used += (self.clock.now - self.last) * self.cores
        self.last = self.clock.now
        return self.used


def test_shedding_that_frees_the_cpu_for_nothing_is_given_back_though_frames_are_still_late():
    """A load that passed (another program, a start's burst) left the ladder at its top, and what
    is late there is not a load (a keyframe's picture decoded late against a trimmed wait limit):
    the run's process now uses a tenth of the CPU it did, so the controller steps down as when calm,
    and from a shedding rung as far as the CPU's room allows at once (keep at most 4x as many)."""
    clock = Clock()
    cpu = Cpu(clock, 1.0)
    c = BudgetController(33, ["a", "b"], max_stretch=1, clock=clock, cpu=cpu)
    feed(c, clock, {"a": 20, "b": 20}, {"a": 0, "b": 0}, seconds=4)  # busy, within budget
    feed(c, clock, {"a": 40, "b": 40}, {"a": 10_000, "b": 10_000})
    feed(c, clock, {"a": 40, "b": 40}, {"a": 20_000, "b": 20_000}, seconds=2)
    assert c.keyframes_only and c.shed == SHED_STEPS[-1]
    cpu.cores = 0.1  # the frames shed, the CPU idle: yet each second's p95 is still over budget
    actions = [a for a in feed(c, clock, {"a": 40, "b": 40}, {"a": 20_000, "b": 20_000}, seconds=13) if a]
    # the first after the calm wait (5 s), then every 2.75 s (the settling time and two windows)
    assert actions == ["decoding every frame again", "dropping 2 in 3", "no longer dropping"]
    assert c.room_steps == 3 and all(s.fraction == 0 for s in c.shedders.values())


def test_a_load_that_keeps_the_cpu_busy_keeps_its_rung_though_shedding():
    clock = Clock()
    c = BudgetController(33, ["a"], max_stretch=1, clock=clock, cpu=Cpu(clock, 1.0))
    feed(c, clock, {"a": 20}, {"a": 0}, seconds=4)
    feed(c, clock, {"a": 40}, {"a": 0})
    assert feed(c, clock, {"a": 20}, {"a": 40}) == ["dropping 2 in 3"]
    feed(c, clock, {"a": 40}, {"a": 40}, seconds=12)  # still over budget, the CPU as busy as before
    assert c.shed >= 2 / 3 and c.room_steps == 0


class Machine:
    """The machine's idle and all CPU time so far (cpu.py `machine_idle`) under the fake clock: two
    cores, `idle` of them idle."""

    def __init__(self, clock: Clock, idle: float):
        self.clock, self.idle, self.times, self.last = clock, idle, (0.0, 0.0), 0.0

    def __call__(self) -> tuple[float, float]:
        seconds, self.last = self.clock.now - self.last, self.clock.now
        self.times = (self.times[0] + 2 * seconds * self.idle, self.times[1] + 2 * seconds)
        return self.times


def test_frames_late_while_cores_idle_are_a_burst_shed_by_whole_groups_not_by_more_frames():
    """Copies of one clip in step decode their keyframes at once: shedding each group's end left
    that burst whole and idled the cores after it, so the frames stayed late and the controller
    climbed on (highway K=21: to 3 in 4). Past the keyframe rungs, late frames with the process
    under 90% of its most CPU and the machine's cores idle take no more shedding: every stream
    sheds the rung's share by whole groups instead. Another program taking the idle cores is a load
    again; and the way back to no overload ends the whole groups."""
    clock = Clock()
    cpu, machine = Cpu(clock, 1.0), Machine(clock, 0.02)
    c = BudgetController(33, ["a", "b"], max_stretch=1, clock=clock, cpu=cpu, machine=machine)
    feed(c, clock, {"a": 20, "b": 20}, {"a": 0, "b": 0}, seconds=4)
    assert feed(c, clock, {"a": 40, "b": 40}, {"a": 0, "b": 0}) == ["batching for throughput"]
    assert feed(c, clock, {"a": 40, "b": 40}, {"a": 4, "b": 4}) == ["dropping 1 in 8"]
    assert not c.whole_groups and not c.shedders["a"].whole_groups
    cpu.cores, machine.idle = 0.8, 0.3  # shedding idled the cores: yet the frames are late
    feed(c, clock, {"a": 40, "b": 40}, {"a": 4, "b": 4}, seconds=3)  # the CPU is judged over 3 ticks
    held = c.shed
    assert feed(c, clock, {"a": 40, "b": 40}, {"a": 4, "b": 4}, seconds=6) == [None] * 6
    assert c.shed == held and c.whole_groups
    assert all(s.whole_groups and s.fraction == held for s in c.shedders.values())
    machine.idle = 0.0  # another program takes the idle cores: a load shedding answers
    feed(c, clock, {"a": 40, "b": 40}, {"a": 4, "b": 4}, seconds=4)
    assert c.shed > held
    actions = feed(c, clock, {"a": 5, "b": 5}, {"a": 4, "b": 4}, seconds=40)
    assert actions[-1] is None and c.level == 0 and not c.whole_groups
    assert not any(s.whole_groups or s.fraction for s in c.shedders.values())


def test_a_process_that_keeps_its_cores_busy_sheds_more_though_the_machine_has_idle_cores():
    """One engine's process held by its interpreter lock uses one core of two: the machine has one
    idle, yet the process is at its most, a load that shedding answers."""
    clock = Clock()
    c = BudgetController(33, ["a"], max_stretch=1, clock=clock, cpu=Cpu(clock, 1.0), machine=Machine(clock, 0.5))
    feed(c, clock, {"a": 20}, {"a": 0}, seconds=4)
    feed(c, clock, {"a": 40}, {"a": 0})
    actions = feed(c, clock, {"a": 40}, {"a": 40}, seconds=4)
    assert actions[0] == "dropping 2 in 3" and "dropping 3 in 4" in actions and not c.whole_groups


def test_a_detector_already_behind_its_schedule_takes_the_interval_stretches_it_delivers_at_once():
    """A detector that brings each stream a keyframe every third interval (`pace` 3, chooser.py) frees
    no core when the intervals stretch x1.5 or x2: it stays as busy as before. Over budget, the
    first stretch goes to x3 at once, then the ladder goes on a rung a step; on schedule, a rung a
    step from the first."""
    for pace, first in ((3.0, ["keyframe intervals x3", "keyframe intervals x4", "batching for throughput",
                               "dropping 1 in 8"]),
                        (None, ["keyframe intervals x1.5", "keyframe intervals x2", "keyframe intervals x3",
                                "keyframe intervals x4"])):
        clock = Clock()
        c = BudgetController(33, ["a", "b"], max_stretch=4, clock=clock)
        actions = []
        for _ in range(4):
            for _ in range(32):
                clock.now += 1 / 32
                c.observe("a", 45.0)
                c.observe("b", 45.0)
            actions.append(c.tick({"a": 0, "b": 0}, pace=pace))
        assert actions == first


def test_steps_down_one_rung_at_a_time_in_the_reverse_order():
    clock = Clock()
    c = BudgetController(33, ["a", "b"], max_stretch=1.5, clock=clock, calm_s=2, keyframe_wait=True)
    feed(c, clock, {"a": 20, "b": 20}, {"a": 0, "b": 0})
    feed(c, clock, {"a": 50, "b": 20}, {"a": 0, "b": 0}, seconds=3)  # wait, x1.5, batching
    assert feed(c, clock, {"a": 20, "b": 20}, {"a": 32, "b": 32}) == ["dropping 1 in 2"]
    actions = [a for a in feed(c, clock, {"a": 5, "b": 5}, {"a": 32, "b": 32}, seconds=20) if a]
    assert actions == ["dropping 1 in 3", "dropping 1 in 4", "dropping 1 in 8", "no longer dropping",
                       "batching for latency", "keyframe intervals x1", "keyframes wait again"]
    assert c.level == 0 and all(s.fraction == 0 for s in c.shedders.values())


def test_a_detector_of_one_keyframe_a_call_has_no_batching_rung_up_or_down():
    """YOLOX-Nano's ONNX export runs one frame a call: "batching for throughput" would change
    nothing, so the ladder goes from the widest intervals to shedding, the rout takes only the
    keyframe rungs, and the way down has no calm wait spent on batching."""
    clock = Clock()
    c = BudgetController(33, ["a", "b"], max_stretch=1.5, clock=clock, calm_s=2, keyframe_wait=True)
    c.attach([], batches=False)
    feed(c, clock, {"a": 20, "b": 20}, {"a": 0, "b": 0})
    assert feed(c, clock, {"a": 50, "b": 20}, {"a": 0, "b": 0}, seconds=3) == [
        "keyframes no longer wait", "keyframe intervals x1.5", "dropping 1 in 8"]
    assert not c.throughput
    actions = [a for a in feed(c, clock, {"a": 5, "b": 5}, {"a": 0, "b": 0}, seconds=12) if a]
    assert actions == ["no longer dropping", "keyframe intervals x1", "keyframes wait again"] and c.level == 0
    # half a second's frames lost: the keyframe rungs at once, and frames shed from the next tick
    assert feed(c, clock, {"a": 20, "b": 20}, {"a": 100, "b": 100}) == ["keyframe intervals x1.5 at once"]
    assert (c.wait, c.stretch, c.throughput) == (False, 1.5, False)
    assert feed(c, clock, {"a": 20, "b": 20}, {"a": 200, "b": 200}) == ["dropping 5 in 6"]


def test_a_passing_load_leaves_no_rung_behind_when_the_streams_run_within_budget_but_not_calm():
    # Overload for a while (another program on the machine), then the streams run at 25 ms of a
    # 33 ms budget: within it, never under the calm 60%. The controller tries a rung down every
    # PROBE_CALMS * calm_s, and is back to the pipeline as configured.
    clock = Clock()
    c = BudgetController(33, ["a", "b"], max_stretch=1.5, clock=clock, calm_s=2)
    feed(c, clock, {"a": 20, "b": 20}, {"a": 0, "b": 0})
    feed(c, clock, {"a": 50, "b": 50}, {"a": 0, "b": 0}, seconds=3)  # x1.5, batching, 1 in 8
    assert c.level == 3
    probe = PROBE_CALMS * 2
    actions = feed(c, clock, {"a": 25, "b": 25}, {"a": 0, "b": 0}, seconds=3 * probe + 1)
    steps = {i: a for i, a in enumerate(actions) if a}
    assert steps == {probe: "no longer dropping", 2 * probe: "batching for latency",
                     3 * probe: "keyframe intervals x1"}
    assert c.level == 0


def test_a_step_down_taken_back_makes_the_next_wait_twice_as_long_and_one_that_holds_halves_it():
    clock = Clock()
    c = BudgetController(33, ["a"], max_stretch=1, clock=clock, calm_s=2)
    feed(c, clock, {"a": 20}, {"a": 0})
    feed(c, clock, {"a": 50}, {"a": 0}, seconds=2)  # batching, 1 in 8
    assert feed(c, clock, {"a": 5}, {"a": 0}, seconds=3) == [None, None, "no longer dropping"]
    assert feed(c, clock, {"a": 50}, {"a": 0}) == ["dropping 1 in 8"]  # taken back at once
    assert c.calm_s == 4
    actions = feed(c, clock, {"a": 5}, {"a": 0}, seconds=9)
    # calm from the first of these seconds: down after 4 s; the next 4 s later, and as the one
    # before it held, the wait is halved
    assert {i: a for i, a in enumerate(actions) if a} == {4: "no longer dropping", 8: "batching for latency"}
    assert c.calm_s == 2


def test_after_a_burst_the_way_down_quickens_while_each_step_holds_and_a_new_load_waits_again():
    """A burst (a camera's start, a reconnect) can send shedding to the top rung in a second; the way
    back down must not take a calm wait per rung. Each step down that holds halves the wait for the
    next, down to the settling time and two windows; a new overload makes the first step down wait
    the whole calm time again."""
    clock = Clock()
    c = BudgetController(33, ["a", "b"], max_stretch=1, settle_s=1, calm_s=8, clock=clock)
    feed(c, clock, {"a": 40, "b": 40}, {"a": 0, "b": 0})  # batching for throughput
    # nine in ten of a second's frames lost: at once to the share that would have carried it
    assert feed(c, clock, {"a": 20, "b": 20}, {"a": 288, "b": 288}) == ["dropping 9 in 10"]
    assert feed(c, clock, {"a": 20, "b": 20}, {"a": 576, "b": 576}) == ["decoding keyframes only"]
    calm = feed(c, clock, {"a": 5, "b": 5}, {"a": 576, "b": 576}, seconds=45)
    steps = [i + 1 for i, a in enumerate(calm) if a]
    waits = [b - a for a, b in zip([0] + steps, steps)]
    # calm from the first of these seconds: the first step 8 s after it, the second 8 s later (it
    # shows that the first held), then 4, then 3 (one settling second and two windows) a rung
    assert waits[:4] == [9, 8, 4, 3] and set(waits[3:]) == {3}
    assert [a for a in calm if a][:3] == ["decoding every frame again", "dropping 7 in 8", "dropping 5 in 6"]
    assert c.level == 0 and len(steps) == 11  # eleven rungs down in 45 s, where a calm wait each took 88 s
    # a new overload long after: up one rung, and the way down starts with the whole calm wait again
    feed(c, clock, {"a": 5, "b": 5}, {"a": 576, "b": 576}, seconds=20)
    assert feed(c, clock, {"a": 50, "b": 50}, {"a": 576, "b": 576}) == ["batching for throughput"]
    assert c.calm_s == 8
    again = feed(c, clock, {"a": 5, "b": 5}, {"a": 576, "b": 576}, seconds=10)
    assert [i + 1 for i, a in enumerate(again) if a] == [9]


def test_one_slow_frame_among_a_few_a_second_is_not_overload_but_a_slow_tail_is():
    """Ten 8 fps streams (or ten shed to a few frames a second), one slow frame a second somewhere.
    Each stream's p95 of its second's 8 frames was their slowest, so that one frame read as overload
    every second, and the controller shed more and had fewer frames still to judge by. The p95 read
    is that of every live stream's frames together (at least 21 of them); a slow tail in them (one
    stream in ten slow, a tenth of the frames) is still overload once it lasts: its first second
    is 4% of the last three seconds' frames (a stall's burst), its second 7%."""
    clock = Clock()
    streams = [f"cam{i}" for i in range(10)]
    c = BudgetController(33, streams, max_stretch=1, clock=clock)

    def second(slow: str | None = None, every: bool = False):
        for k in range(8):
            clock.now += 1 / 8
            for name in streams:
                c.observe(name, 50.0 if name == slow and (every or k == 3) else 10.0)
        return c.tick(dict.fromkeys(streams, 0))

    assert [second(streams[i % 10]) for i in range(20)] == [None] * 20 and c.level == 0
    assert second("cam4", every=True) is None and c.level == 0
    assert second("cam4", every=True) == "batching for throughput"


def late_second(c: BudgetController, clock, streams: list[str], late: float, late_ms: float = 40.0):
    """One second of 30 frames a stream: a `late` share of them `late_ms` end to end, the rest 10 ms;
    then the controller's tick (what it did, or None)."""
    for k in range(30):
        clock.now += 1 / 30
        for name in streams:
            c.observe(name, late_ms if k < 30 * late else 10.0)
    return c.tick(dict.fromkeys(streams, 0))


def test_a_single_second_over_budget_stops_the_keyframes_waiting_but_costs_no_detections_or_frames():
    """Seen at indoor K=48: single seconds whose p95 read 34-40 ms, between seconds of 8-25 ms, each
    took a rung (keyframe intervals stretched, then frames shed), and each rung was given back only
    15 s later, so the ladder crept up. A second over budget among calm ones now stops the keyframes
    waiting (the cheapest rung: their own boxes for a few seconds) and nothing more; a load that
    lasts (two such seconds in a row: 7% of three seconds' frames late) takes the next rung."""
    clock = Clock()
    streams = [f"cam{i}" for i in range(4)]
    c = BudgetController(33, streams, max_stretch=4, clock=clock, keyframe_wait=True)

    def second(late: float):  # a share of each stream's 30 frames 40 ms late, the rest 10 ms
        return late_second(c, clock, streams, late)

    assert [second(0.0) for _ in range(5)] == [None] * 5
    assert second(0.1) == "keyframes no longer wait"
    # a spike one second in four (3% of the frames): no rung that costs detections or frames
    assert [second(0.1 if i % 4 == 3 else 0.0) for i in range(11)] == [None] * 11
    assert c.level == 1 and c.stretch == 1.0 and c.shed == 0.0
    assert second(0.1) is None  # one second of the last three 10% late: 3% of their frames
    assert second(0.1) == "keyframe intervals x1.5"  # two in a row: 7%


def test_keyframes_a_user_lets_wait_longer_are_read_against_their_own_budget():
    """`detector.budget_ms: 60` with the p95 held at 33: a fifth of the frames are keyframes published
    with their own detections 50 ms after they became available (within their 60), the rest 10 ms. The
    controller reads each keyframe against its own budget and keeps them waiting; read against the
    frames' 33 ms, a fifth of the frames late, it stopped their waiting at once."""
    streams = [f"cam{i}" for i in range(4)]

    def run(own_budget_ms):
        clock = Clock()
        c = BudgetController(33, streams, max_stretch=4, clock=clock, keyframe_wait=True)
        actions = []
        for _ in range(6):
            for k in range(30):
                clock.now += 1 / 30
                for name in streams:
                    keyframe = k % 5 == 0
                    c.observe(name, 50.0 if keyframe else 10.0, own_budget_ms if keyframe else None)
            actions.append(c.tick(dict.fromkeys(streams, 0)))
        return actions, c.wait

    assert run(60.0) == ([None] * 6, True)
    assert run(None)[0][0] == "keyframes no longer wait" and not run(None)[1]
    # a keyframe over its own budget is late against it too: 70 ms of 60 reads as 38.5 of 33
    clock = Clock()
    c = BudgetController(33, ["cam"], max_stretch=4, clock=clock, keyframe_wait=True)
    for _ in range(30):
        clock.now += 1 / 30
        c.observe("cam", 70.0, 60.0)
    assert c.pooled_p95() == pytest.approx(38.5)


def test_one_stream_of_a_few_frames_a_second_is_judged_on_its_last_21():
    """A single 8 fps camera: the p95 of one second's 8 frames is their slowest; over its last 21
    frames one slow frame is left out, two are not."""
    clock = Clock()
    c = BudgetController(33, ["cam"], max_stretch=1, clock=clock)

    def second(slow: int):
        for k in range(8):
            clock.now += 1 / 8
            c.observe("cam", 50.0 if k < slow else 10.0)
        return c.tick({"cam": 0})

    assert [second(0), second(0), second(0), second(1), second(0), second(0)] == [None] * 6
    assert second(2) == "batching for throughput"


def test_the_wait_limit_follows_the_worst_p95_between_a_share_of_the_budget_and_all_of_it():
    clock = Clock()
    c = BudgetController(40, ["a", "b"], clock=clock)
    assert c.max_wait_s == pytest.approx(40 * WAIT_SHARE / 1000)  # 40 ms: a frame that old is late anyway
    feed(c, clock, {"a": 50, "b": 20})  # the worst stream 10 ms over: 10 ms off the limit
    assert c.max_wait_s == pytest.approx(0.030)
    feed(c, clock, {"a": 60, "b": 20}, seconds=2)
    assert c.max_wait_s == pytest.approx(40 * MIN_WAIT_SHARE / 1000)  # no lower than 10 ms
    feed(c, clock, {"a": 30, "b": 20})  # within budget: half the slack back
    assert c.max_wait_s == pytest.approx(0.015)
    feed(c, clock, {"a": 10, "b": 10}, seconds=4)
    assert c.max_wait_s == pytest.approx(0.040)  # never past the budget


def test_below_the_first_rung_frames_held_up_by_a_stall_are_published_late_not_dropped():
    """Six RTSP cameras the machine carried at half the budget lost 2-16 frames a trial as too old
    for the budget: stalls, not a load, and the p95 had room for them. Below the first rung the
    engine's limit is three budgets; once the controller climbs, the budget's limit is back."""
    clock = Clock()
    c = BudgetController(33, ["a", "b"], max_stretch=1, clock=clock)
    assert c.level == 0 and c.wait_limit_s == pytest.approx(CALM_WAIT_SHARE * 0.033)
    assert feed(c, clock, {"a": 15, "b": 15}) == [None]  # within the budget: it stays
    assert c.wait_limit_s == pytest.approx(CALM_WAIT_SHARE * 0.033)
    assert feed(c, clock, {"a": 45, "b": 45}) == ["batching for throughput"]  # a load
    assert c.level == 1 and c.wait_limit_s == c.max_wait_s < 0.033



def test_the_keyframes_wait_taken_on_one_slow_second_keeps_the_calm_wait_limit():
    """Indoor K=64, every frame within the budget but for a second of 34-48 ms (a stall): that
    second took the keyframes' wait, and the budget's limit that came with it dropped 1-63 frames a
    trial in the small stalls of the next seconds. The keyframes' wait answers no load: the limit
    stays at three budgets until a rung that does (here the intervals' stretch) is taken."""
    clock = Clock()
    streams = ["a", "b"]
    c = BudgetController(33, streams, max_stretch=4, clock=clock, keyframe_wait=True)

    def second(late: float):  # a share of each stream's 30 frames 45 ms late, the rest 10 ms
        return late_second(c, clock, streams, late, late_ms=45.0)

    assert [second(0.0) for _ in range(3)] == [None] * 3
    assert second(0.1) == "keyframes no longer wait"
    assert c.level == 1 and c.max_wait_s < 0.033  # the limit is trimmed, but not applied yet
    assert c.wait_limit_s == pytest.approx(CALM_WAIT_SHARE * 0.033)
    assert second(0.1) == "keyframe intervals x1.5"  # a load that lasts
    assert c.wait_limit_s == c.max_wait_s < 0.033

def test_a_wait_limit_that_lets_no_frame_through_is_given_back():
    """A start's burst takes the wait limit down to a quarter of the budget; if then no frame is
    published at all (every one too old for that limit), there is no p95 to give it back by, so
    seconds with nothing published give it back as if the p95 were 0."""
    clock = Clock()
    c = BudgetController(33, ["a", "b"], max_stretch=1, clock=clock)
    feed(c, clock, {"a": 400.0, "b": 400.0})
    assert c.max_wait_s == pytest.approx(MIN_WAIT_SHARE * 0.033)
    for _ in range(6):  # nothing published: within HISTORY_WINDOWS the old samples still count
        clock.now += 1.0
        c.tick({"a": 0, "b": 0})
    assert c.max_wait_s == pytest.approx(WAIT_SHARE * 0.033)


def test_streams_shedding_the_same_share_drop_the_same_frames_count_on_staggered_ticks():
    shedders = [Shedder(phase=i / 5) for i in range(5)]
    for s in shedders:
        s.fraction = 1 / 3
    pattern = np.array([[s.drop() for s in shedders] for _ in range(300)])  # 300 frames of each stream
    assert pattern.sum(axis=0).tolist() == [100] * 5  # exactly a third of each stream's frames
    # never all streams on the same frame: the engine's load stays even from frame to frame
    assert pattern.sum(axis=1).max() < 5
    # evenly spaced within a stream: never two dropped in a row at a third
    assert not (pattern[1:] & pattern[:-1]).any()


def offer(c: BudgetController, clock, lose: dict[str, float], lost: dict[str, float], ms: float = 20.0,
          frames: int = 32) -> tuple[dict[str, int], dict[str, int]]:
    """One second of `frames` frames a stream through its shedder: of those not shed, a share
    `lose[stream]` is lost without the controller's say (evenly spread: `lost` carries each
    stream's count so far, fractions included), the rest are published at `ms`. Returns what the
    stream published and what came in that second."""
    published, came = dict.fromkeys(lose, 0), dict.fromkeys(lose, 0)
    for _ in range(frames):
        clock.now += 1 / frames
        for stream, share in lose.items():
            came[stream] += 1
            if c.shedders[stream].drop():
                continue
            before = int(lost[stream])
            lost[stream] += share
            if int(lost[stream]) == before:
                c.observe(stream, ms)
                published[stream] += 1
    return published, came


def test_while_shedding_a_stream_that_loses_more_elsewhere_is_shed_less_so_all_keep_alike():
    """Frames too old for the engine fall where the scheduler puts each stream's thread, not evenly:
    the controller sheds less from the streams those losses hit, more from the others."""
    clock = Clock()
    c = BudgetController(33, ["a", "b", "c"], max_stretch=1, clock=clock, calm_s=30)
    feed(c, clock, {"a": 40, "b": 40, "c": 40}, dict.fromkeys("abc", 0))  # batching for throughput
    # a second that lost as many frames as it published: shedding goes to 1 in 2
    assert feed(c, clock, dict.fromkeys("abc", 20.0), dict.fromkeys("abc", 32)) == ["dropping 1 in 2"]
    carried = dict.fromkeys("abc", 32)  # the engine's own losses stop there: the rung holds
    # from now on, of the frames not shed, c loses a fifth late from its source, b a tenth, a none
    # (losses that do not make the controller climb, but do make a stream keep less)
    lose, lost = {"a": 0.0, "b": 0.1, "c": 0.2}, dict.fromkeys("abc", 0.0)
    kept = {name: [] for name in lose}
    for _ in range(20):
        published, came = offer(c, clock, lose, lost)
        for name in lose:
            kept[name].append((published[name], came[name]))
        assert c.tick(carried, {name: int(n) for name, n in lost.items()}) is None
    assert c.shed == 0.5
    shares = {name: s.fraction for name, s in c.shedders.items()}
    assert shares["a"] > shares["b"] > shares["c"]
    # over the last ten seconds the three kept within a few points of each other, about what
    # shedding 1 in 2 leaves b, whose losses are the median ones (shedding 1 in 2 alike would
    # leave them 50%, 45% and 40%): what c is spared, a gives up, so the load stays the rung's
    share = {name: sum(p for p, _ in seconds[-10:]) / sum(n for _, n in seconds[-10:])
             for name, seconds in kept.items()}
    assert max(share.values()) - min(share.values()) < 0.05, share
    assert all(0.42 < value < 0.48 for value in share.values()), share
    published = sum(p for seconds in kept.values() for p, _ in seconds[-10:])
    came = sum(n for seconds in kept.values() for _, n in seconds[-10:])
    assert published / came <= 0.45 + 0.01  # no more than 1 in 2 alike keeps: the load is the rung's
    # streams that lose alike shed alike: the rung's share exactly
    even = BudgetController(33, ["a", "b"], max_stretch=1, clock=clock)
    feed(even, clock, {"a": 40, "b": 40}, {"a": 0, "b": 0})
    feed(even, clock, {"a": 20, "b": 20}, {"a": 32, "b": 32})
    assert [s.fraction for s in even.shedders.values()] == [even.shed, even.shed]


def test_evening_streams_out_never_sheds_less_in_all_than_the_rung():
    """What the streams that kept less are spared, those that kept more give up: the engine's load
    stays what the rung leaves, or less, whatever fell where."""
    rng = np.random.default_rng(7)
    for shed in SHED_STEPS:
        for _ in range(50):
            history = {}
            for i in range(int(rng.integers(2, 40))):
                rate = int(rng.choice([10, 15, 30]))
                history[f"s{i}"] = [(int(p), rate - int(p) - int(d), int(d))
                                    for p, d in zip(rng.integers(0, rate // 2, 10), rng.integers(0, rate // 2, 10))]
            shares = fair_shares(shed, history)
            rates = {name: sum(map(sum, windows)) / len(windows) for name, windows in history.items()}
            assert sum((shares[name] - shed) * rates[name] for name in history) >= -1e-9
            assert all(0.0 <= share <= SHED_STEPS[-1] for share in shares.values())


def test_on_a_keyframe_rung_the_streams_chance_spared_are_shed_down_to_the_others():
    """Frames too old for the engine fall on streams at random: 48 streams of 10 fps losing 7% ended
    10-12 points apart over 12 s. Once the controller has climbed a rung, a stream that kept more
    than the median over the last ten seconds gives that up over the next two, even where the rung
    itself sheds nothing; below capacity (no rung) nothing is shed."""
    clock = Clock()
    names = "abcde"
    c = BudgetController(33, list(names), max_stretch=4, clock=clock)
    lost = dict.fromkeys(names, 0.0)
    lose = {"a": 0.0, "b": 0.0, "c": 0.05, "d": 0.1, "e": 0.5}  # e's decoder loses half by itself
    for _ in range(10):  # within budget: no rung, no shedding, whatever fell where
        offer(c, clock, lose, lost, ms=10.0)
        assert c.tick({}, {name: int(n) for name, n in lost.items()}) is None
    assert c.level == 0 and all(s.fraction == 0.0 for s in c.shedders.values())
    feed(c, clock, dict.fromkeys(names, 40.0))
    assert c.stretch == 1.5 and c.shed == 0.0
    kept = {name: [] for name in names}
    for _ in range(12):  # the rung holds
        published, came = offer(c, clock, lose, lost)
        for name in names:
            kept[name].append(published[name] / came[name])
        assert c.tick({}, {name: int(n) for name, n in lost.items()}) is None
    assert c.shed == 0.0 and c.stretch == 1.5
    shed = {name: s.dropped for name, s in c.shedders.items()}
    # a and b, which lost nothing, are shed down to c, the median; d and e, which lost more, are not shed
    assert shed["a"] > 0 and shed["b"] > 0 and shed["d"] == shed["e"] == 0, shed
    share = {name: sum(values) / len(values) for name, values in kept.items()}  # over the 12 s
    assert abs(share["a"] - share["c"]) < 0.03 and abs(share["b"] - share["c"]) < 0.03, share
    # e's own trouble costs the others nothing: they keep about what c keeps (95%), nowhere near
    # e's 50%
    assert share["a"] > 0.9, share


# -- the engine and admission ---------------------------------------------------------------------


def frames_of(stream: str, n: int, *, age_s: float = 0.0, first: int = 0) -> list[Frame]:
    """`n` small frames of `stream` (indices from `first`) that became available `age_s` ago."""
    clock = time.monotonic() - age_s
    return [Frame(stream, first + i, (first + i) / 30, 0.0, np.zeros((16, 16, 3), np.uint8), clock=clock)
            for i in range(n)]


def run_engine(lanes: list[Lane], items: list, max_wait_s: float | None, chooser=None) -> list[FrameResult]:
    """Put `items` in the inbox, then run an engine over them to the end of every lane."""
    inbox = Channel(1 << 12)
    detections = Channel(1 << 20, "detections", share=inbox)
    worker = DetectWorker(MotionDetector(), detections.put, max_batch=4, max_wait_ms=1, budget_ms=None)
    published = []
    engine = Engine(inbox, detections, lanes, worker, published.append, late_after_s=0.0, chooser=chooser)
    engine.apply_control(1.0, False, False, max_wait_s)
    for item in items:
        inbox.put(item, key=item.stream)
    for lane in lanes:
        inbox.put(EndOfStream(lane.name, 0), key=lane.name)
    runner = threading.Thread(target=engine.run)
    runner.start()
    runner.join(30)
    assert not runner.is_alive()
    return [r for r in published if isinstance(r, FrameResult)]


def live_lane(name: str) -> Lane:
    return Lane(name, build_tracker(TrackerConfig(motion=None), 30), True, 3)


def test_the_engine_drops_live_frames_that_can_no_longer_meet_the_budget_and_counts_them():
    lanes = [live_lane("a"), live_lane("b")]
    # interleaved as cameras deliver them: old frames (waited 10 s in the inbox), then fresh ones
    old = [f for pair in zip(frames_of("a", 6, age_s=10.0), frames_of("b", 6, age_s=10.0)) for f in pair]
    fresh = [f for pair in zip(frames_of("a", 6, first=6), frames_of("b", 6, first=6)) for f in pair]
    for f in old:
        f.queued = time.perf_counter() - 10.0  # its age spent in the inbox: the engine's fault
    published = run_engine(lanes, old + fresh, max_wait_s=2.0)
    assert sorted((r.frame.stream, r.frame.index) for r in published) == \
        sorted((s, i) for s in "ab" for i in range(6, 12))
    assert [(lane.stale_dropped, lane.late_from_source) for lane in lanes] == [(6, 0), (6, 0)]


def test_a_frame_that_came_late_from_its_source_is_counted_apart():
    lane = live_lane("a")
    late = frames_of("a", 4, age_s=10.0)  # old already when it was queued: its decoder fell behind
    for f in late:
        f.queued = time.perf_counter()
    published = run_engine([lane], late + frames_of("a", 2, first=4), max_wait_s=2.0)
    assert [r.frame.index for r in published] == [4, 5]
    assert (lane.stale_dropped, lane.late_from_source) == (0, 4)


def test_without_a_wait_limit_or_for_files_nothing_is_dropped_for_its_age():
    live, file = live_lane("a"), Lane("f", build_tracker(TrackerConfig(motion=None), 30), False, 3)
    items = frames_of("a", 4, age_s=10.0) + frames_of("f", 4, age_s=10.0)
    for f in items[4:]:
        f.scheduled = f.index == 0
    assert len(run_engine([live], items[:4], max_wait_s=None)) == 4
    assert len(run_engine([file], items[4:], max_wait_s=2.0)) == 4


def test_admission_drops_a_frame_too_old_before_any_work_and_before_shedding():
    lane = live_lane("a")
    lane.max_wait_s = 2.0
    lane.publish_view()  # as the engine does when it applies the controller's rung
    shed_asked = []
    admit = Admission(lane, SceneCutDetector(), shed=lambda: shed_asked.append(1) or False)
    old, fresh = frames_of("a", 1, age_s=10.0)[0], frames_of("a", 1, first=1)[0]
    assert not admit(old) and admit.late_from_source == 1 and not shed_asked
    assert admit(fresh) and shed_asked == [1]


def test_keyframes_keep_their_spacing_in_frames_when_frames_are_shed():
    """The shared schedule counts the frames never offered (shed, or dropped on the way): with 1 in 2
    shed, keyframes still come every `interval` frames of the source, not every `interval` offered."""
    def keyframes(offered: list[int]) -> list[int]:
        chooser = KeyframeChooser(interval=4, min_interval=4)
        chooser.add("a", period_s=1 / 30)
        keys, previous = [], None
        for n, index in enumerate(offered):
            skipped = 0 if previous is None else index - previous - 1
            if chooser.offer("a", CALM, now=n / 30, skipped=skipped, start_in_s=0.0):
                keys.append(index)
                chooser.detected("a")
            previous = index
        return keys

    assert keyframes(list(range(24))) == [0, 4, 8, 12, 16, 20]
    assert keyframes(list(range(0, 24, 2))) == [0, 4, 8, 12, 16, 20]


def test_the_engine_tells_the_shared_schedule_how_many_frames_never_came():
    class Recording(KeyframeChooser):
        def __init__(self):
            super().__init__(interval=4)
            self.skipped = []

        def offer(self, name, signals=None, **kwargs):
            self.skipped.append(kwargs.get("skipped"))
            return super().offer(name, signals, **kwargs)

    chooser = Recording()
    items = [f for f in frames_of("a", 24) if f.index % 3 != 1]  # 0, 2, 3, 5, 6, ...: one in three shed
    run_engine([live_lane("a")], items, max_wait_s=None, chooser=chooser)
    assert chooser.skipped == [0] + [1 if f.index % 3 == 2 else 0 for f in items[1:]]



def test_frames_late_from_a_source_that_sheds_undecoded_make_the_controller_shed(tmp_path):
    """A decoder behind its clock hands over frames too late to publish. Shedding after decoding
    would not help it, so for such a source they are left out of what the controller answers; a
    decode worker that gives up its share undecoded (a camera's, a `decode: process` file's) is
    relieved by shedding, so for it they count."""
    import av

    from streamlens.config import SourceConfig
    from streamlens.graph.run.losses import Losses
    from streamlens.graph.run.stream import Stream, StreamSet
    from streamlens.sources.file import FileSource

    video = tmp_path / "clip.mp4"
    with av.open(str(video), "w") as out:
        stream = out.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for i in range(3):
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.full((48, 64, 3), i, np.uint8), format="bgr24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    thinning, plain = Shedder(), Shedder()
    sources = {"file": FileSource("file", video, live=True, decode="process"),
               "other": FileSource("other", video, live=True)}
    thinning.attach(sources["file"])
    plain.attach(sources["other"])  # decoded on the graph's thread: shed after decoding
    streams = StreamSet()
    for name, shedder in (("file", thinning), ("other", plain)):
        lane = Lane(name, build_tracker(TrackerConfig(motion=None), 10), True, 3)
        stream = Stream(SourceConfig(name=name, uri=str(video), live=True), None, sources[name], lane,
                        Admission(lane, None), shedder)
        lane.late_from_source, stream.admission.late_from_source = 4, 3
        streams.list(stream)
    losses = Losses(streams, Channel(8))
    answered, unshed = losses.for_controller(["file", "other"])
    assert unshed == {"file": 7, "other": 7}
    assert answered == {"file": 7, "other": 0}
    for source in sources.values():
        source.close()
