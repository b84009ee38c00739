"""The secondary models' output cache (streamlens/secondary/cache.py): keys by pixel hash, the packed
outputs, the memory LRU, and the Redis backend against a real redis-server (tests/redis_server.py)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from streamlens.secondary.cache import (KEY_PREFIX, CacheFormatError, MemoryCache, RedisCache, build_cache, crop_key,
                                        pack, unpack)
from tests.redis_server import RedisServer, redis_missing
from tests.rtsp_server import free_port

REPO = Path(__file__).resolve().parents[1]
LOGGER = "streamlens.secondary.cache"
#: the socket timeout where Redis is meant to answer: generous, as these 2 cores are shared
SURE = 2.0


@pytest.fixture
def redis_server(tmp_path):
    """A real redis-server on 127.0.0.1 for this test, or a skip saying why there is none."""
    missing = redis_missing()
    if missing:
        pytest.skip(missing)
    with RedisServer(tmp_path / "redis") as server:
        yield server


def raw_client(server: RedisServer):
    import redis

    return redis.Redis.from_url(server.url, socket_timeout=5)


def outputs(seed: int) -> list[np.ndarray]:
    """One crop's outputs as a secondary model gives them: class scores and an embedding."""
    rng = np.random.default_rng(seed)
    return [rng.random(10, dtype=np.float32), rng.random(128, dtype=np.float32)]


def wait_for(condition, timeout: float = 10.0, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


# --------------------------------------------------------------------------- keys


def test_the_same_pixels_on_other_frames_hit_and_one_changed_pixel_misses():
    """A parked car: the same pixels cut from two different frames (at other places, one crop a
    strided view) give one key and a hit; the same crop with one pixel one level brighter misses."""
    rng = np.random.default_rng(1)
    car = rng.integers(0, 256, (48, 64, 3), np.uint8)
    frame1 = rng.integers(0, 256, (720, 1280, 3), np.uint8)
    frame2 = rng.integers(0, 256, (720, 1280, 3), np.uint8)
    frame1[100:148, 200:264] = car
    frame2[500:548, 900:964] = car
    crop1, crop2 = frame1[100:148, 200:264], frame2[500:548, 900:964]
    assert not crop1.flags.c_contiguous
    cache = MemoryCache(16)
    cache.put_many([(crop_key("colour@224", crop1), pack(outputs(0)))])
    [hit] = cache.get_many([crop_key("colour@224", crop2)])
    assert hit is not None and all(np.array_equal(a, b) for a, b in zip(unpack(hit), outputs(0)))
    changed = crop2.copy()
    changed[47, 63, 2] ^= 1
    assert cache.get_many([crop_key("colour@224", changed)]) == [None]
    assert (cache.hits, cache.misses) == (1, 1)


def test_other_models_shapes_and_dtypes_give_other_keys():
    pixels = np.zeros((8, 6, 3), np.uint8)
    key = crop_key("colour@224", pixels)
    assert isinstance(key, bytes) and len(key) == 32
    others = [crop_key("colour@256", pixels), crop_key("make@224", pixels),
              crop_key("colour@224", pixels.reshape(6, 8, 3)),  # same bytes, another shape
              crop_key("colour@224", pixels.view(np.int8)),  # same bytes, another dtype
              crop_key("colour@22", np.zeros((8, 6, 3), np.uint8))]
    assert key not in others and len(set(others)) == len(others)
    assert crop_key("a", np.zeros((0, 3), np.uint8)) != crop_key("a", np.zeros((3, 0), np.uint8))
    cache = MemoryCache(4)
    cache.put_many([(key, b"colour")])
    assert cache.get_many([key, crop_key("make@224", pixels)]) == [b"colour", None]


# --------------------------------------------------------------------------- the memory LRU


def test_the_lru_evicts_the_least_recently_used_and_counts_evictions():
    cache = MemoryCache(3)
    cache.put_many([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])
    assert cache.get_many([b"a"]) == [b"1"]  # a is now the most recently used: b is the oldest
    cache.put_many([(b"d", b"4")])
    assert cache.get_many([b"b", b"c", b"a", b"d"]) == [None, b"3", b"1", b"4"]
    cache.put_many([(b"e", b"5"), (b"f", b"6")])  # c, then a, go
    assert cache.get_many([b"c", b"a", b"d", b"e", b"f"]) == [None, None, b"4", b"5", b"6"]
    cache.put_many([(b"d", b"4'")])  # a put of a key already there replaces it and evicts nothing
    stats = cache.stats()
    assert {k: stats[k] for k in ("hits", "misses", "evictions", "items", "max_items")} == {
        "hits": 7, "misses": 3, "evictions": 3, "items": 3, "max_items": 3}
    assert stats["hit_rate"] == pytest.approx(0.7) and len(cache) == 3
    with pytest.raises(ValueError, match="max_items must be at least 1"):
        MemoryCache(0)


def test_the_memory_cache_stays_bounded_and_consistent_under_threads():
    cache = MemoryCache(50)

    def work(n: int) -> None:
        for i in range(2000):
            key = f"{(i * 7 + n) % 120}".encode()
            if cache.get_many([key])[0] is None:
                cache.put_many([(key, key)])

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = cache.stats()
    assert stats["items"] == 50 and stats["hits"] + stats["misses"] == 8000
    assert all(value in (None, key) for key, value in zip([b"%d" % i for i in range(120)],
                                                          cache.get_many([b"%d" % i for i in range(120)])))


# --------------------------------------------------------------------------- pack / unpack


def test_pack_round_trips_every_dtype_and_shape_exactly():
    rng = np.random.default_rng(2)
    arrays = [rng.random(1000, dtype=np.float32), rng.random((2, 3, 4)).astype(np.float16), rng.random((1, 5)),
              np.array([np.nan, np.inf, -0.0, 1e-45], np.float32), np.array(3.5, np.float32),
              np.zeros((0, 7), np.float32), rng.integers(-128, 128, 9, dtype=np.int8),
              rng.integers(-2**15, 2**15, (3, 3), dtype=np.int16), rng.integers(-2**31, 2**31, 4, dtype=np.int32),
              np.array([-2**63, 2**63 - 1], np.int64), np.arange(256, dtype=np.uint8).reshape(16, 16),
              np.array([65535], np.uint16), np.array([2**32 - 1], np.uint32), np.array([2**64 - 1], np.uint64),
              np.array([True, False, True])]
    back = unpack(pack(arrays))
    assert len(back) == len(arrays)
    for a, b in zip(arrays, back):
        assert b.dtype == a.dtype and b.shape == a.shape and a.tobytes() == b.tobytes()
        assert b.flags.writeable and b.flags.c_contiguous
    # views, other byte orders: the values come back, in native order
    view = rng.random((6, 8)).astype(np.float32)[::2, 1::3]
    big = np.arange(5, dtype=">i4")
    got_view, got_big = unpack(pack([view, big]))
    assert np.array_equal(got_view, view) and np.array_equal(got_big, big) and got_big.dtype == np.dtype("int32")
    assert unpack(pack([])) == []
    # compact: a 1000-float32 embedding is its 4000 bytes and a few more
    assert len(pack([np.zeros(1000, np.float32)])) <= 4000 + 16


def test_unpack_refuses_garbage_with_a_clear_error_and_pack_refuses_what_it_cannot_store():
    import pickle

    good = pack([np.arange(10, dtype=np.float32), np.ones((2, 2), np.int64)])
    cases = {b"": "shorter than the 7-byte header", b"junk junk junk": "not made by pack()",
             pickle.dumps([np.zeros(3)]): "not made by pack()", good[:4] + b"\x09" + good[5:]: "format version 9",
             good[:-1]: "needs 32 bytes, 31 are left", good[:9]: "cut short", good + b"\x00": "1 bytes after the last",
             good[:7] + b"\xff" + good[8:]: "dtype code 255"}
    for data, message in cases.items():
        with pytest.raises(CacheFormatError, match="^cached outputs: .*" + message.replace("(", r"\(").replace(")", r"\)")):
            unpack(data)
    assert issubclass(CacheFormatError, ValueError)
    with pytest.raises(ValueError, match="output 1 has dtype object"):
        pack([np.zeros(2, np.float32), np.array(["a", None], object)])
    with pytest.raises(ValueError, match="output 0 has dtype complex64"):
        pack([np.zeros(2, np.complex64)])


# --------------------------------------------------------------------------- Redis


def test_redis_stores_under_the_prefix_with_one_round_trip_and_the_front_answers_first(redis_server):
    front = MemoryCache(100)
    cache = RedisCache(redis_server.url, ttl_s=None, front=front, timeout_s=SURE)
    keys = [crop_key("colour@224", np.full((4, 4, 3), i, np.uint8)) for i in range(8)]
    cache.put_many([(k, pack(outputs(i))) for i, k in enumerate(keys)])
    raw = raw_client(redis_server)
    stored = sorted(raw.keys(KEY_PREFIX + "*"))
    assert stored == sorted((KEY_PREFIX + k.hex()).encode() for k in keys)
    assert raw.ttl(stored[0]) == -1  # no TTL: kept until Redis' own policy evicts it
    # the front has them all: gets never reach Redis
    calls = raw.info("commandstats").get("cmdstat_mget", {}).get("calls", 0)
    assert cache.get_many(keys) == [pack(outputs(i)) for i in range(8)]
    assert raw.info("commandstats").get("cmdstat_mget", {}).get("calls", 0) == calls
    # a second process's view: an empty front, so one MGET for the batch, and its hits fill the front
    other = RedisCache(redis_server.url, ttl_s=None, front=MemoryCache(100), timeout_s=SURE)
    got = other.get_many(keys[:5] + [crop_key("colour@224", np.zeros((5, 5, 3), np.uint8))])
    assert got == [pack(outputs(i)) for i in range(5)] + [None]
    assert raw.info("commandstats")["cmdstat_mget"]["calls"] == calls + 1
    assert other.get_many(keys[:5]) == got[:5]
    assert raw.info("commandstats")["cmdstat_mget"]["calls"] == calls + 1
    stats = other.stats()
    assert {k: stats[k] for k in ("hits", "redis_hits", "misses", "errors", "available")} == {
        "hits": 10, "redis_hits": 5, "misses": 1, "errors": 0, "available": True}
    assert stats["front"]["hits"] == 5 and stats["front"]["items"] == 5
    # no front: every get is one MGET
    bare = RedisCache(redis_server.url, ttl_s=None, timeout_s=SURE)
    assert bare.get_many(keys[6:]) == [pack(outputs(6)), pack(outputs(7))] and bare.stats()["front"] is None
    for c in (cache, other, bare):
        c.close()


def test_redis_is_shared_between_two_processes(redis_server, tmp_path):
    """Another process (a second pipeline on the same camera) computes a crop's outputs and puts them;
    this one finds them by the same pixels' key."""
    script = tmp_path / "put.py"
    script.write_text(
        "import sys\nimport numpy as np\n"
        "from streamlens.secondary.cache import RedisCache, crop_key, pack\n"
        "rng = np.random.default_rng(7)\n"
        "crop = rng.integers(0, 256, (64, 32, 3), np.uint8)\n"
        "embedding = rng.random(512, dtype=np.float32)\n"
        "cache = RedisCache(sys.argv[1], ttl_s=60, timeout_s=2)\n"
        "cache.put_many([(crop_key('reid@128', crop), pack([embedding, np.array([3], np.int64)]))])\n"
        "assert cache.stats()['puts'] == 1, cache.stats()\n"
        "print(crop_key('reid@128', crop).hex())\n")
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    child = subprocess.run([sys.executable, str(script), redis_server.url], capture_output=True, text=True,
                           timeout=60, env=env, cwd=tmp_path)
    assert child.returncode == 0, child.stderr
    rng = np.random.default_rng(7)
    crop = rng.integers(0, 256, (64, 32, 3), np.uint8)
    embedding = rng.random(512, dtype=np.float32)
    key = crop_key("reid@128", crop)
    assert child.stdout.strip() == key.hex()
    cache = RedisCache(redis_server.url, ttl_s=60, front=MemoryCache(10), timeout_s=SURE)
    [data] = cache.get_many([key])
    assert data is not None
    got_embedding, got_class = unpack(data)
    assert np.array_equal(got_embedding, embedding) and got_class.tolist() == [3]
    assert cache.get_many([crop_key("reid@64", crop)]) == [None]
    cache.close()


def test_values_expire_after_the_ttl_by_redis_clock(redis_server):
    cache = RedisCache(redis_server.url, ttl_s=1, timeout_s=SURE)
    half = RedisCache(redis_server.url, ttl_s=0.5, timeout_s=SURE)
    cache.put_many([(b"k" * 32, b"one second")])
    half.put_many([(b"h" * 32, b"half a second")])
    raw = raw_client(redis_server)
    assert 0 < raw.pttl(KEY_PREFIX + (b"k" * 32).hex()) <= 1000
    assert raw.ttl(KEY_PREFIX + (b"k" * 32).hex()) in (0, 1)
    assert 0 < raw.pttl(KEY_PREFIX + (b"h" * 32).hex()) <= 500
    assert cache.get_many([b"h" * 32, b"k" * 32]) == [b"half a second", b"one second"]
    assert wait_for(lambda: cache.get_many([b"k" * 32, b"h" * 32]) == [None, None], timeout=10)
    assert raw.exists(KEY_PREFIX + (b"k" * 32).hex()) == 0
    with pytest.raises(ValueError, match="ttl_s must be above 0"):
        RedisCache(redis_server.url, ttl_s=0)


def test_a_redis_stopped_mid_use_gives_misses_counts_errors_logs_once_and_hits_again_once_back(
        tmp_path, caplog):
    """Redis goes away: gets return (misses for every key, the front still answers), puts are dropped,
    both counted; one warning naming the server without its password. It comes back (an empty
    server on the same port): one more line, with the errors in between, and hits again."""
    missing = redis_missing()
    if missing:
        pytest.skip(missing)
    with RedisServer(tmp_path / "redis", password="pa55word") as server:
        caplog.set_level(logging.INFO, logger=LOGGER)
        cache = RedisCache(server.url, ttl_s=60, front=MemoryCache(10), retry_s=0.2, timeout_s=SURE)
        assert cache.ping()
        cache.put_many([(b"a" * 32, b"A")])
        cache.front.close()  # forget it here: the next get asks Redis
        assert cache.get_many([b"a" * 32]) == [b"A"]
        server.stop()
        assert cache.get_many([b"b" * 32, b"c" * 32]) == [None, None]  # it returns; how fast is not asserted
        assert cache.get_many([b"a" * 32]) == [b"A"]  # the front's copy needs no Redis
        cache.put_many([(b"d" * 32, b"D"), (b"e" * 32, b"E")])
        time.sleep(0.25)  # past retry_s: the next get tries Redis again, and fails again
        assert cache.get_many([b"d" * 32, b"f" * 32]) == [b"D", None]
        stats = cache.stats()
        assert stats["available"] is False and stats["errors"] >= 2 and stats["dropped_puts"] == 2
        assert stats["misses"] == 3
        away = [r for r in caplog.records if r.name == LOGGER]
        assert len(away) == 1 and away[0].levelno == logging.WARNING
        assert "failed (ConnectionError" in away[0].getMessage() and f"127.0.0.1:{server.port}" in away[0].getMessage()
        assert "pa55word" not in caplog.text and "redis://***@127.0.0.1" in caplog.text
        server.start()
        assert wait_for(lambda: (cache.put_many([(b"g" * 32, b"G")]), cache.available)[1], timeout=20)
        cache.front.close()
        assert cache.get_many([b"g" * 32]) == [b"G"]
        lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
        assert len(lines) == 2 and "answers again after" in lines[1]
        assert f"({cache.stats()['errors']} failed round trips)" in lines[1]
        assert "pa55word" not in caplog.text
        cache.close()


def test_a_frozen_redis_is_a_miss_after_the_socket_timeout_not_a_stuck_pipeline(redis_server):
    """A server that accepts and never answers (SIGSTOP): the get returns misses once the read times
    out, and calls within retry_s do not touch it at all."""
    raw_client(redis_server).set(KEY_PREFIX + (b"a" * 32).hex(), b"A")
    cache = RedisCache(redis_server.url, ttl_s=None, timeout_s=0.5, retry_s=60)
    redis_server.pause()
    try:
        assert cache.get_many([b"a" * 32]) == [None]
        assert cache.get_many([b"a" * 32]) == [None]
        cache.put_many([(b"b" * 32, b"B")])
        stats = cache.stats()
        assert stats["errors"] == 1 and stats["misses"] == 2 and stats["dropped_puts"] == 1
    finally:
        redis_server.resume()
    cache.close()


def test_a_url_redis_cannot_read_is_a_value_error_and_an_unreachable_one_is_not(redis_server):
    with pytest.raises(ValueError):
        RedisCache("http://127.0.0.1:6379/0", ttl_s=None)
    unreachable = RedisCache(f"redis://127.0.0.1:{free_port()}/0", ttl_s=None)
    assert unreachable.ping() is False and unreachable.get_many([b"x" * 32]) == [None]
    assert isinstance(build_cache(10, redis_server.url, 30), RedisCache)
    assert build_cache(0, redis_server.url, None).front is None
    assert isinstance(build_cache(10), MemoryCache) and build_cache(0) is None
