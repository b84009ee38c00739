"""The bench's accuracy: the scorer on crafted deliveries (exact F1), new-object waits, the clip
frame of a message across loops, the detection delay, the detect-every-frame reference and its
cache on the sample video, and a real trial's scores, for the bench and its hold baseline.
"""

from __future__ import annotations

import json

import numpy as np

from streamlens.bench.accuracy import clip_frames, combine, detection_delays, score_stream
from streamlens.bench.reference import Reference, reference_for
from streamlens.bench.trial import measure, passes
from streamlens.config import DetectorConfig

from .conftest import REPO, streamlens

SAMPLE = str(REPO / "samples" / "traffic.mp4")
CAR, TRUCK = 2, 7


def ref_of(*frames) -> Reference:
    """A reference at 10 fps: each argument one frame's `[x1, y1, x2, y2, cls]` rows."""
    return Reference.from_frames([i / 10 for i in range(len(frames))], [[r[:4] for r in f] for f in frames],
                                 [[r[4] for r in f] for f in frames])


def score(ref: Reference, delivered: list) -> dict:
    return score_stream(list(range(len(delivered))), [i / 10 for i in range(len(delivered))], delivered, ref)


A = [0, 0, 10, 10, CAR]
B = [50, 50, 70, 70, CAR]


# -- F1 on crafted deliveries ----------------------------------------------------------------------


def test_a_perfect_delivery_scores_one():
    ref = ref_of([A, B], [A], [B])
    s = score(ref, [[A, B], [A], [B]])
    assert (s["tp"], s["f1"], s["precision"], s["recall"]) == (4, 1.0, 1.0, 1.0)


def test_a_missing_box():
    s = score(ref_of([A, B], [A, B]), [[A, B], [A]])
    assert (s["tp"], s["delivered"], s["reference"]) == (3, 3, 4)
    assert s["f1"] == round(6 / 7, 4) and s["precision"] == 1.0 and s["recall"] == 0.75


def test_an_extra_box():
    s = score(ref_of([A], [A]), [[A], [A, B]])
    assert s["f1"] == round(4 / 5, 4) and s["precision"] == round(2 / 3, 4) and s["recall"] == 1.0


def test_a_shifted_box_matches_only_at_iou_one_half():
    near = [2, 0, 12, 10, CAR]   # IoU 8/12 = 0.67: still the same box
    far = [5, 0, 15, 10, CAR]    # IoU 5/15 = 0.33: a miss and an extra box
    assert score(ref_of([A]), [[near]])["f1"] == 1.0
    s = score(ref_of([A]), [[far]])
    assert (s["tp"], s["f1"]) == (0, 0.0)


def test_a_box_of_another_class_does_not_match():
    s = score(ref_of([A]), [[A[:4] + [TRUCK]]])
    assert (s["tp"], s["f1"]) == (0, 0.0)


def test_empty_frames_count_for_nothing_and_all_empty_agrees():
    s = score(ref_of([], [A], []), [[], [A], []])
    assert (s["frames"], s["f1"]) == (3, 1.0)
    assert score(ref_of([], []), [[], []])["f1"] == 1.0
    assert score(ref_of([], []), [[A], []])["f1"] == 0.0


def test_the_matching_is_one_to_one_and_optimal():
    # two delivered boxes over one reference box: one match, one extra
    s = score(ref_of([A]), [[A, [1, 0, 11, 10, CAR]]])
    assert (s["tp"], s["f1"]) == (1, round(2 / 3, 4))


def test_streams_pool_their_boxes_and_the_worst_stream_is_kept():
    ref = ref_of([A, B])
    good, bad = score(ref, [[A, B]]), score(ref, [[]])
    both = combine({"s0": good, "s1": bad})
    assert both["f1"] == round(4 / 6, 4) and both["f1_min"] == 0.0


# -- new objects ---------------------------------------------------------------------------------


def test_a_new_object_waits_until_a_box_matches_it():
    moving = [[5 * i, 0, 5 * i + 20, 20, CAR] for i in range(5)]  # steps of 5 px on a 20 px box: IoU 0.6
    ref = ref_of([], *[[m] for m in moving], [])                    # the car is on frames 1 to 5
    s = score(ref, [[], [], [], [moving[2]], [moving[3]], [moving[4]], []])  # boxed from frame 3 on
    assert s["new_objects"]["count"] == 1
    assert s["new_objects"]["waits"] == [2] and s["new_objects"]["wait_frames"]["p50"] == 2.0
    never = score(ref, [[]] * 7)["new_objects"]
    assert (never["count"], never["never"], never["waits"]) == (1, 1, [])


def test_an_object_still_unfound_at_the_window_end_is_censored():
    ref = ref_of([], *[[A]] * 5, [], [])
    s = score_stream([0, 1], [0.0, 0.1], [[], []], ref)  # the window ends on frame 1
    assert s["new_objects"]["censored"] == 1 and s["new_objects"]["waits"] == []


def test_flicker_and_a_one_frame_miss_are_not_new_objects():
    flicker = ref_of([], [A], [A], [], [], [], [], [])           # on two frames only
    assert score(flicker, [[]] * 8)["new_objects"]["count"] == 0
    missed = ref_of([], *[[A]] * 5, [], *[[A]] * 5, [], [])       # the detector missed it on frame 6
    s = score(missed, [[]] + [[A]] * 5 + [[]] + [[A]] * 5 + [[], []])
    assert s["new_objects"]["count"] == 1 and s["new_objects"]["waits"] == [0]


# -- the clip frame of a message across loops ---------------------------------------------------


def test_messages_map_to_clip_frames_by_pts_across_loops():
    ref = Reference.from_frames([1.0, 1.04, 1.08], [[], [], []], [[], [], []])  # a clip that starts at 1.0 s
    pts = [1.0, 1.04, 1.08, 1.0, 1.04, 1.08, 1.0, 1.5, None]
    assert clip_frames(pts, ref.pts).tolist() == [0, 1, 2, 0, 1, 2, 0, -1, -1]


def test_a_looping_stream_is_scored_against_the_right_clip_frames():
    ref = ref_of(*[[A]] * 5, [B], [], [])                     # A on clip frames 0-4, B on 5
    frames = list(range(24))                                  # `frame` keeps counting ...
    pts = [(i % 8) / 10 for i in frames]                      # ... `pts` restarts each loop
    perfect = [[A]] * 5 + [[B], [], []]
    s = score_stream(frames, pts, perfect * 3, ref)
    assert (s["frames"], s["f1"], s["unmapped"]) == (24, 1.0, 0)
    # A starts at clip frame 0 on every loop: 3 new objects, boxed at once (B is too short to be one)
    assert s["new_objects"]["count"] == 3 and s["new_objects"]["waits"] == [0] * 3
    # the same boxes a loop phase off (B a frame early) are wrong on two frames a loop
    shifted = score_stream(frames, pts, (perfect[1:] + perfect[:1]) * 3, ref)
    assert (shifted["tp"], shifted["f1"]) == (12, round(24 / 36, 4))


# -- the detection delay ----------------------------------------------------------------------------


def test_the_detection_delay_from_detected_frame():
    # frame 0 detected, its boxes first out on frame 2 (received at 0.25); frame 3 on frame 3 at 0.32
    frames, ts = [0, 1, 2, 3, 4], [0.0, 0.1, 0.2, 0.3, 0.4]
    recv = [0.01, 0.11, 0.25, 0.32, 0.41]
    delays, method = detection_delays(frames, ts, recv, [0] * 5, [None, None, 0, 3, 3])
    assert method == "detected_frame" and np.allclose(delays, [250.0, 20.0])


def test_without_detected_frame_only_keyframes_in_time_are_timed():
    delays, method = detection_delays([0, 1, 2], [0.0, 0.1, 0.2], [0.02, 0.11, 0.23], [1, 0, 1])
    assert method == "keyframes in time" and np.allclose(delays, [20.0, 30.0])


def test_the_pass_rule_has_an_accuracy_term():
    records = {"s0": {"frame": [0, 1], "ts": [0.0, 0.1], "recv": [0.01, 0.11], "key": [1, 1],
                      "pts": [0.0, 0.1], "boxes": [[A], []], "det": [None, None]}}
    ref = ref_of([A], [B])
    trial = measure(records, k=1, warmup=0.0, seconds=10.0, reference=ref)
    assert trial["accuracy"]["f1"] == round(2 / 3, 4) and trial["detection_delay_ms"]["n"] == 2
    assert passes(trial, budget_ms=33, min_kept=1.0, min_f1=0.6)
    assert not passes(trial, budget_ms=33, min_kept=1.0, min_f1=0.85)


# -- the reference and its cache, on the sample video ----------------------------------------------


def test_the_reference_is_made_once_then_read_from_the_cache(tmp_path):
    cfg = DetectorConfig(backend="motion")
    first = reference_for(cfg, SAMPLE, tmp_path)
    assert first.computed and first.path.parent == tmp_path and len(first) == 300
    made = first.path.stat().st_mtime_ns
    again = reference_for(cfg, SAMPLE, tmp_path)
    assert not again.computed and again.path == first.path and again.path.stat().st_mtime_ns == made
    assert np.array_equal(again.xyxy, first.xyxy) and np.array_equal(again.pts, first.pts)
    assert len(first.xyxy) > 0 and set(first.cls.tolist()) == {0}
    other = reference_for(DetectorConfig(backend="motion", min_area=0.01), SAMPLE, tmp_path)  # another setting
    assert other.computed and other.path != first.path


def test_a_delivery_of_the_reference_itself_scores_one(tmp_path):
    ref = reference_for(DetectorConfig(backend="motion"), SAMPLE, tmp_path)
    frames = list(range(len(ref) + 50))  # one pass and a bit of the next
    delivered = [np.column_stack([ref.boxes(i % len(ref)), ref.classes(i % len(ref))]).tolist() for i in frames]
    s = score_stream(frames, [float(ref.pts[i % len(ref)]) for i in frames], delivered, ref)
    assert (s["f1"], s["unmapped"], s["tp"]) == (1.0, 0, s["reference"]) and s["tp"] > 0


# -- a real bench run: the pipeline and the hold baseline, scored ------------------------------------


def test_a_bench_run_scores_both_the_pipeline_and_the_hold_baseline(tmp_path):
    out = tmp_path / "bench.json"
    done = streamlens("bench", "pipelines/quickstart.yaml", "--streams", "1", "--seconds", "2", "--warmup", "0.5",
                      "--decode-seconds", "0", "--no-baseline", "--reference-cache", str(tmp_path / "cache"),
                      "--min-f1", "0.5", "--out", str(out), timeout=180)
    assert done.returncode == 0, done.stderr
    assert "F1 min" in done.stdout and "hold baseline" in done.stdout
    report = json.loads(out.read_text())
    assert report["min_f1"] == 0.5 and report["reference"]["frames"] == 300 and report["reference"]["computed"]
    for run in (report["trials"][0], report["hold"][0]):
        assert run["status"] == "ok" and run["k"] == 1
        acc = run["accuracy"]
        assert 0.0 <= acc["f1"] <= 1.0 and acc["f1_min"] == run["streams"]["s0"]["accuracy"]["f1"]
        assert run["streams"]["s0"]["accuracy"]["frames"] == run["streams"]["s0"]["frames"]
        assert run["detection_delay_ms"]["n"] > 0
        assert sum(r["frames"] for r in run["accuracy_by_age"]["rows"]) == run["streams"]["s0"]["accuracy"]["frames"]
    assert report["hold"][0]["detection_delay_ms"]["method"] == "detected_frame"
    assert "hold_max_streams" in report["answers"]
    # the subscriber kept the controller's state from the run's stats messages (whatever the machine's
    # pace: each stream's last `stats`, published before its `eos`, counts in the timeline's last window)
    assert any("rung" in w for w in report["trials"][0]["timeline"])


def test_a_trial_has_a_timeline_of_f1_and_frames_detected_by_five_seconds():
    # 12 s of one stream at 1 frame a second: right boxes for 5 s, wrong ones after; frame 0 and 6 detected
    n = 12
    records = {"s0": {"frame": list(range(n)), "ts": [float(i) for i in range(n)], "recv": [i + 0.01 for i in range(n)],
                      "key": [0] * n, "pts": [i / 10 for i in range(n)], "boxes": [[A]] * 5 + [[B]] * 7,
                      "det": [0] * 6 + [6] * 6}}
    ref = ref_of(*[[A]] * n)
    trial = measure(records, k=1, warmup=0.0, seconds=20.0, reference=ref)
    assert [(w["from_s"], w["f1"], w["frames"], w["detected"]) for w in trial["timeline"]] == [
        (0.0, 1.0, 5, 0.2), (5.0, 0.0, 5, 0.2), (10.0, 0.0, 2, 0.0)]  # each detection once, where it first came
    # `--timeline-s 4`: the same frames by 4 s
    trial = measure(records, k=1, warmup=0.0, seconds=20.0, reference=ref, window_s=4.0)
    assert [(w["from_s"], w["f1"], w["frames"], w["detected"]) for w in trial["timeline"]] == [
        (0.0, 1.0, 4, 0.25), (4.0, 0.25, 4, 0.25), (8.0, 0.0, 4, 0.0)]  # one right box in four


def test_a_trial_tells_f1_by_the_age_of_the_detections_each_frame_carries():
    # one stream, 8 frames: none detected on frame 0, keyframe 1's detections on 1-4 (right, then drifting
    # off), keyframe 4's come back late and first reach frame 6; a frame with nothing detected yet is `none`
    n = 8
    boxes = [[]] + [[A]] * 3 + [[B]] * 2 + [[A]] * 2
    times = [i / 10 for i in range(n)]
    records = {"s0": {"frame": list(range(n)), "ts": times, "recv": [t + 0.01 for t in times],
                      "key": [0, 1, 0, 0, 0, 0, 0, 0], "pts": times, "boxes": boxes,
                      "det": [None, 1, 1, 1, 1, 1, 4, 4]}}
    trial = measure(records, k=1, warmup=0.0, seconds=1.0, reference=ref_of(*[[A]] * n))
    ages = trial["accuracy_by_age"]
    assert [(r["age"], r["frames"], r["f1"]) for r in ages["rows"]] == [
        ("none", 1, 0.0), ("0", 1, 1.0), ("1", 1, 1.0), ("2", 2, 1.0), ("3", 2, 0.5), ("4", 1, 0.0)]
    assert ages["mean_age"] == 2.14 and ages["mean_gap"] == 3.0  # ages 0 1 2 3 4 2 3 (15 / 7); keyframes 1, 4
    assert abs(sum(r["share"] for r in ages["rows"]) - 1.0) < 1e-3
    # without `detected_frame` (an older publisher) the ages are unknown: not reported
    plain = {"s0": {k: v for k, v in records["s0"].items() if k != "det"}}
    assert "accuracy_by_age" not in measure(plain, k=1, warmup=0.0, seconds=1.0, reference=ref_of(*[[A]] * n))


def test_staggered_copies_begin_through_the_clip():
    from streamlens.bench.trial import trial_overrides

    sources = trial_overrides("clip.mp4", 4, "tcp://127.0.0.1:1", stagger_s=30.0)["sources"]
    assert [s.get("start_s", 0.0) for s in sources] == [0.0, 7.5, 15.0, 22.5]
    assert all("start_s" not in s for s in trial_overrides("clip.mp4", 4, "tcp://127.0.0.1:1")["sources"])


def test_the_timeline_says_which_rung_the_controller_was_on():
    # two streams measured 4 s, one frame a second for the first 3 (none delivered in the last); their
    # `stats` messages as the listener keeps them
    n = 3
    records = {name: {"frame": list(range(n)), "ts": [float(i) for i in range(n)], "recv": [i + 0.01 for i in range(n)],
                      "key": [0] * n, "pts": [i / 10 for i in range(n)], "boxes": [[A]] * n, "det": [None] * n}
               for name in ("s0", "s1")}
    records["s0"]["control"] = [[0.5, 0, 0.0, False], [1.5, 5, 0.0, False], [2.5, 6, 0.125, False],
                                [3.5, 11, 0.9, True]]
    # s1 sent none in the last second; its last, before its eos, came after the measured 4 s
    records["s1"]["control"] = [[1.6, 4, 0.0, False], [2.6, 6, 0.25, False], [4.3, 12, 0.5, False]]
    trial = measure(records, k=2, warmup=0.0, seconds=4.0, reference=ref_of(*[[A]] * 4), window_s=1.0)
    assert [(w["from_s"], w["frames"], w["rung"], w["shed"], w["keyframes_only"]) for w in trial["timeline"]] == [
        (0.0, 2, 0, 0.0, False), (1.0, 2, 5, 0.0, False), (2.0, 2, 6, 0.188, False), (3.0, 0, 12, 0.7, True)]
    assert trial["timeline"][-1]["f1"] is None  # nothing delivered there: where the controller stood, and at the end
    # records without them (an older listener's): the timeline as before
    for r in records.values():
        del r["control"]
    assert [("rung" in w, w["frames"]) for w in measure(records, k=2, warmup=0.0, seconds=4.0,
                                                        reference=ref_of(*[[A]] * 4), window_s=1.0)["timeline"]] == [
        (False, 2)] * 3
