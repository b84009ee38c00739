"""Tracking metrics: the official MOTChallenge devkit's scores for the CEM tracker, TrackEval's
MOT17 preprocessing (distractors, ignored boxes), and parity with `trackers.eval`'s own evaluation.

The shared data (../shared/data/mot) lives outside the repository; tests that need it skip without.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from streamlens.eval.metrics import (benchmark_of, combine, format_table, prepare_sequence, read_mot_file,
                                     score_sequence)

from .conftest import DATA

MOT = DATA / "mot"


def need(path):
    if not path.exists():
        pytest.skip(f"{path} not found: the MOTChallenge test data lives in ../shared/data outside the repository")
    return path


def expected_cem_scores() -> dict[str, dict[str, float]]:
    """The devkit's table per sequence from EXPECTED_METRICS_CEM_tracker.txt."""
    lines = need(MOT / "EXPECTED_METRICS_CEM_tracker.txt").read_text().splitlines()
    scores = {}
    for i, line in enumerate(lines):
        if line.strip() in ("TUD-Campus", "TUD-Stadtmitte") and "IDF1" in lines[i + 1]:
            names = re.split(r"[\s|]+", lines[i + 1].strip())
            values = [float(v) for v in re.split(r"[\s|]+", lines[i + 2].strip())]
            scores[line.strip()] = dict(zip(names, values))
    assert set(scores) == {"TUD-Campus", "TUD-Stadtmitte"}
    return scores


@pytest.mark.parametrize("sequence", ["TUD-Campus", "TUD-Stadtmitte"])
def test_cem_tracker_scores_match_the_official_devkit(sequence):
    expected = expected_cem_scores()[sequence]
    gt = read_mot_file(MOT / sequence / "gt.txt")
    assert benchmark_of(gt) == "MOT15"
    result = score_sequence(sequence, gt, read_mot_file(MOT / sequence / "test.txt"))
    got = result.summary()
    frames = int(gt[:, 0].max())
    got["FAR"] = got["FP"] / frames
    gt_boxes = result.clear["CLR_TP"] + result.clear["CLR_FN"]
    got["MOTAL"] = 100 * (1 - (got["FN"] + got["FP"] + math.log10(got["IDs"] + 1)) / gt_boxes)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=0.051 if key != "FAR" else 0.0051), key


def test_mot17_rules_drop_distractors_and_ignored_boxes():
    """Frame 1: a pedestrian (scored), a static person (class 7, a distractor), a box marked 0
    (ignored). The tracker covers all three: only the pedestrian counts, and nothing is a false
    positive."""
    gt = np.array([[1, 1, 0, 0, 10, 20, 1, 1, 1.0],
                   [1, 2, 50, 0, 10, 20, 1, 7, 1.0],
                   [1, 3, 100, 0, 10, 20, 0, 1, 1.0]])
    tracked = np.array([[1, 11, 0, 0, 10, 20, 1, -1, -1, -1],
                        [1, 12, 50, 0, 10, 20, 1, -1, -1, -1],
                        [1, 13, 100, 0, 10, 20, 1, -1, -1, -1.0]])
    assert benchmark_of(gt) == "MOT17"
    prepared = prepare_sequence(gt, tracked)
    assert [len(ids) for ids in prepared.gt_ids] == [1]
    assert [len(ids) for ids in prepared.tracker_ids] == [2]   # the distractor's match is removed
    scores = score_sequence("demo", gt, tracked)
    assert scores.clear["CLR_TP"] == 1 and scores.clear["CLR_FP"] == 1   # the box on the ignored one counts
    assert scores.mota == pytest.approx(0.0)


def test_identity_switch_and_combination():
    gt = np.array([[f, 1, 10, 10, 20, 40, 1, 1, 1.0] for f in range(1, 11)])
    steady = gt.copy()
    steady[:, 1] = 5
    switching = steady.copy()
    switching[5:, 1] = 6
    a, b = score_sequence("steady", gt, steady), score_sequence("switching", gt, switching)
    assert (a.hota, a.mota, a.idf1) == (pytest.approx(100), pytest.approx(100), pytest.approx(100))
    assert b.clear["IDSW"] == 1 and b.idf1 == pytest.approx(50) and b.mota == pytest.approx(90)
    both = combine([a, b])
    assert both.clear["IDSW"] == 1 and both.mota == pytest.approx(95)
    table = format_table([a, b, both])
    assert table.splitlines()[-1].startswith("COMBINED") and "HOTA" in table.splitlines()[0]


def test_parity_with_trackers_evaluation(tmp_path):
    """On a MOT17 sequence, these scores are exactly those of `trackers.eval.evaluate_mot_sequence`."""
    from trackers.eval import evaluate_mot_sequence

    from streamlens.eval.mot import load_sequence, replay, write_results
    from streamlens.track import KeyframeTracker

    sequence = load_sequence(need(MOT / "MOT17-09"))
    path = write_results(replay(sequence, KeyframeTracker("kalman", sequence.fps), 1), tmp_path / "MOT17-09.txt")
    ours = score_sequence("MOT17-09", read_mot_file(sequence.gt_path), read_mot_file(path), sequence.length)
    theirs = evaluate_mot_sequence(sequence.gt_path, path, metrics=["CLEAR", "HOTA", "Identity"])
    assert ours.hota_detail["HOTA"] == pytest.approx(theirs.HOTA.HOTA, abs=1e-9)
    assert ours.clear["MOTA"] == pytest.approx(theirs.CLEAR.MOTA, abs=1e-9)
    assert ours.identity["IDF1"] == pytest.approx(theirs.Identity.IDF1, abs=1e-9)
    assert ours.clear["IDSW"] == theirs.CLEAR.IDSW
