"""A pipeline run with a `-seg` detector, for the tests of masks from detectors: the run's mask
figures and every published object."""

from __future__ import annotations

import json
from pathlib import Path

import streamlens


def run_seg_pipeline(folder: Path, pipeline: str, sinks: list | None = None) -> tuple[dict, list[dict]]:
    """Run `pipeline` (YAML; its jsonl sink writes `out.jsonl` in `folder`, the run's folder) with
    `sinks` added; (its `segment_stats()`, the objects of every frame message). Asserts it ended well
    and that the masks came from the detector."""
    path = folder / "p.yaml"
    path.write_text(pipeline)
    with streamlens.Pipeline.from_yaml(path, sinks=sinks) as pipe:
        report = pipe.run()
        stats = pipe.segment_stats()
    assert report.exit_code == 0, report.error
    assert stats["source"] == "detector" and stats["masks"] > 0
    frames = [json.loads(line) for line in (folder / "out.jsonl").read_text().splitlines()]
    return stats, [o for m in frames if m["type"] == "frame" for o in m["objects"]]
