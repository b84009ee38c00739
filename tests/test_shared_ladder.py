"""One overload ladder for the engines of one machine (graph/overload/ladder.py): each engine applies
at least the rung the others climbed, its own rung still its own, so they shed alike and never hold
each other up. Deterministic: controllers on an injected clock; one real engine told a floor."""

from __future__ import annotations

import threading
import time

from streamlens.config import parse_pipeline
from streamlens.graph.overload.control import BudgetController
from streamlens.graph.overload.ladder import Rungs
from streamlens.graph.overload.shedding import SHED_STEPS
from streamlens.scale.engine import EngineRun, EngineSpec
from streamlens.scale.policy import ladder_floors

from .conftest import REPO
from .test_budget import Clock, feed

SAMPLE = REPO / "samples" / "traffic.mp4"
STREAMS = ["a", "b"]


def climbed(controller: BudgetController) -> Rungs:
    return Rungs(controller.wait, controller._stretch_index, controller.throughput, controller._shed_index,
                 controller.keyframes_only)


def test_every_rung_a_controller_climbs_is_the_one_its_level_names():
    for wait_rung in (False, True):
        for batches in (False, True):
            clock = Clock()
            c = BudgetController(33, STREAMS, keyframe_wait=wait_rung, clock=clock)
            c.attach([], batches=batches)
            for _ in range(40):
                feed(c, clock, {"a": 80, "b": 80})
                assert Rungs.at(c.level, wait_rung=wait_rung, stretches=len(c.stretches), batching=batches) \
                    == climbed(c) == c.applied()
            assert c.keyframes_only  # the top was reached


def test_a_floor_is_applied_to_every_stream_and_leaves_the_controllers_own_rung_alone():
    clock = Clock()
    c = BudgetController(33, STREAMS, clock=clock)
    c.attach([], batches=False)
    feed(c, clock, {"a": 10, "b": 10}, seconds=3)
    assert c.level == 0
    top_stretch = len(c.stretches) - 1
    c.hold_floor(top_stretch + 3)  # every stretch, then three shares shed: 1 in 8, 1 in 4, 1 in 3
    rungs = c.applied()
    assert (rungs.stretch_index, rungs.shed_index) == (top_stretch, 3) and c.level == 0
    assert {s.fraction for s in c.shedders.values()} == {SHED_STEPS[3]}
    assert c.state("a")["floor"] == top_stretch + 3 and c.state("a")["keyframe_stretch"] == c.stretches[-1]
    assert c.state("a")["level"] == top_stretch + 3
    feed(c, clock, {"a": 10, "b": 10}, seconds=20)  # calm under the floor: nothing of its own to give back
    assert c.level == 0 and c.applied().shed_index == 3
    c.hold_floor(0)
    assert c.applied().level == 0 and {s.fraction for s in c.shedders.values()} == {0.0}
    assert "floor" not in c.state("a")


def test_two_engines_climb_together_and_come_down_together():
    """Engine A's streams are late, B's are not (the scheduler served B first). Told each other's
    rung as the supervisor tells them, B sheds what A sheds; once A is calm both come back to rest."""
    clock = Clock()
    a = BudgetController(33, ["a1", "a2"], clock=clock)
    b = BudgetController(33, ["b1", "b2"], clock=clock)
    for c in (a, b):
        c.attach([], batches=False)

    def second(a_ms: float) -> None:
        for c, ms in ((a, a_ms), (b, 10.0)):
            for k in range(32):
                for s in c.shedders:
                    c.observe(s, ms)
        clock.now += 1.0
        for c in (a, b):
            c.tick({s: 0 for s in c.shedders})
        floors = ladder_floors({0: ("box", a.level), 1: ("box", b.level)})
        a.hold_floor(floors[0])
        b.hold_floor(floors[1])

    for _ in range(12):
        second(80.0)
    assert a.applied().shed_index > 0 and b.level == 0
    assert b.applied() == a.applied()
    assert {s.fraction for s in b.shedders.values()} == {s.fraction for s in a.shedders.values()}
    for _ in range(120):
        second(10.0)
    assert a.level == b.level == 0 and a.applied().level == b.applied().level == 0


def test_an_engine_told_a_floor_sheds_its_live_streams_and_reports_its_own_rung(tmp_path):
    config = parse_pipeline({"sources": [{"uri": str(SAMPLE), "name": "cam", "live": True, "loop": True}],
                             "detector": {"backend": "motion"},
                             "sinks": [{"type": "jsonl", "path": str(tmp_path / "out.jsonl")}]}, tmp_path / "p.yaml")
    engine = EngineRun(EngineSpec(0, config, ["cam"]))
    thread = threading.Thread(target=engine.run, daemon=True)
    thread.start()

    def control(pred):
        for _ in range(600):  # up to 60 s on a loaded machine; each check is instant on a free one
            snap = engine.snapshot()
            if snap is not None and "cam" in snap.stats and snap.stats["cam"].frames and pred(snap):
                return snap
            time.sleep(0.1)
        raise AssertionError(f"not seen: {engine.snapshot()}")

    try:
        control(lambda s: True)
        engine.hold_floor(99)  # past the top: the top
        snap = control(lambda s: s.control["cam"][2] > 0.5)
        stretch, _, shed = snap.control["cam"]
        assert stretch == 4.0 and shed == SHED_STEPS[-1] and snap.level == 0
        engine.hold_floor(0)
        snap = control(lambda s: s.control["cam"][2] == 0.0)
        assert snap.control["cam"][0] == 1.0
    finally:
        engine.stop()
        thread.join(60)
    assert not thread.is_alive()
