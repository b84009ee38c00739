"""Files of a `reid.across` group reach the result stages merged by media time (graph/order.py), so the
linker sees them in one order on every run."""

import json
import threading

import numpy as np

import streamlens
from streamlens.config import load_pipeline as load_config
from streamlens.frame import Frame
from streamlens.graph.order import MediaOrder, media_orders

from .conftest import REPO


def frames(stream: str, times: list[float]) -> list[Frame]:
    return [Frame(stream, i, t, 0.0, np.zeros((4, 4, 3), np.uint8)) for i, t in enumerate(times)]


def test_two_streams_are_admitted_by_media_time_whichever_thread_runs_first():
    """Each stream's thread takes its turn and the 'engine' publishes at once: whatever the threads'
    speed, the admissions come out merged by media time, ties to the stream named first; a stream
    that ends is no longer waited for."""
    order = MediaOrder(["a", "b"])
    order.joined("a")
    order.joined("b")
    admitted, lock, stop = [], threading.Lock(), threading.Event()
    times = {"a": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7], "b": [0.0, 0.05, 0.15, 0.25]}

    def run(stream: str) -> None:
        for frame in frames(stream, times[stream]):
            order.take_turn(frame, stop)
            with lock:
                admitted.append((frame.pts, stream))
            order.published(stream)
        order.ended(stream)

    threads = [threading.Thread(target=run, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads)
    assert admitted == sorted(admitted, key=lambda item: (item[0], item[1]))
    assert len(admitted) == 12


def test_a_stopped_stream_does_not_wait():
    order = MediaOrder(["a", "b"])
    order.joined("a")
    order.joined("b")
    stop = threading.Event()
    stop.set()
    order.take_turn(frames("a", [1.0])[0], stop)  # b never comes: a stop ends the wait


def write(tmp_path, sources: str, reid: str = "{across: [one, two], clock: media}") -> object:
    path = tmp_path / "p.yaml"
    path.write_text(f"""
sources: {sources}
detector: {{backend: motion}}
keyframes: {{interval: 5, adaptive: true, max_interval: 15}}
reid: {reid}
sinks: [{{type: jsonl, path: {tmp_path / 'out.jsonl'}}}]
""")
    return path


def test_two_files_of_a_group_are_published_merged_by_media_time(tmp_path):
    """The shipped sample twice, the second from 2 s in (its media time begins at 2 s): the frames of
    the two streams reach the sinks merged by media time (the second's first frame after the first's
    two seconds), not as fast as each decodes."""
    sample = REPO / "samples" / "traffic.mp4"
    path = write(tmp_path, f"[{{name: one, uri: {sample}}}, {{name: two, uri: {sample}, start_s: 2}}]")
    with streamlens.Pipeline.from_yaml(path) as pipe:
        assert pipe.run().exit_code == 0
    lines = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    rank = {"one": 0, "two": 1}
    seen = [(m["pts"], rank[m["stream"]]) for m in lines if m["type"] == "frame"]
    assert len({r for _, r in seen}) == 2 and len(seen) > 400
    assert seen == sorted(seen)


def test_only_files_of_a_media_clock_group_are_merged(tmp_path):
    sample = REPO / "samples" / "traffic.mp4"
    files = f"[{{name: one, uri: {sample}}}, {{name: two, uri: {sample}}}, {{name: three, uri: {sample}}}]"
    merged = media_orders(load_config(write(tmp_path, files)))
    assert set(merged) == {"one", "two"} and merged["one"] is merged["two"]
    live = f"[{{name: one, uri: {sample}, live: true}}, {{name: two, uri: {sample}}}]"
    assert media_orders(load_config(write(tmp_path, live))) == {}
    assert media_orders(load_config(write(tmp_path, files, "{across: [one, two], clock: wall}"))) == {}
    assert media_orders(load_config(write(tmp_path, files, "{}"))) == {}
