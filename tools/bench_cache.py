"""Benchmark the secondary stage's output cache (streamlens/secondary/cache.py): what a hit costs.

Against a local redis-server (Debian's, started here on 127.0.0.1 with no persistence, as the tests
start it; `--url` for another server) and the in-process LRU, it times, over `--calls` calls each:

- `get_many` of 1 and of 8 keys that all hit, on `RedisCache` with no memory front (every call is one
  MGET round trip), on `RedisCache` with its front (hits never reach Redis), and on `MemoryCache`;
- a whole hit as the secondary stage pays it: `crop_key` of each crop (`--crop` pixels, uint8),
  `get_many`, and `unpack` of every value;
- `get_many` of keys that miss, and `put_many` (one pipelined round trip, with a TTL);
- `crop_key`, `pack` and `unpack` alone.

The value cached per crop is a secondary model's outputs: `--floats` float32 (1000: YOLOv8n-cls'
scores; 4 KB). p50 and p95 are in milliseconds per call (one call is a batch of 1 or 8 keys).

Run:
    nice -n 19 python tools/bench_cache.py                  # a markdown table
    python tools/bench_cache.py --calls 5000 --url redis://127.0.0.1:6379/0
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from streamlens.bench.harness import header
from streamlens.secondary.cache import MemoryCache, RedisCache, crop_key, pack, unpack


def timed(fn, calls: int, warmup: int = 50) -> tuple[float, float]:
    """p50 and p95 milliseconds of `fn()` over `calls` calls."""
    for _ in range(warmup):
        fn()
    times = np.empty(calls)
    for i in range(calls):
        t = time.perf_counter_ns()
        fn()
        times[i] = time.perf_counter_ns() - t
    return float(np.percentile(times, 50)) / 1e6, float(np.percentile(times, 95)) / 1e6


def versions() -> str:
    import redis

    server = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.split()
    server_version = next((w.split("=", 1)[1] for w in server if w.startswith("v=")), "?")
    return (f"Python {platform.python_version()}, numpy {np.__version__}, redis-py {redis.__version__}, "
            f"redis-server {server_version}")


def run(url: str, calls: int, floats: int, crop: tuple[int, int]) -> list[tuple[str, int, float, float]]:
    rng = np.random.default_rng(0)
    crops = [rng.integers(0, 256, (*crop, 3), np.uint8) for _ in range(8)]
    value = pack([rng.random(floats, dtype=np.float32)])
    model = "yolov8n-cls@224"
    keys = [crop_key(model, c) for c in crops]
    rows: list[tuple[str, int, float, float]] = []

    bare = RedisCache(url, ttl_s=3600, timeout_s=1.0)
    front = RedisCache(url, ttl_s=3600, timeout_s=1.0, front=MemoryCache(1000))
    memory = MemoryCache(1000)
    bare.put_many([(k, value) for k in keys])
    memory.put_many([(k, value) for k in keys])
    assert all(v == value for v in bare.get_many(keys)) and all(v == value for v in front.get_many(keys))
    for n in (1, 8):
        ks, cs = keys[:n], crops[:n]
        rows.append(("Redis, no front: get_many (hits)", n, *timed(lambda: bare.get_many(ks), calls)))
        rows.append(("Redis, no front: crop_key + get_many + unpack (a whole hit)", n,
                     *timed(lambda: [unpack(v) for v in bare.get_many([crop_key(model, c) for c in cs])], calls)))
        rows.append(("Redis, memory front: get_many (hits, from the front)", n, *timed(lambda: front.get_many(ks), calls)))
        rows.append(("Redis, memory front: crop_key + get_many + unpack", n,
                     *timed(lambda: [unpack(v) for v in front.get_many([crop_key(model, c) for c in cs])], calls)))
        rows.append(("MemoryCache: get_many (hits)", n, *timed(lambda: memory.get_many(ks), calls)))
        missing = [bytes(32 - len(str(i))) + str(i).encode() for i in range(n)]
        rows.append(("Redis, no front: get_many (misses)", n, *timed(lambda: bare.get_many(missing), calls)))
        rows.append(("Redis: put_many (SET with EX, pipelined)", n,
                     *timed(lambda: bare.put_many([(k, value) for k in ks]), calls)))
    rows.append((f"crop_key of a {crop[0]}x{crop[1]}x3 uint8 crop", 1, *timed(lambda: crop_key(model, crops[0]), calls)))
    big = rng.integers(0, 256, (224, 224, 3), np.uint8)
    rows.append(("crop_key of a 224x224x3 uint8 crop", 1, *timed(lambda: crop_key(model, big), calls)))
    outputs = [rng.random(floats, dtype=np.float32)]
    rows.append((f"pack of {floats} float32", 1, *timed(lambda: pack(outputs), calls)))
    rows.append((f"unpack of {floats} float32", 1, *timed(lambda: unpack(value), calls)))
    assert bare.stats()["errors"] == 0 and front.stats()["errors"] == 0, (bare.stats(), front.stats())
    bare.close()
    front.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a Redis server to use (default: start one here)")
    parser.add_argument("--calls", type=int, default=3000, help="calls timed per row (default 3000)")
    parser.add_argument("--floats", type=int, default=1000, help="float32 per cached value (default 1000)")
    parser.add_argument("--crop", type=int, nargs=2, default=(128, 96), metavar=("H", "W"),
                        help="crop size for crop_key (default 128 96)")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    if args.url:
        rows = run(args.url, args.calls, args.floats, tuple(args.crop))
    else:
        from streamlens.testing.redis_server import RedisServer, redis_missing

        missing = redis_missing()
        if missing:
            print(f"bench_cache: {missing}", file=sys.stderr)
            return 1
        with tempfile.TemporaryDirectory() as folder, RedisServer(Path(folder)) as server:
            rows = run(server.url, args.calls, args.floats, tuple(args.crop))
    load_after = os.getloadavg()
    print(header(None, more=[f"Load average {load[0]:.2f} before, {load_after[0]:.2f} after",
                             f"Versions: {versions()}"]))
    print(f"Value per key: {args.floats} float32 packed ({len(pack([np.zeros(args.floats, np.float32)]))} bytes); "
          f"{args.calls} timed calls per row\n")
    print("| operation | keys per call | p50 ms | p95 ms |")
    print("|---|---:|---:|---:|")
    for name, n, p50, p95 in rows:
        print(f"| {name} | {n} | {p50:.3f} | {p95:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
