"""The benchmarks' harness: what every tool in tools/ shares, said once and the same way everywhere.

A benchmark is a script run from the repository's root (`python tools/bench_x.py`) with streamlens
installed in editable mode, so it imports this module as it imports the rest of the package (no
`sys.path` edits). It gives:

- where things are: `REPO`, `PIPELINES`, `RESULTS` (tools/results: the pages), `DATA` (the shared
  clips and models, ../shared/data beside the checkout, never in the repository), `VIDEOS`, `MODELS`,
  `YOLOX_NANO`; `need(*paths)` gives its paths back when all exist, and otherwise ends the tool
  with one line naming what is missing and where it was looked for (`Missing`, a SystemExit);
- the shipped pipelines as the benchmarks run them: pipelines/highway_yolox.yaml and
  indoor_yolox.yaml read the user's camera (`${HIGHWAY_VIDEO}`, the sample without it) and the model
  cache (`models:yolox_nano`); `shipped(name)` is such a pipeline's tree on its shared clip
  (`SHIPPED_CLIPS`) with the shared YOLOX-Nano, `shipped_file(path)` the same written as a file (any
  other pipeline given back as it is), so the settings are declared once, in pipelines/;
- where it ran: `machine()` (probe's: the CPU's model and the flags that decide which kernels run,
  `CPU_FLAGS`; cores, memory), `machine_line()` the same in words, `versions()`, `versions_line()`;
- A/B trials in turns: `in_turns(arms, rounds, trial)` runs every arm once a round, the order
  reversed every other round (A B, B A, A B, ...), so that a shared machine's drift and the cost of
  going first fall on every arm alike; `medians()` and `paired_ratios()` sum them up;
  `bench_trial()` is one `streamlens bench` trial at K streams, its figures read from its JSON
  (`bench_cells()`, `bench_medians()` write them);
- the page: `header(title)` the lines every results page starts with (the title, the command that
  made it, the date, the machine with its CPU flags, Python); `write_page()` writes a page,
  keeping a hand-written section already on it; `prepend_section()` puts a run's section first on
  a page that keeps every run.

Example:
    >>> machine_line({"cpu": "AMD EPYC", "cores": 2, "usable_cores": 2, "memory_gib": 7.8,
    ...               "flags": {"avx2": True, "avx512f": True, "amx_tile": False}})
    'AMD EPYC (avx2, avx512f; no amx_tile), 2 cores (2 usable), 7.8 GiB'
    >>> found = in_turns(["without", "with"], 3, lambda arm, r: (arm, r))
    >>> [r for r, _ in sorted((r, arm) for arm, runs in found.items() for _, r in runs)] == [0, 0, 1, 1, 2, 2]
    True
    >>> paired_ratios({"a": [{"ms": 2.0}, {"ms": 4.0}], "b": [{"ms": 3.0}, {"ms": 4.0}]}, "a", "b", "ms")
    [1.5, 1.0]
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .probe import CPU_FLAGS, machine, versions

#: the checkout streamlens runs from (editable install): tools/, pipelines/ and the results are in it
REPO = Path(__file__).resolve().parents[2]
PIPELINES = REPO / "pipelines"
RESULTS = REPO / "tools" / "results"
#: the shared clips and models, beside the checkout (the tests read the same folder)
DATA = REPO.parent / "shared" / "data"
VIDEOS = DATA / "video"
MODELS = DATA / "models"
#: YOLOX-Nano's folder: `yolox_nano.onnx` and `coco_classes.txt`
YOLOX_NANO = MODELS / "yolox_nano"

T = TypeVar("T")


class Missing(SystemExit):
    """What a tool needs is not here: ends it with one line (exit status 1) naming what and where."""


def tool() -> str:
    """The running tool's name (`bench_clips`), for its messages."""
    return Path(sys.argv[0]).stem or "tool"


def need(*paths: Path | str) -> Any:
    """`paths` (one path alone when one is given) if every one exists; else `Missing`, naming them.

    >>> need(REPO) == REPO
    True
    """
    missing = [str(p) for p in paths if not Path(p).exists()]
    if missing:
        shared = any(Path(p).resolve().is_relative_to(DATA.resolve()) for p in missing)
        where = (f"; the shared clips and models live in {DATA} (../shared/data beside the repository), "
                 "which is not part of it") if shared else ""
        raise Missing(f"{tool()}: not found: {', '.join(missing)}{where}")
    return Path(paths[0]) if len(paths) == 1 else tuple(Path(p) for p in paths)


#: the shared clip each shipped YOLOX pipeline is benchmarked on
SHIPPED_CLIPS = {"highway_yolox.yaml": "highway_720p30.mp4", "indoor_yolox.yaml": "person_indoor_768x432.mp4"}
_written: dict[tuple[str, str], Path] = {}


def shipped(name: str, data: Path = DATA) -> dict:
    """The tree of the shipped pipeline `name` (a key of `SHIPPED_CLIPS`) as the benchmarks run it:
    its first source on the shared clip, its model the shared YOLOX-Nano (never the user's cache),
    its sinks' paths absolute (pipelines/out/ as before). `Missing` when the shared data is not here."""
    import yaml

    clip, model = need(data / "video" / SHIPPED_CLIPS[name], data / "models" / "yolox_nano" / "yolox_nano.onnx")
    tree = yaml.safe_load((PIPELINES / name).read_text())
    tree["sources"][0]["uri"] = str(clip)
    tree["detector"]["model"] = str(model)
    for sink in tree.get("sinks") or []:
        if "path" in sink:
            sink["path"] = str(PIPELINES / sink["path"])
    return tree


def shipped_file(pipeline: Path | str, data: Path = DATA) -> Path:
    """`shipped()` of the shipped YOLOX pipeline at `pipeline`, written as a file (in a folder of its
    own, removed when the tool ends) for `streamlens bench` and `load_pipeline`; any other pipeline
    file is given back as it is."""
    path = Path(pipeline)
    if path.resolve().parent != PIPELINES.resolve() or path.name not in SHIPPED_CLIPS:
        return path
    key = (path.name, str(data))
    if key not in _written:
        import atexit
        import shutil
        import tempfile

        import yaml

        folder = Path(tempfile.mkdtemp(prefix="streamlens-shipped-"))
        atexit.register(shutil.rmtree, folder, True)
        _written[key] = folder / path.name
        _written[key].write_text(yaml.safe_dump(shipped(path.name, data), sort_keys=False))
    return _written[key]


def relative(path: Path | str) -> str:
    """`path` relative to the repository when it is inside it (as pages name files), else as given."""
    resolved = Path(path).resolve()
    return str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else str(path)


# -- the machine ---------------------------------------------------------------------------------

def flags_text(flags: dict[str, bool] | None) -> str:
    """`avx2, avx512f; no amx_tile, amx_bf16`: the flags of `CPU_FLAGS` it has, then those it lacks."""
    if not flags:
        return "CPU flags unknown"
    have = [name for name, on in flags.items() if on]
    lack = [name for name, on in flags.items() if not on]
    return "; ".join(part for part in (", ".join(have), f"no {', '.join(lack)}" if lack else "") if part)


def machine_line(found: dict | None = None) -> str:
    """The machine in words: CPU model (its flags that matter), cores (usable), memory. `found` is
    `machine()`'s dict (by default this machine's; an old result's may lack the flags)."""
    m = found if found is not None else machine()
    cores = f"{m.get('cores')} cores"
    if m.get("usable_cores") is not None:
        cores += f" ({m['usable_cores']} usable)"
    memory = f", {m['memory_gib']} GiB" if m.get("memory_gib") else ""
    flags = flags_text(m.get("flags")) if "flags" in m else "CPU flags not recorded"
    return f"{m.get('cpu')} ({flags}), {cores}{memory}"


def versions_line(found: dict | None = None, only: Iterable[str] | None = None) -> str:
    """`python 3.11.7, streamlens 0.1.0, av 17.0.0, ...`: `versions()` (or `found`), `only` those named."""
    v = found if found is not None else versions()
    names = list(only) if only is not None else list(v)
    return ", ".join(f"{name} {v[name]}" for name in names if name in v)


def load_average() -> float:
    """The 1-minute load average now (what a shared machine was doing around a trial)."""
    return os.getloadavg()[0]


# -- trials in turns ------------------------------------------------------------------------------

def in_turns(arms: Sequence[T], rounds: int, trial: Callable[[T, int], Any],
             on_result: Callable[[T, int, Any], None] | None = None) -> dict[T, list]:
    """Every arm's `trial(arm, round)` once a round for `rounds` rounds, the order reversed every
    other round; each arm's results in round order. `on_result(arm, round, result)` after each."""
    results: dict[T, list] = {arm: [] for arm in arms}
    for r in range(rounds):
        for arm in (arms if r % 2 == 0 else list(reversed(arms))):
            found = trial(arm, r)
            results[arm].append(found)
            if on_result is not None:
                on_result(arm, r, found)
    return results


def median_of(values: Iterable) -> float | None:
    """The median of the values that are not None; None when there are none."""
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def medians(results: dict[Any, list[dict]], keys: Iterable[str]) -> dict[Any, dict[str, float | None]]:
    """Per arm, the median of each key over its trials (None values left out)."""
    keys = list(keys)
    return {arm: {key: median_of(t.get(key) for t in trials) for key in keys} for arm, trials in results.items()}


def paired_ratios(results: dict[Any, list[dict]], base: Any, other: Any, key: str) -> list[float]:
    """`other`'s `key` over `base`'s, round by round (the pairs that have both)."""
    return [o[key] / b[key] for b, o in zip(results[base], results[other])
            if b.get(key) not in (None, 0) and o.get(key) is not None]


def bench_trial(pipeline: Path, k: int, seconds: float, out: Path, extra: Sequence[str] = ()) -> dict:
    """One `streamlens bench PIPELINE --streams K` trial (no baselines, no decode-only limit): its kept
    share (worst stream), p95, the median and worst F1 over its streams, and its JSON under `bench`."""
    subprocess.run([sys.executable, "-m", "streamlens", "bench", str(shipped_file(pipeline)), "--streams", str(k),
                    "--seconds", str(seconds), "--no-baseline", "--no-hold", "--decode-seconds", "0", *extra,
                    "--out", str(out)],
                   check=True, capture_output=True, text=True)
    bench = json.loads(Path(out).read_text())
    found = bench["trials"][0]
    f1 = [s["accuracy"]["f1"] for s in found["streams"].values() if s.get("accuracy")]
    return {"kept": found["kept"], "kept_min": found["kept_min"], "p95": found["latency_ms"]["p95"],
            "f1": statistics.median(f1) if f1 else None, "f1_min": min(f1) if f1 else None, "bench": bench}


def bench_cells(found: dict) -> str:
    """A `bench_trial`'s kept (worst), p95 and F1 (worst) as three table cells."""
    return (f"{found['kept']:.1%} ({found['kept_min']:.1%}) | {found['p95']:.1f} | "
            f"{found['f1']:.3f} ({found['f1_min']:.3f})")


def bench_medians(results: dict[str, list[dict]]) -> str:
    """The arms' median `bench_trial` figures, as a sentence: `without: 100.0% kept (worst ...), ...`."""
    found = medians(results, ("kept", "kept_min", "p95", "f1"))
    return "; ".join(f"{arm}: {m['kept']:.1%} kept (worst {m['kept_min']:.1%}), p95 {m['p95']:.1f} ms, F1 "
                     f"{m['f1']:.3f}" for arm, m in found.items()) + "."


# -- the page -------------------------------------------------------------------------------------

def command_line(argv: Sequence[str] | None = None) -> str:
    """The command that ran this tool, as a reader would type it from the repository's root (with
    `nice -n N` first when it ran niced)."""
    argv = list(sys.argv if argv is None else argv)
    niced = os.nice(0)
    words = ["python", relative(argv[0]) if argv else "?", *argv[1:]]
    return (f"nice -n {niced} " if niced > 0 else "") + shlex.join(words)


def now() -> str:
    """The date and time in UTC, as pages write it: `2025-12-05 14:03 UTC`."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def header(title: str | None, *, command: str | None = None, date: str | None = None, found: dict | None = None,
           more: Iterable[str] = ()) -> str:
    """The lines a results page starts with: `# title` (none when None), the command, the date, the
    machine (`machine_line`, with `found` when the figures were measured earlier) and Python; `more`
    adds lines of its own (the versions, the load) below them."""
    lines = [f"# {title}", ""] if title else []
    lines += [f"Command: `{command or command_line()}`  ", f"Date: {date or now()}  ",
              f"Machine: {machine_line(found)}; Python {platform.python_version()}  ", *(f"{m}  " for m in more)]
    return "\n".join(lines).rstrip() + "\n"


def kept_section(path: Path, heading: str) -> str:
    """The text of `path` from the line `heading` (`## Notes`) to its end, or "": a hand-written
    section that a tool rewriting the page keeps."""
    old = Path(path).read_text() if Path(path).exists() else ""
    at = old.find(f"\n{heading}\n")
    return old[at:] if at >= 0 else ""


def write_page(path: Path, text: str, keep: str | None = None) -> Path:
    """Write the page `text` (a `header()` first) to `path`; with `keep` (a heading such as
    `## Notes`), that section already on the page, and all after it, is kept at its end."""
    path = Path(path)
    kept = kept_section(path, keep) if keep else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.rstrip("\n") + "\n" + kept)
    return path


def prepend_section(path: Path, section: str, title: str | None = None) -> Path:
    """Put `section` first on the page at `path`, under its title (`# title`; by default the page's
    own first line), the sections already there after it: a page that keeps every run, newest first."""
    path = Path(path)
    old = path.read_text() if path.exists() else ""
    first, _, rest = old.partition("\n")
    if first.startswith("# "):
        head = f"# {title}" if title else first
    else:
        head, rest = (f"# {title}" if title else ""), old
    path.parent.mkdir(parents=True, exist_ok=True)
    earlier = rest.strip("\n")
    text = (head + "\n\n" if head else "") + section.strip("\n") + "\n"
    path.write_text(text + ("\n" + earlier + "\n" if earlier else ""))
    return path


__all__ = ["CPU_FLAGS", "DATA", "MODELS", "Missing", "PIPELINES", "REPO", "RESULTS", "VIDEOS", "YOLOX_NANO",
           "bench_cells", "bench_medians", "bench_trial", "command_line", "flags_text", "header", "in_turns",
           "kept_section", "load_average", "machine", "machine_line", "median_of", "medians", "need", "now",
           "paired_ratios", "prepend_section", "relative", "tool", "versions", "versions_line", "write_page"]
