"""Slow HTTP clients: they live in streamlens/testing/http_flood.py, which tools/bench_http_flood.py
imports too; this name stays for the tests that import it."""

from streamlens.testing.http_flood import HALF_REQUEST, Flood  # noqa: F401
