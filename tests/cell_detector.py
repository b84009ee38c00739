"""The cell detector built offline: it lives in streamlens/testing/cell_detector.py, which the
benchmarks in tools/ import too; this name stays for the tests that import it."""

from streamlens.testing.cell_detector import ANCHORS, GRID, SIDE, build_cell_detector  # noqa: F401
