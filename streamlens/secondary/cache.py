"""The secondary models' output cache, keyed on a hash of the decoded crop pixels.

The same pixels are often processed again: a looping clip shows the same frames every lap, two
pipelines reading one camera decode the same frames, a parked car gives the same crop on every
keyframe. A SHA-256 of the crop's decoded pixels finds the output computed for them before, so the
model does not run again (the seeds' image-embedding cache: 60-90% of the compute saved where
images recur).

- `crop_key(model_id, pixels)`: SHA-256 over a format tag, the model id, the array's dtype and
  shape, and its bytes (C order). Equal pixels on any frame give one key; one changed pixel, another
  shape or another model gives another.
- `pack` / `unpack`: one crop's outputs (a few numeric arrays) as compact bytes, versioned; numbers
  only, no pickle, so bytes read back from a shared Redis cannot run code. `unpack` reads values of at
  most `MAX_VALUE_BYTES` and raises `CacheFormatError` for anything else it cannot read whole; the
  stage then checks the arrays against its model's outputs (`CropModel.fits`), so a foreign value in a
  shared Redis is counted and computed again, never raised.
- `MemoryCache`: a bounded LRU in this process, thread-safe.
- `RedisCache`: the same interface on a Redis server that several pipelines or engine processes
  share, with a `MemoryCache` in front (hits there never touch Redis). One round trip per batch: MGET
  for the gets, a pipeline of SETs (with the TTL) for the puts. Keys are
  `streamlens:secondary:` + the key in hex.

When Redis is away, nothing waits for it: sockets time out after `timeout_s` (50 ms), a get that
fails is a miss for every key, a put that fails is dropped, and both are counted. It is logged once
when Redis goes away and once when it is back (with the errors in between); meanwhile it is tried
again at most every `retry_s` (3 s), and calls in between do not touch the network. URLs are
logged with their password hidden.

Example:
    >>> cache = MemoryCache(max_items=2)
    >>> crop = np.zeros((4, 4, 3), np.uint8)
    >>> key = crop_key("colour@224", crop)
    >>> cache.get_many([key])
    [None]
    >>> cache.put_many([(key, pack([np.array([0.9, 0.1], np.float32)]))])
    >>> [(a.dtype.name, a.tolist()) for a in unpack(cache.get_many([crop_key("colour@224", crop.copy())])[0])]
    [('float32', [0.8999999761581421, 0.10000000149011612])]
    >>> crop[0, 0, 0] = 1
    >>> cache.get_many([crop_key("colour@224", crop)])
    [None]
    >>> cache.stats()["hits"], cache.stats()["misses"]
    (1, 2)
"""

from __future__ import annotations

import hashlib
import logging
import math
import struct
import threading
import time
from collections import OrderedDict
from typing import Iterable, Protocol

import numpy as np

from ..urls import mask_url

log = logging.getLogger("streamlens.secondary.cache")

#: what every Redis key starts with (then the key in hex)
KEY_PREFIX = "streamlens:secondary:"
#: what `crop_key` hashes first: a new tag when what is hashed changes
_KEY_TAG = b"streamlens.crop.v1\0"

#: `pack`'s format: magic, version, number of arrays; then per array a dtype code, ndim, the shape
#: (uint32 each) and the data (little-endian, C order)
_MAGIC = b"SLSC"
_VERSION = 1
_HEADER = struct.Struct("<4sBH")
_ARRAY = struct.Struct("<BB")
_DTYPES = ("float32", "float16", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
           "uint64", "bool")
_CODE = {np.dtype(name): code for code, name in enumerate(_DTYPES)}
_MAX_NDIM = 32
#: the largest value `unpack` reads (bytes): one crop's outputs are a few kilobytes (an embedding of
#: 1,024 floats is 4 KB); anything far larger in a shared cache is not ours
MAX_VALUE_BYTES = 1 << 20


class CacheFormatError(ValueError):
    """Bytes that `unpack` cannot read: not made by `pack`, of another version, or cut short."""


def crop_key(model_id: str, pixels: np.ndarray) -> bytes:
    """The 32-byte cache key of `model_id`'s outputs for a crop of these `pixels` (see the module).

    Example:
        >>> a = np.full((2, 2, 3), 7, np.uint8)
        >>> crop_key("m", a) == crop_key("m", a.copy()), crop_key("m", a) == crop_key("n", a)
        (True, False)
        >>> crop_key("m", a).hex()[:16]
        '3a9bee9e600e2435'
    """
    array = np.asarray(pixels, order="C")
    model = model_id.encode()
    header = f"{array.dtype.str}|{','.join(map(str, array.shape))}|".encode()
    digest = hashlib.sha256(_KEY_TAG)
    digest.update(len(model).to_bytes(4, "little") + model)
    digest.update(header)
    digest.update(array.data if array.size else b"")
    return digest.digest()


def pack(outputs: list[np.ndarray]) -> bytes:
    """One crop's outputs as bytes for the cache: arrays of any shape, numeric or bool dtypes.

    Example:
        >>> data = pack([np.array([0.5, 0.25], np.float16), np.arange(3)])
        >>> len(data), [(a.dtype.name, a.tolist()) for a in unpack(data)]
        (47, [('float16', [0.5, 0.25]), ('int64', [0, 1, 2])])
    """
    if len(outputs) > 0xFFFF:
        raise ValueError(f"pack: {len(outputs)} arrays, at most 65535")
    parts = [_HEADER.pack(_MAGIC, _VERSION, len(outputs))]
    for i, output in enumerate(outputs):
        array = np.asarray(output)
        code = _CODE.get(array.dtype.newbyteorder("=")) if array.dtype.kind in "fiub" else None
        if code is None:
            raise ValueError(f"pack: output {i} has dtype {array.dtype}, not one of {', '.join(_DTYPES)}")
        if array.ndim > _MAX_NDIM:
            raise ValueError(f"pack: output {i} has {array.ndim} dimensions, at most {_MAX_NDIM}")
        little = np.asarray(array, dtype=array.dtype.newbyteorder("<"), order="C")
        parts.append(_ARRAY.pack(code, little.ndim))
        parts.append(struct.pack(f"<{little.ndim}I", *little.shape))
        parts.append(little.tobytes())
    return b"".join(parts)


def unpack(data: bytes, max_bytes: int = MAX_VALUE_BYTES) -> list[np.ndarray]:
    """The arrays `pack` made these bytes of (new, writable, native byte order); `CacheFormatError`
    for anything else, values over `max_bytes` included.

    Example:
        >>> unpack(_HEADER.pack(_MAGIC, _VERSION, 1) + _ARRAY.pack(0, 3) + struct.pack("<3I", 0, 2**32 - 1, 2**32 - 1))
        Traceback (most recent call last):
        ...
        streamlens.secondary.cache.CacheFormatError: cached outputs: array 0 has an impossible shape (0, 4294967295, 4294967295)
    """
    view = memoryview(data)
    if len(view) > max_bytes:
        raise CacheFormatError(f"cached outputs: {len(view)} bytes, more than the {max_bytes} a value may have")
    if len(view) < _HEADER.size:
        raise CacheFormatError(f"cached outputs: {len(view)} bytes, shorter than the {_HEADER.size}-byte header")
    magic, version, count = _HEADER.unpack_from(view, 0)
    if magic != _MAGIC:
        raise CacheFormatError(f"cached outputs: not made by pack() (starts {bytes(view[:4])!r}, not {_MAGIC!r})")
    if version != _VERSION:
        raise CacheFormatError(f"cached outputs: format version {version}, this streamlens reads {_VERSION}")
    at, arrays = _HEADER.size, []
    try:
        for i in range(count):
            code, ndim = _ARRAY.unpack_from(view, at)
            if code >= len(_DTYPES) or ndim > _MAX_NDIM:
                raise CacheFormatError(f"cached outputs: array {i} has dtype code {code} and {ndim} dimensions")
            shape = struct.unpack_from(f"<{ndim}I", view, at + _ARRAY.size)
            at += _ARRAY.size + 4 * ndim
            dtype = np.dtype(_DTYPES[code]).newbyteorder("<")
            size = math.prod(shape) * dtype.itemsize
            if at + size > len(view):
                raise CacheFormatError(f"cached outputs: array {i} needs {size} bytes, {len(view) - at} are left")
            try:
                array = np.frombuffer(view[at:at + size], dtype).reshape(shape)
            except ValueError:  # an empty array whose other sides no memory could hold
                raise CacheFormatError(f"cached outputs: array {i} has an impossible shape {shape}") from None
            arrays.append(array.astype(dtype.newbyteorder("="), copy=True))
            at += size
    except struct.error:
        raise CacheFormatError(f"cached outputs: cut short at byte {at} of {len(view)}") from None
    if at != len(view):
        raise CacheFormatError(f"cached outputs: {len(view) - at} bytes after the last of {count} arrays")
    return arrays


class Cache(Protocol):
    """What the secondary stage needs of a cache (`MemoryCache`, `RedisCache`)."""

    def get_many(self, keys: list[bytes]) -> list[bytes | None]: ...

    def put_many(self, pairs: Iterable[tuple[bytes, bytes]]) -> None: ...

    def stats(self) -> dict: ...

    def close(self) -> None: ...


class MemoryCache:
    """A bounded LRU of `max_items` values (bytes) in this process; thread-safe. A get makes its key
    the most recently used; a put past `max_items` evicts the least recently used."""

    def __init__(self, max_items: int):
        if int(max_items) < 1:
            raise ValueError(f"MemoryCache: max_items must be at least 1, got {max_items}")
        self.max_items = int(max_items)
        self._items: OrderedDict[bytes, bytes] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = self.evictions = 0

    def __len__(self) -> int:
        return len(self._items)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """The value of each key, None where there is none."""
        out: list[bytes | None] = []
        with self._lock:
            for key in keys:
                value = self._items.get(key)
                if value is None:
                    self.misses += 1
                else:
                    self._items.move_to_end(key)
                    self.hits += 1
                out.append(value)
        return out

    def put_many(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        """Store each (key, value), evicting the least recently used past `max_items`."""
        with self._lock:
            for key, value in pairs:
                self._items[key] = value
                self._items.move_to_end(key)
            while len(self._items) > self.max_items:
                self._items.popitem(last=False)
                self.evictions += 1

    def stats(self) -> dict:
        """hits, misses, evictions, items, max_items, hit_rate (hits / gets; 0.0 before any)."""
        with self._lock:
            gets = self.hits + self.misses
            return {"hits": self.hits, "misses": self.misses, "evictions": self.evictions,
                    "items": len(self._items), "max_items": self.max_items,
                    "hit_rate": self.hits / gets if gets else 0.0}

    def close(self) -> None:
        with self._lock:
            self._items.clear()


class RedisCache:
    """`MemoryCache`'s interface on the Redis server at `url` (`redis://[:password@]host[:port][/db]`,
    `rediss://`, `unix://`), shared by every process that uses the same server (see the module).

    `ttl_s`: how long Redis keeps a value (None: until its own `maxmemory` policy evicts it);
    `timeout_s`: the socket timeouts (connect, read, write); `front`: a `MemoryCache` asked first
    and filled with Redis' hits; `retry_s`: after a failure, how long calls skip Redis before it is
    tried again. A URL Redis cannot parse is a ValueError here; a server that cannot be reached is
    not an error (see `ping`)."""

    def __init__(self, url: str, ttl_s: float | None = None, timeout_s: float = 0.05,
                 front: MemoryCache | None = None, *, retry_s: float = 3.0, prefix: str = KEY_PREFIX):
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        if ttl_s is not None and ttl_s <= 0:
            raise ValueError(f"RedisCache: ttl_s must be above 0 (or None), got {ttl_s}")
        self.url = mask_url(url)
        self.ttl_s = ttl_s
        self.front = front
        self.retry_s = float(retry_s)
        self._prefix = prefix
        self._errors_type = (redis.RedisError, OSError)
        # no retries inside redis-py: one failed round trip is a miss, and the next try waits retry_s
        self._client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                            retry=Retry(NoBackoff(), 0), retry_on_timeout=False,
                                            health_check_interval=0)
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._retry_at = 0.0
        self._errors_while_down = 0
        self.hits = self.misses = self.errors = self.puts = self.dropped_puts = 0

    # ------------------------------------------------------------------ availability

    def _may_try(self) -> bool:
        with self._lock:
            return self._down_since is None or time.monotonic() >= self._retry_at

    def _failed(self, error: BaseException, doing: str) -> None:
        with self._lock:
            self.errors += 1
            now = time.monotonic()
            self._retry_at = now + self.retry_s
            if self._down_since is not None:
                self._errors_while_down += 1
                return
            self._down_since, self._errors_while_down = now, 1
        log.warning("secondary cache: Redis at %s failed (%s: %s) on %s; its gets are misses and its puts are "
                    "dropped until it answers again (tried every %g s)", self.url, type(error).__name__,
                    mask_url(str(error)) or "no detail", doing, self.retry_s)

    def _answered(self) -> None:
        if self._down_since is None:
            return
        with self._lock:
            if self._down_since is None:
                return
            away_s, errors = time.monotonic() - self._down_since, self._errors_while_down
            self._down_since, self._errors_while_down = None, 0
        log.warning("secondary cache: Redis at %s answers again after %.1f s away (%d failed round trips)",
                    self.url, away_s, errors)

    @property
    def available(self) -> bool:
        """False from a failed round trip until one succeeds again."""
        return self._down_since is None

    def ping(self) -> bool:
        """Whether Redis answers PING now (counted and logged like any other round trip)."""
        try:
            self._client.ping()
        except self._errors_type as e:
            self._failed(e, "PING")
            return False
        self._answered()
        return True

    # ------------------------------------------------------------------ the cache

    def _redis_key(self, key: bytes) -> str:
        return self._prefix + key.hex()

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        """The value of each key (from the front, else Redis), None where there is none or Redis failed."""
        keys = list(keys)
        out: list[bytes | None] = self.front.get_many(keys) if self.front is not None else [None] * len(keys)
        wanted = [i for i, value in enumerate(out) if value is None]
        found: list[tuple[bytes, bytes]] = []
        if wanted and self._may_try():
            try:
                values = self._client.mget([self._redis_key(keys[i]) for i in wanted])
            except self._errors_type as e:
                self._failed(e, f"MGET of {len(wanted)} keys")
            else:
                self._answered()
                for i, value in zip(wanted, values):
                    if value is not None:
                        out[i] = value
                        found.append((keys[i], value))
        if found and self.front is not None:
            self.front.put_many(found)
        with self._lock:
            self.hits += len(keys) - len(wanted) + len(found)
            self.misses += len(wanted) - len(found)
        return out

    def put_many(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        """Store each (key, value) in the front and in Redis (one pipeline); dropped if Redis fails."""
        pairs = list(pairs)
        if not pairs:
            return
        if self.front is not None:
            self.front.put_many(pairs)
        if not self._may_try():
            with self._lock:
                self.dropped_puts += len(pairs)
            return
        ttl = {}
        if self.ttl_s is not None:
            ttl = {"ex": int(self.ttl_s)} if float(self.ttl_s).is_integer() else {"px": max(1, round(self.ttl_s * 1000))}
        try:
            pipe = self._client.pipeline(transaction=False)
            for key, value in pairs:
                pipe.set(self._redis_key(key), value, **ttl)
            pipe.execute()
        except self._errors_type as e:
            with self._lock:
                self.dropped_puts += len(pairs)
            self._failed(e, f"SET of {len(pairs)} keys")
            return
        self._answered()
        with self._lock:
            self.puts += len(pairs)

    def stats(self) -> dict:
        """hits and misses (the front's and Redis' together), redis_hits, errors (failed round trips),
        puts, dropped_puts, available, hit_rate, and the front's own stats (or None)."""
        front = self.front.stats() if self.front is not None else None
        with self._lock:
            gets = self.hits + self.misses
            return {"hits": self.hits, "misses": self.misses,
                    "redis_hits": self.hits - (front["hits"] if front else 0),
                    "evictions": front["evictions"] if front else 0,
                    "errors": self.errors, "puts": self.puts, "dropped_puts": self.dropped_puts,
                    "available": self._down_since is None, "hit_rate": self.hits / gets if gets else 0.0,
                    "front": front}

    def close(self) -> None:
        try:
            self._client.close()
        except self._errors_type:
            pass


def cached_outputs(cache: Cache | None, model_id: str, inputs: list[np.ndarray], fits, compute,
                   max_bytes: int = MAX_VALUE_BYTES) -> tuple[list[list[np.ndarray]], list[int], int]:
    """Each of `inputs`' outputs (a list of arrays per input): from `cache` where it holds a value
    for that input's pixels (`crop_key(model_id, input)`) that `unpack` reads (at most `max_bytes`)
    and `fits(arrays)` accepts, else from `compute(missing inputs)` (one list of arrays per input,
    in order), which are then stored. `cache` None: all computed. Returns the outputs, the indices
    of the inputs computed, and how many cached values were not ones `fits` accepts (foreign:
    another version's, another model's in a shared Redis; computed again, never raised).

    Example:
        >>> cache = MemoryCache(4)
        >>> run = lambda xs: [[np.array([x.sum()])] for x in xs]
        >>> ones = np.ones((2, 2), np.uint8)
        >>> cached_outputs(cache, "sum", [ones], lambda a: True, run)[1:]
        ([0], 0)
        >>> out, computed, foreign = cached_outputs(cache, "sum", [ones.copy(), 2 * ones], lambda a: True, run)
        >>> [o[0].tolist() for o in out], computed
        ([[4], [8]], [1])
    """
    outputs: list = [None] * len(inputs)
    keys = None
    foreign = 0
    if cache is not None and inputs:
        keys = [crop_key(model_id, pixels) for pixels in inputs]
        for i, found in enumerate(cache.get_many(keys)):
            if found is None:
                continue
            try:
                arrays = unpack(found, max_bytes)
            except CacheFormatError:
                arrays = None
            if arrays is not None and fits(arrays):
                outputs[i] = arrays
            else:
                foreign += 1
    todo = [i for i, out in enumerate(outputs) if out is None]
    if todo:
        for i, out in zip(todo, compute([inputs[i] for i in todo]), strict=True):
            outputs[i] = out
        if keys is not None:
            cache.put_many([(keys[i], pack(outputs[i])) for i in todo])
    return outputs, todo, foreign


def build_cache(items: int, redis: str | None = None, ttl_s: float | None = None, *,
                prefix: str = KEY_PREFIX) -> MemoryCache | RedisCache | None:
    """The cache a pipeline's settings ask for: a `MemoryCache` of `items`, a `RedisCache` at `redis` with
    that `MemoryCache` in front (none if `items` is 0), or None when both are off. `prefix`: what the
    Redis keys start with (each kind of output its own: `streamlens:segment:` for SAM's embeddings).

    Example:
        >>> build_cache(0) is None, type(build_cache(100)).__name__
        (True, 'MemoryCache')
    """
    if items < 0:
        raise ValueError(f"cache items must be 0 or more, got {items}")
    front = MemoryCache(items) if items else None
    if redis:
        return RedisCache(redis, ttl_s, front=front, prefix=prefix)
    return front


__all__ = ["crop_key", "pack", "unpack", "CacheFormatError", "Cache", "MemoryCache", "RedisCache", "build_cache",
           "cached_outputs", "KEY_PREFIX", "MAX_VALUE_BYTES"]
