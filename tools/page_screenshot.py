"""A screenshot of the live page (`runtime.http`) on the shared highway clip, for the README:
tools/results/page.png.

    python tools/page_screenshot.py [--seconds 20] [--out tools/results/page.png]

It runs two live, looping copies of the real highway camera from ../shared/data (the 720p H.264
clip and the 320x240 MPEG-4 one) through YOLOX-Nano with the detector and keyframe sections of
pipelines/highway_yolox.yaml, a counting line and a zone on the near carriageway, and snapshots
for the objects' start and end; opens the page in Debian's headless Chromium (driven by Selenium,
with /usr/bin/chromedriver: nothing is downloaded), waits `--seconds` so that counts, events and
the latency plot have something to show, pauses the page's live view (so that the canvas and what
it says it drew are the same frame) and saves the window.

tests/test_web_page.py calls the same code (`highway_pipeline`, `open_browser`, `capture`) and then
looks at the screenshot for the boxes the frame messages have.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
import time
from pathlib import Path

from streamlens.bench.harness import DATA, REPO, RESULTS

ROOT = REPO
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
#: the browser's window, in CSS pixels (the screenshot's size)
WINDOW = (1500, 940)


def browser_missing() -> str | None:
    """Why no browser can be driven here (None: it can)."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not path.is_file():
            return f"{path} not found: install Debian's {package} package"
    try:
        import selenium
    except ImportError:
        return "selenium is not installed (pip install selenium)"
    if int(selenium.__version__.split(".")[0]) < 4:
        return f"selenium {selenium.__version__} is too old: 4 or newer drives Chromium through a given chromedriver"
    return None


def data_missing(data: Path = DATA) -> str | None:
    """Why the highway clip cannot be run here (None: it can)."""
    for part in ("video/highway_720p30.mp4", "video/highway_320x240.avi", "models/yolox_nano/yolox_nano.onnx"):
        if not (data / part).is_file():
            return f"{data / part} not found: the real clips and models live in ../shared/data outside the repository"
    return None


def open_browser(window: tuple[int, int] = WINDOW):
    """Headless Chromium driven by Selenium through /usr/bin/chromedriver (no Selenium Manager, no
    download), with the browser's console log kept (`driver.get_log("browser")`)."""
    os.environ.setdefault("SE_OFFLINE", "1")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={window[0]},{window[1]}", "--force-device-scale-factor=1", "--hide-scrollbars"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


def highway_pipeline(out: Path, data: Path = DATA, preview_fps: float = 5.0) -> Path:
    """Write the screenshot's pipeline file into folder `out` (results in `out/highway.jsonl`)
    and return its path. The line is tools/bench_counting.py's, as fractions so that it lies on
    the same road in both clips."""
    detector = data / "models" / "yolox_nano"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "page.yaml"
    path.write_text(f"""
sources:
  - {{name: highway, uri: {data / 'video' / 'highway_720p30.mp4'}, live: true, loop: true}}
  - {{name: highway-sd, uri: {data / 'video' / 'highway_320x240.avi'}, live: true, loop: true}}
detector:
  backend: onnx
  model: {detector / 'yolox_nano.onnx'}
  names: {detector / 'coco_classes.txt'}
  conf: 0.3
  resize: bucket
  threads: 1
  classes: [car, truck, bus, motorbike]
keyframes: {{interval: 5, adaptive: true, max_interval: 15}}
tracker: {{motion: mv}}
analytics:
  lines: [{{name: road, points: [[0.165, 0.0], [1.0, 1.0]]}}]
  zones: [{{name: near, polygon: [[0.19, 1.0], [0.69, 0.03], [0.86, 0.03], [0.91, 1.0]]}}]
  snapshots: {{events: [object_start, object_end]}}
sinks: [{{type: jsonl, path: {out / 'highway.jsonl'}}}]
runtime: {{http: {{port: 0, preview_fps: {preview_fps}}}}}
""")
    return path


@contextlib.contextmanager
def running(path: Path, timeout: float = 60.0):
    """The pipeline of file `path` running on a thread, once its HTTP server listens; stopped after."""
    import streamlens

    pipeline = streamlens.Pipeline.from_yaml(path)
    box: dict = {}

    def run() -> None:
        try:
            box["report"] = pipeline.run()
        except BaseException as e:  # noqa: BLE001 - raised again below, on the caller's thread
            box["error"] = e

    runner = threading.Thread(target=run, name="pipeline", daemon=True)
    runner.start()
    deadline = time.monotonic() + timeout
    while pipeline.http_port is None and runner.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        if "error" in box:
            raise box["error"]
        if pipeline.http_port is None:
            raise RuntimeError(f"{path}: the pipeline's HTTP server did not start within {timeout:g} s")
        yield pipeline
    finally:
        pipeline.stop()
        runner.join(30)
        if runner.is_alive():
            pipeline.abort()
            runner.join(10)


def wait_for(check, timeout: float, what: str, every: float = 0.1):
    """`check()`'s first true value, asked every `every` s for at most `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


#: what the page drew, read in one go: per stream its seq, boxes, colours, its size (source pixels)
#: and where the frame lies on the screen: `at` [left, top, scale], in CSS pixels (the canvas is
#: fitted into its box, `object-fit: contain`), so source (x, y) is at (left + x scale, top + y scale)
_DRAWN = """
const out = {ratio: window.devicePixelRatio, streams: {}};
for (const canvas of document.querySelectorAll("canvas[data-stream]")) {
  const name = canvas.dataset.stream, drawn = window.streamlens.drawn[name];
  if (!drawn) continue;
  const r = canvas.getBoundingClientRect(), w = canvas.width, h = canvas.height;
  const scale = Math.min(r.width / w, r.height / h);
  out.streams[name] = {seq: drawn.seq, boxes: drawn.boxes, colors: drawn.colors, rules: drawn.rules, size: [w, h],
                       at: [r.left + (r.width - w * scale) / 2, r.top + (r.height - h * scale) / 2, scale]};
}
return out;
"""


def capture(driver, url: str, out: Path, *, settle_s: float = 0.0, min_boxes: int = 1, rules: bool = True,
            timeout: float = 90.0) -> dict:
    """Open the page at `url`, wait until every stream has drawn a frame (with its lines and zones,
    unless not `rules`; at least `min_boxes` boxes on the canvases in all), wait `settle_s` more,
    pause the live view, save the window to `out` (PNG) and resume. Returns what was on the canvases
    in the screenshot: `_DRAWN`'s answer."""
    driver.get(url)
    wait_for(lambda: driver.execute_script("return window.streamlens && window.streamlens.ready"), timeout,
             "the page to load its streams")
    count = driver.execute_script("return document.querySelectorAll('canvas[data-stream]').length")

    def drawn_enough() -> bool:
        drawn = driver.execute_script(_DRAWN)["streams"]
        return (len(drawn) == count and sum(len(s["boxes"]) for s in drawn.values()) >= min_boxes
                and (not rules or all(s["rules"] for s in drawn.values())))

    wait_for(drawn_enough, timeout, f"every stream to draw a frame and {min_boxes} boxes in all")
    if settle_s:
        time.sleep(settle_s)
        wait_for(drawn_enough, timeout, f"{min_boxes} boxes on the canvases again")
    driver.execute_script("window.streamlens.setPaused(true, false)")  # held, the pause button as it was
    try:
        drawn = driver.execute_script(_DRAWN)
        out.parent.mkdir(parents=True, exist_ok=True)
        if not driver.save_screenshot(str(out)):
            raise RuntimeError(f"the browser could not save a screenshot to {out}")
    finally:
        driver.execute_script("window.streamlens.setPaused(false, false)")
    return drawn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the page runs before the shot")
    parser.add_argument("--out", type=Path, default=RESULTS / "page.png")
    parser.add_argument("--work", type=Path, default=ROOT / "out" / "page", help="the pipeline file and its results")
    args = parser.parse_args(argv)
    missing = browser_missing() or data_missing()
    if missing:
        print(missing, file=sys.stderr)
        return 1
    path = highway_pipeline(args.work)
    driver = open_browser()
    try:
        with running(path) as pipeline:
            drawn = capture(driver, f"http://127.0.0.1:{pipeline.http_port}/", args.out, settle_s=args.seconds,
                            min_boxes=3)
    finally:
        driver.quit()
    boxes = {name: len(s["boxes"]) for name, s in drawn["streams"].items()}
    print(f"wrote {args.out}: boxes drawn per stream {boxes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
