"""`streamlens bench`: real trials (a pipeline process, a subscriber process, real sockets) on the
sample video with the weight-free quickstart pipeline, the decode-only limit, an Ultralytics baseline
with a random-weights YOLOv8n built offline, the search over K, the window arithmetic, and bad input.
Accuracy (the reference, the scorer, the hold baseline) is in test_bench_accuracy.py.
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from streamlens.bench.search import StreamSearch, parse_streams
from streamlens.bench.trial import measure, trial_overrides

from .conftest import REPO, need_video, streamlens

QUICKSTART = "pipelines/quickstart.yaml"


def tried(spec: str, passes) -> tuple[list[int], int | None]:
    search = StreamSearch(parse_streams(spec))
    ks = []
    while (k := search.next()) is not None:
        ks.append(k)
        search.record(k, passes(k))
    return ks, search.best


# -- the search over K -------------------------------------------------------------------------


def test_a_range_doubles_while_passing_then_bisects():
    assert tried("1-16", lambda k: k <= 6) == ([1, 2, 4, 8, 6, 7], 6)
    assert tried("1-16", lambda k: k <= 4) == ([1, 2, 4, 8, 6, 5], 4)


def test_a_range_never_goes_past_its_upper_bound():
    assert tried("1-12", lambda k: True) == ([1, 2, 4, 8, 12], 12)
    assert tried("3-5", lambda k: True) == ([3, 5], 5)


def test_a_failing_lower_bound_ends_the_search():
    assert tried("2-16", lambda k: False) == ([2], None)


def test_a_list_is_tried_as_it_is_whatever_the_results():
    assert tried("1,4,2", lambda k: k < 3) == ([1, 4, 2], 2)
    assert tried("6", lambda k: False) == ([6], None)


@pytest.mark.parametrize("spec", ["0", "a", "4-2", "1,,2", "-3", ""])
def test_a_bad_streams_spec_says_what_is_expected(spec):
    with pytest.raises(ValueError, match="expected a number of streams"):
        parse_streams(spec)


# -- the measured window -----------------------------------------------------------------------


def records(frames, ts, delay=0.01):
    return {"frame": list(frames), "ts": list(ts), "recv": [t + delay for t in ts], "key": [0] * len(frames)}


def test_warm_up_frames_are_not_counted_and_gaps_are_drops():
    s0 = records(range(10), [i / 10 for i in range(10)])               # all 10 frames
    s1 = records([0, 1, 2, 3, 5, 7, 8, 9], [0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9])  # 4 and 6 dropped
    m = measure({"s0": s0, "s1": s1}, k=2, warmup=0.25, seconds=10)
    assert m["streams"]["s0"]["frames"] == 7 and m["streams"]["s0"]["kept"] == 1.0   # frames 3..9
    assert m["streams"]["s1"]["frames"] == 5 and m["streams"]["s1"]["expected"] == 7
    assert m["kept_min"] == round(5 / 7, 4) and m["kept"] == round(12 / 14, 4)
    assert m["kept_max"] == 1.0 and m["kept_spread"] == round(1 - 5 / 7, 4)  # between streams, for --curve
    assert m["latency_ms"]["p50"] == pytest.approx(10.0, abs=0.01)


def test_an_overload_curve_passes_on_latency_and_the_spread_between_streams():
    from streamlens.bench.trial import passes

    even = {"frames": 100, "latency_ms": {"p95": 30.0}, "kept_min": 0.40, "kept_spread": 0.06,
            "accuracy": {"f1_min": 0.2}}
    assert passes(even, 33, 1.0, 0.85, curve=True)  # few frames kept and a low F1: still graceful
    assert not passes(even, 33, 1.0, 0.85)  # but not within capacity
    assert not passes({**even, "kept_spread": 0.15}, 33, 1.0, 0.85, curve=True)  # one stream pays
    assert passes({**even, "kept_spread": 0.15}, 33, 1.0, 0.85, curve=True, max_spread=0.2)
    assert not passes({**even, "latency_ms": {"p95": 40.0}}, 33, 1.0, 0.85, curve=True)
    assert not passes({**even, "frames": 0}, 33, 1.0, 0.85, curve=True)


def test_frames_after_the_window_and_silent_streams():
    s0 = records(range(5), [0.0, 1.0, 2.0, 3.0, 4.0], delay=0.02)
    m = measure({"s0": s0, "s1": records([], [])}, k=2, warmup=1.0, seconds=2.0)
    assert m["streams"]["s0"]["frames"] == 2           # ts 1.0 and 2.0; 3.0 is the window's end
    assert m["kept_min"] == 0.0 and m["streams"]["s1"]["kept"] == 0.0
    assert m["latency_ms"]["p95"] == pytest.approx(20.0, abs=0.01)


def test_on_a_curve_kept_counts_the_frames_a_stream_had_not_the_span_it_delivered():
    """Past capacity a stream may deliver a frame now and then: one frame of a 10 fps stream's 20 in
    a 2 s window kept 5%, not the 100% its one-frame span would say."""
    sparse = records([25], [2.5])
    full = records(range(10, 40), [1.0 + i / 10 for i in range(30)])  # 20 of them in the window [2 s, 4 s)
    m = measure({"s0": sparse, "s1": full}, k=2, warmup=1.0, seconds=2.0, fps=10.0)
    assert m["streams"]["s0"]["kept"] == 0.05 and m["streams"]["s1"]["kept"] == 1.0
    assert m["kept_spread"] == 0.95
    assert measure({"s0": sparse, "s1": full}, k=2, warmup=1.0, seconds=2.0)["streams"]["s0"]["kept"] == 1.0


# -- the command, for real ---------------------------------------------------------------------


def test_every_copy_decodes_as_the_files_first_source_does():
    """A trial's K copies of the video take the first source's decoding keys (`fast_decode`, ...):
    what is measured is how the file decodes, and they load as a pipeline file's sources."""
    from streamlens.config import load_pipeline

    overrides = trial_overrides(str(REPO / "samples" / "traffic.mp4"), 3, "tcp://127.0.0.1:1",
                                source_keys={"fast_decode": True, "decode": "process"})
    config = load_pipeline(REPO / "pipelines" / "quickstart.yaml", overrides=overrides)
    assert [(s.name, s.fast_decode, s.decode, s.live) for s in config.sources] == [
        (f"s{i}", True, "process", True) for i in range(3)]


def test_two_trials_on_the_quickstart_pipeline(tmp_path):
    out = tmp_path / "bench.json"
    done = streamlens("bench", QUICKSTART, "--streams", "1,2", "--seconds", "3", "--warmup", "1",
                      "--decode-seconds", "2", "--no-baseline", "--no-hold", "--reference-cache",
                      str(tmp_path / "cache"), "--out", str(out), timeout=180)
    assert done.returncode == 0, done.stderr
    table = [line.split() for line in done.stdout.splitlines()]
    assert ["K", "kept", "kept", "min", "spread", "p50", "ms", "p95", "ms", "p99", "ms"] in [r[:11] for r in table]
    rows = [r for r in table if r[:1] in (["1"], ["2"]) and r[-1] in ("pass", "fail")]
    assert [r[0] for r in rows] == ["1", "2"]
    assert "decode-only limit:" in done.stdout and "baseline: skipped: --no-baseline" in done.stdout
    report = json.loads(out.read_text())
    assert [t["k"] for t in report["trials"]] == [1, 2]
    for trial in report["trials"]:
        assert trial["status"] == "ok"
        assert 0.9 < trial["kept"] <= 1.0 and 0.9 < trial["kept_min"] <= 1.0
        assert trial["latency_ms"]["p95"] > 0
        assert trial["frames"] >= 0.9 * 30 * 3 * trial["k"]  # 3 s of 30 fps per stream
        assert set(trial["streams"]) == {f"s{i}" for i in range(trial["k"])}
        for stream in trial["streams"].values():
            assert stream["eos"]["type"] == "eos" and stream["pipeline"]["frames"] > 0
            assert stream["stats"]["type"] == "stats"
    assert report["decode_limit"]["fps"] > 0 and report["decode_limit"]["streams"] > 0
    assert report["budget_ms"] == 33.0 and report["min_kept"] == 1.0 and report["min_f1"] == 0.85
    assert report["hold"] is None and all(0.0 <= t["accuracy"]["f1"] <= 1.0 for t in report["trials"])
    assert report["machine"]["cores"] >= 1 and report["versions"]["python"]
    assert report["video"]["fps"] == 30.0 and report["baseline"] == {"skipped": "--no-baseline"}
    passing = [t["k"] for t in report["trials"] if t["passed"]]
    assert report["answers"]["max_streams"] == max(passing, default=None)


@pytest.mark.skipif(importlib.util.find_spec("ultralytics") is None, reason="the ultralytics extra is not installed")
@pytest.mark.skipif(importlib.util.find_spec("lap") is None, reason="Ultralytics' tracker needs the lap package")
def test_the_ultralytics_baseline_with_a_random_yolov8n(tmp_path):
    from streamlens.detect.ultralytics_offline import import_ultralytics_offline

    import_ultralytics_offline()
    from ultralytics import YOLO

    model = tmp_path / "yolov8n.pt"
    YOLO("yolov8n.yaml").save(model)  # random weights, built here: nothing downloaded
    out = tmp_path / "bench.json"
    done = streamlens("bench", QUICKSTART, "--streams", "1", "--seconds", "1", "--warmup", "0.5",
                      "--decode-seconds", "0", "--baseline-model", str(model), "--baseline-frames", "30",
                      "--no-hold", "--reference-cache", str(tmp_path / "cache"), "--out", str(out), timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    baseline = report["baseline"]
    assert baseline["fps"] > 0 and baseline["frames"] == 20 and baseline["streams"] > 0
    assert report["decode_limit"] is None
    if report["answers"]["max_streams"]:
        assert report["answers"]["ratio_to_baseline"] > 0
    assert "ratio to the baseline" in done.stdout or not report["answers"]["max_streams"]


def test_the_decode_only_limit_reads_motion_vectors_of_a_real_clip():
    from streamlens.bench.probe import decode_limit

    video = need_video("highway_720p30.mp4")
    limit = decode_limit(str(video), seconds=1, export_mvs=True, workers=1)
    assert limit["export_mvs"] and limit["frames"] > 0 and limit["streams"] > 0


# -- bad input ---------------------------------------------------------------------------------


def test_a_missing_pipeline_file_is_one_line(tmp_path):
    done = streamlens("bench", str(tmp_path / "nope.yaml"), "--no-baseline")
    assert done.returncode == 2
    assert done.stderr.strip() == f"{tmp_path / 'nope.yaml'}: file not found"


def test_a_missing_baseline_model_is_one_line():
    done = streamlens("bench", QUICKSTART, "--baseline-model", "no/such/yolov8n.pt")
    assert done.returncode == 2
    assert done.stderr.strip() == "--baseline-model: file not found: no/such/yolov8n.pt"


def test_a_detector_that_cannot_run_is_one_line_and_no_trial_runs(tmp_path):
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(f"sources: [{{uri: {REPO / 'samples' / 'traffic.mp4'}}}]\n"
                        "detector: {backend: onnx, model: junk.onnx}\nsinks: []\n")
    out = tmp_path / "bench.json"
    done = streamlens("bench", str(pipeline), "--streams", "1-4", "--seconds", "1", "--warmup", "0",
                      "--decode-seconds", "0", "--reference-cache", str(tmp_path / "cache"), "--out", str(out),
                      timeout=120)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "error: reference: detector.model:" in errors[0] and "junk.onnx" in errors[0]
    report = json.loads(out.read_text())
    assert report["trials"] == [] and "junk.onnx" in report["reference"]["error"]
    assert "Ultralytics cannot load" in report["baseline"]["skipped"]


def test_staggered_copies_run_through_the_pipeline_and_the_hold_baseline(tmp_path):
    """`--stagger` reaches both: copy 1 of 2 begins half the sample in (`sources[].start_s`), and every
    stream of each is scored against the clip."""
    out = tmp_path / "bench.json"
    done = streamlens("bench", QUICKSTART, "--stagger", "--streams", "2", "--seconds", "2", "--warmup", "0.5",
                      "--decode-seconds", "0", "--no-baseline", "--reference-cache", str(tmp_path / "cache"),
                      "--out", str(out), timeout=180)
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["stagger_s"] == 10.0  # the sample: 300 frames at 30 fps
    for trial in report["trials"] + report["hold"]:
        assert trial["status"] == "ok" and set(trial["streams"]) == {"s0", "s1"}, trial
        assert all(s["accuracy"]["frames"] > 0 and s["accuracy"]["unmapped"] == 0 for s in trial["streams"].values())
