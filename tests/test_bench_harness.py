"""streamlens.bench.harness: what every benchmark in tools/ shares (the machine and its CPU flags, data
paths, trials in turns, the results page), and the CPU flags streamlens.bench.probe reads."""

from __future__ import annotations

import pytest

from streamlens.bench import harness
from streamlens.bench.probe import CPU_FLAGS, cpu_flags, machine

CPUINFO = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu sse2 avx2 avx512f avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8
"""


def test_cpu_flags_names_each_flag_that_matters_present_or_not():
    assert cpu_flags(CPUINFO) == dict.fromkeys(CPU_FLAGS, True)
    assert cpu_flags("flags : fpu avx2\n") == {name: name == "avx2" for name in CPU_FLAGS}
    assert cpu_flags("processor : 0\n") is None  # no flags line: unknown, not "none"
    found = machine()
    assert set(found) >= {"cpu", "flags", "cores", "usable_cores", "memory_gib", "system"}


def test_machine_line_says_the_model_its_flags_and_what_it_lacks():
    m = {"cpu": "Intel(R) Xeon(R) Platinum 8480+", "flags": cpu_flags(CPUINFO), "cores": 16, "usable_cores": 8,
         "memory_gib": 128.0}
    assert harness.machine_line(m) == ("Intel(R) Xeon(R) Platinum 8480+ (avx2, avx512f, avx512_vnni, avx512_bf16, "
                                       "amx_tile, amx_bf16), 16 cores (8 usable), 128.0 GiB")
    amd = dict(m, cpu="AMD EPYC", flags=cpu_flags("flags : avx2 avx512f avx512_vnni avx512_bf16\n"))
    assert "(avx2, avx512f, avx512_vnni, avx512_bf16; no amx_tile, amx_bf16)" in harness.machine_line(amd)
    old = {"cpu": "AMD EPYC", "cores": 2}  # a result measured before the flags were recorded
    assert harness.machine_line(old) == "AMD EPYC (CPU flags not recorded), 2 cores"
    assert "CPU flags unknown" in harness.machine_line(dict(old, flags=None))


def test_arms_run_in_turns_the_order_reversed_every_other_round():
    ran = []
    found = harness.in_turns(["a", "b", "c"], 4, lambda arm, r: ran.append((r, arm)) or f"{arm}{r}")
    assert [arm for _, arm in ran] == list("abc" "cba" "abc" "cba")
    assert found == {"a": ["a0", "a1", "a2", "a3"], "b": ["b0", "b1", "b2", "b3"], "c": ["c0", "c1", "c2", "c3"]}
    results = {"without": [{"p95": 10.0, "f1": 0.9}, {"p95": 20.0, "f1": None}],
               "with": [{"p95": 12.0, "f1": 0.8}, {"p95": 22.0, "f1": 0.7}]}
    assert harness.medians(results, ["p95", "f1"]) == {"without": {"p95": 15.0, "f1": 0.9},
                                                       "with": {"p95": 17.0, "f1": 0.75}}
    assert harness.paired_ratios(results, "without", "with", "p95") == [1.2, 1.1]


def test_a_missing_clip_ends_the_tool_with_one_line_saying_where_the_data_lives(tmp_path):
    assert harness.need(tmp_path) == tmp_path
    assert harness.need(tmp_path, tmp_path) == (tmp_path, tmp_path)
    with pytest.raises(SystemExit) as ended:
        harness.need(harness.VIDEOS / "no_such_clip.mp4")
    message = str(ended.value)
    assert isinstance(ended.value, harness.Missing) and "\n" not in message
    assert "no_such_clip.mp4" in message and "../shared/data" in message
    with pytest.raises(harness.Missing, match="not found: .*nothing_here"):
        harness.need(tmp_path / "nothing_here")


def test_a_page_starts_with_the_command_the_date_and_the_machine_with_its_flags(tmp_path, monkeypatch):
    monkeypatch.setattr(harness.sys, "argv", [str(harness.REPO / "tools" / "bench_x.py"), "--streams", "6"])
    text = harness.header("A title", more=["Load 1.0"])
    lines = text.splitlines()
    assert lines[0] == "# A title" and lines[1] == ""
    assert lines[2].startswith("Command: `") and "python tools/bench_x.py --streams 6" in lines[2]
    assert lines[3].startswith("Date: ") and lines[3].rstrip().endswith("UTC")
    assert lines[4] == f"Machine: {harness.machine_line()}; Python {harness.platform.python_version()}  "
    assert lines[5] == "Load 1.0"  # the last line without its break
    page = tmp_path / "x.md"
    page.write_text("# Old\n\nold figures\n\n## Notes\n\nread by hand\n")
    harness.write_page(page, text + "\nnew figures\n", keep="## Notes")
    assert page.read_text().startswith("# A title\n") and "old figures" not in page.read_text()
    assert page.read_text().endswith("new figures\n\n## Notes\n\nread by hand\n")


def test_a_page_of_runs_keeps_every_run_newest_first(tmp_path):
    page = tmp_path / "runs.md"
    harness.prepend_section(page, "## run 1\n\nfirst", title="Runs")
    harness.prepend_section(page, "## run 2\n\nsecond")
    assert page.read_text() == "# Runs\n\n## run 2\n\nsecond\n\n## run 1\n\nfirst\n"


def test_the_shipped_pipelines_run_on_the_shared_clips_with_the_shared_model(tmp_path):
    """pipelines/highway_yolox.yaml names the user's camera and the cached model; the benchmarks run
    its settings on the shared clip with the shared YOLOX-Nano, and load it as a run would."""
    from streamlens.config import load_pipeline

    data = harness.DATA
    if not (data / "video" / "highway_720p30.mp4").is_file():
        pytest.skip(f"{data} not found: the shared clips and models live outside the repository")
    tree = harness.shipped("highway_yolox.yaml")
    assert tree["sources"][0]["uri"] == str(data / "video" / "highway_720p30.mp4")
    assert tree["detector"]["model"] == str(data / "models" / "yolox_nano" / "yolox_nano.onnx")
    assert tree["sinks"][1]["path"] == str(harness.PIPELINES / "out" / "highway.jsonl")
    path = harness.shipped_file(harness.PIPELINES / "highway_yolox.yaml")
    assert path == harness.shipped_file(harness.PIPELINES / "highway_yolox.yaml") and path.parent != harness.PIPELINES
    config = load_pipeline(path)
    assert (config.detector.conf, config.keyframes.interval) == (0.3, 5)
    assert harness.shipped_file(harness.PIPELINES / "quickstart.yaml") == harness.PIPELINES / "quickstart.yaml"
    with pytest.raises(harness.Missing, match=r"not found: .*highway_720p30\.mp4"):
        harness.shipped("highway_yolox.yaml", tmp_path)
