"""Where each core's time goes at K live highway streams, by thread, on the default engines (issue
47 point 1): decoding (the streams' source threads), the detector's thread, the engine's thread,
the processes' main threads (the run's loop, the figures each engine sends the supervisor, the
supervisor's), and the rest; with the share of frames the detector saw and the rungs the budget
controller stood on. Side by side for several K, in one run of the tool.

For each K: `streamlens run` of `pipelines/highway_yolox.yaml`'s settings on K live, looping copies
of the shared 720p clip (`--clip indoor`: `indoor_yolox.yaml`'s on the shared 10 fps indoor clip;
the default `runtime.workers`: one engine per core), one zmq sink. After
`--warmup` seconds, every thread's CPU time is read from /proc twice, `--seconds` apart; py-spy
names the threads (`source-*` decodes its stream, `detector`, `engine`); /metrics gives the frames
published meanwhile, /api/stats each stream's keyframes detected a second and its rung at the end. CPU time is
what the kernel counted, so it is exact whatever else runs; the frames a second are not. So is
each thread's time runnable but waiting for a core (the second field of /proc/PID/task/TID/schedstat):
for the detector, over its keyframes, it says how much of a keyframe's time was the cores being busy.

    python tools/profile_threads.py [--streams 10,12,16] [--seconds 20]   # writes tools/results/profile_threads.md
    python tools/profile_threads.py --clip indoor --streams 64 --out /tmp/indoor.md
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from profile_engine import HIGHWAY, INDOOR, INDOOR_VIDEO, VIDEO, highway_run  # a tool beside this one (tools/)

from streamlens.bench.harness import RESULTS, YOLOX_NANO, header, need, write_page

GROUPS = ("decoding (source threads)", "detector thread", "engine thread", "main threads", "the rest")


def group_of(name: str) -> str:
    if name.startswith("source-"):
        return GROUPS[0]
    return {"detector": GROUPS[1], "engine": GROUPS[2], "MainThread": GROUPS[3]}.get(name, GROUPS[4])


def processes(root: int) -> list[int]:
    """`root` and its children (the supervisor and its engines)."""
    found = subprocess.run(["pgrep", "-P", str(root)], capture_output=True, text=True).stdout.split()
    return [root] + [int(pid) for pid in found]


def cpu_by_thread(pids: list[int]) -> dict[int, tuple[float, float]]:
    """Each thread's CPU seconds so far (utime + stime of /proc/PID/task/TID/stat) and its seconds
    runnable but waiting for a core (schedstat's run delay; 0.0 where the kernel keeps none)."""
    ticks = os.sysconf("SC_CLK_TCK")
    found = {}
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            try:
                waited = int((task / "schedstat").read_text().split()[1]) / 1e9
            except (OSError, IndexError, ValueError):
                waited = 0.0
            found[int(task.name)] = ((int(fields[11]) + int(fields[12])) / ticks, waited)
    return found


def thread_names(pids: list[int]) -> dict[int, str]:
    """Native thread id -> Python thread name, by py-spy's dump of each process."""
    names = {}
    for pid in pids:
        for _ in range(3):  # a dump can fail while the process is busy: try again
            dump = subprocess.run(["py-spy", "dump", "-p", str(pid)], capture_output=True, text=True).stdout
            found = {int(tid): name for tid, name in re.findall(r'^Thread (\d+) \([^)]*\): "([^"]*)"', dump, re.M)}
            if found:
                names.update(found)
                break
    return names


def metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as r:
        lines = r.read().decode().splitlines()
    return sum(float(line.split()[-1]) for line in lines if line.startswith(name + "{"))


def rungs(port: int) -> tuple[collections.Counter, float]:
    """How many streams stand on each rung now (keyframes waiting or not, the intervals' stretch, the
    share shed), and the keyframes detected a second over every stream (their recent rates)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/stats", timeout=60) as r:
        streams = json.load(r)["streams"]
    found = collections.Counter()
    for s in streams.values():
        c = s.get("control") or {}
        found[f"{'wait' if c.get('keyframe_wait') else 'no wait'}, x{c.get('keyframe_stretch', 1):g}, "
              f"shed {c.get('shed_fraction', 0):.2f}"] += 1
    return found, sum(s.get("keyframes_per_s") or 0.0 for s in streams.values())


def profile(k: int, warmup: float, seconds: float, indoor: bool = False) -> dict:
    with highway_run(k, "profile_threads", indoor=indoor) as (run, http, _):
        time.sleep(warmup)
        pids = processes(run.pid)
        names = thread_names(pids)
        frames0 = metric(http, "streamlens_frames_total")
        before, started = cpu_by_thread(pids), time.monotonic()
        time.sleep(seconds)
        after, wall = cpu_by_thread(pids), time.monotonic() - started
        frames = metric(http, "streamlens_frames_total") - frames0
        standing, detected_per_s = rungs(http)
    cores, waits = collections.Counter(), collections.Counter()
    for tid, (used, waited) in after.items():
        group, (used0, waited0) = group_of(names.get(tid, "")), before.get(tid, (used, waited))
        cores[group] += (used - used0) / wall
        waits[group] += (waited - waited0) / wall
    return {"k": k, "cores": cores, "waits": waits, "fps": frames / wall, "detected_per_s": detected_per_s,
            "detected_share": detected_per_s * wall / frames if frames else 0.0, "rungs": standing}


def ms_each(seconds_per_s: float, count_per_s: float) -> float:
    """Milliseconds of a thread group's time per item (frame, keyframe); NaN without any item."""
    return 1000 * seconds_per_s / count_per_s if count_per_s else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", default="10,12,16")
    parser.add_argument("--warmup", type=float, default=10)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--clip", choices=("highway", "indoor"), default="highway",
                        help="the shared 720p30 highway clip (default) or the 10 fps indoor one")
    parser.add_argument("--out", type=Path, default=RESULTS / "profile_threads.md")
    args = parser.parse_args()
    if shutil.which("py-spy") is None:
        raise SystemExit("profile_threads: py-spy is not installed (pip install -e '.[profile]')")
    indoor = args.clip == "indoor"
    video = INDOOR_VIDEO if indoor else VIDEO
    need(video, YOLOX_NANO)
    found = [profile(int(k), args.warmup, args.seconds, indoor) for k in args.streams.split(",")]
    rows = []
    for f in found:
        total = sum(f["cores"].values())
        shares = " | ".join(f"{f['cores'][g]:.2f} ({f['cores'][g] / total:.0%})" for g in GROUPS)
        per_frame, decode_waited = (ms_each(f[kind][GROUPS[0]], f["fps"]) for kind in ("cores", "waits"))
        per_detection, waited = (ms_each(f[kind][GROUPS[1]], f["detected_per_s"]) for kind in ("cores", "waits"))
        standing = "; ".join(f"{n}: {rung}" for rung, n in sorted(f["rungs"].items()))
        rows.append(f"| {f['k']} | {total:.2f} | {shares} | {f['fps']:.0f} | {f['detected_share']:.1%} | "
                    f"{per_frame:.2f} | {per_detection:.1f} | {waited:.1f} | {decode_waited:.2f} | {standing} |")
    clip, settings = ("10 fps indoor", INDOOR) if indoor else ("720p highway", HIGHWAY)
    text = header(f"Where each core's time goes at {args.streams} live {clip} streams",
                  more=[f"Measured {args.seconds:g} s per K after {args.warmup:g} s of warm-up; CPU time from /proc."])
    text += f"""
`pipelines/{'indoor' if indoor else 'highway'}_yolox.yaml`'s settings (YOLOX-Nano at 416x256, one onnxruntime thread per
engine, `mv` tracker, adaptive keyframes {settings['interval']} to {settings['max_interval']})
on K live, looping copies of `{video.name}`, one zmq sink, the default engines (one per core). Cores: CPU seconds a second, by thread group (its share of the run's).
Waiting: the detector's thread's time runnable but not on a core, per keyframe detected, and the
source threads' per frame published (schedstat's run delay).

| K | cores | {' | '.join(GROUPS)} | frames/s | detector's share of frames | decode ms a frame | detector ms a keyframe | detector waiting for a core, ms a keyframe | decoding waiting for a core, ms a frame | streams on each rung at the end |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}
"""
    write_page(args.out, text, keep="## Notes")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
