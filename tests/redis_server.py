"""The tests' Redis server: it lives in streamlens/testing/redis_server.py, which the benchmarks in
tools/ import too; this name stays for the tests that import it."""

from streamlens.testing.redis_server import REDIS_SERVER, RedisServer, redis_missing, redis_ping  # noqa: F401
