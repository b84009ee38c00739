"""global_id across two real cameras: the top and bottom halves of the shared highway clip, each
served by GStreamer's RTSP server, one pipeline with `reid: {across: [top, bottom]}`.

Vehicles on the right carriageway drive away from the camera: out of the bottom half across the
seam into the top half a moment later. A link is right when the two tracks meet at the seam: the
bottom track's box reaches the top of its frame, and the top track's box the bottom of its own,
within a second of each other, at nearly the same x."""

import json
import signal
import subprocess
import sys
import time
from collections import defaultdict

import numpy as np
import pytest

from .conftest import DATA, REPO, need_video
from .rtsp_server import GstRtspServer, gst_missing

SECONDS = 12  # of the clip served, looped
HALF = 360


@pytest.fixture(scope="module")
def halves(tmp_path_factory):
    clip = need_video("highway_720p30.mp4")
    model = DATA / "models" / "yolox_nano" / "yolox_nano.onnx"
    if not model.is_file():
        pytest.skip(f"{model} not found: the shared models live in ../shared/data outside the repository")
    import av

    folder = tmp_path_factory.mktemp("halves")
    paths = {"top": folder / "top.mp4", "bottom": folder / "bottom.mp4"}
    with av.open(str(clip)) as src:
        outs = {name: av.open(str(path), "w") for name, path in paths.items()}
        streams = {}
        for name, out in outs.items():
            s = out.add_stream("libx264", rate=30)
            s.width, s.height, s.pix_fmt = 1280, HALF, "yuv420p"
            s.options = {"preset": "veryfast", "crf": "20", "g": "30", "bf": "0"}
            streams[name] = s
        for i, frame in enumerate(src.decode(video=0)):
            if i >= SECONDS * 30:
                break
            image = frame.to_ndarray(format="bgr24")
            for name, part in (("top", image[:HALF]), ("bottom", image[HALF:])):
                picture = av.VideoFrame.from_ndarray(np.ascontiguousarray(part), format="bgr24")
                for packet in streams[name].encode(picture):
                    outs[name].mux(packet)
        for name, out in outs.items():
            for packet in streams[name].encode():
                out.mux(packet)
            out.close()
    return paths, model


def tracks(messages):
    """{(stream, id): [(ts, box)]} and {(stream, id): global_id on its last frame}."""
    seen, gids = defaultdict(list), {}
    for m in messages:
        if m["type"] == "frame":
            for obj in m["objects"]:
                if obj["id"] >= 0:
                    seen[(m["stream"], obj["id"])].append((m["ts"], obj["box"]))
                    assert "global_id" in obj, obj
                    gids[(m["stream"], obj["id"])] = obj["global_id"]
    return seen, gids


def meet_at_the_seam(bottom, top) -> bool:
    for tb, (x1, y1, x2, _) in bottom:
        if y1 > 40:
            continue
        for tt, (u1, _, u2, v2) in top:
            if v2 >= HALF - 40 and abs(tt - tb) <= 1.0 and abs((x1 + x2) / 2 - (u1 + u2) / 2) <= 120:
                return True
    return False


def links(messages):
    seen, gids = tracks(messages)
    by_gid = defaultdict(list)
    for key, gid in gids.items():
        by_gid[gid].append(key)
    out = []
    for keys in by_gid.values():
        for a in (k for k in keys if k[0] == "bottom"):
            for b in (k for k in keys if k[0] == "top"):
                out.append((meet_at_the_seam(seen[a], seen[b]), a, b))
    return out


def test_a_vehicle_keeps_its_global_id_from_one_camera_to_the_next(tmp_path, halves):
    reason = gst_missing()
    if reason:
        pytest.skip(reason)
    paths, model = halves
    (tmp_path / "gst").mkdir()
    out = tmp_path / "out.jsonl"
    with GstRtspServer(paths, tmp_path / "gst") as server:
        pipeline = tmp_path / "p.yaml"
        pipeline.write_text(f"""
sources:
  - {{name: top, uri: 'rtsp://127.0.0.1:{server.port}/top', transport: tcp}}
  - {{name: bottom, uri: 'rtsp://127.0.0.1:{server.port}/bottom', transport: tcp}}
detector: {{backend: onnx, model: {model}, conf: 0.3, threads: 1, classes: [car, truck, bus, motorcycle]}}
keyframes: {{interval: 3}}
tracker: {{motion: kalman}}
reid: {{across: [top, bottom]}}
runtime: {{workers: 2}}
sinks: [{{type: jsonl, path: {out}}}]
""")
        stderr = (tmp_path / "stderr.txt").open("w")
        proc = subprocess.Popen([sys.executable, "-m", "streamlens", "run", "-q", str(pipeline)], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)

        def messages():
            return [json.loads(line) for line in out.read_text().split("\n")[:-1]] if out.exists() else []

        try:
            deadline = time.monotonic() + 300  # a cap for a broken run, far above what a slow machine needs
            while time.monotonic() < deadline and proc.poll() is None:
                if sum(right for right, _, _ in links(messages())) >= 5:
                    break
                time.sleep(1.0)
            assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            proc.wait(60)
            stderr.close()
    found = links(messages())
    right = [(a, b) for ok, a, b in found if ok]
    # `runtime.workers: 2`, yet one engine: the group is placed whole (scale/policy.py deal); every
    # object has a global_id, and the links are the vehicles that crossed the seam
    # (links are made on live frames, so which ones the first minutes bring varies: most are right,
    # and an alike car crossing just after another is sometimes joined to it)
    assert len(right) >= 3, (found, (tmp_path / "stderr.txt").read_text()[-2000:])
    assert len(right) > len(found) - len(right), found
    embeddings = [m for m in messages() if m["type"] == "embedding"]
    assert embeddings and {m["name"] for m in embeddings} == {"reid"}
