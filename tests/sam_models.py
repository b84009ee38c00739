"""SAM-format models built offline: they live in streamlens/testing/sam_models.py, which the
benchmarks in tools/ import too; this name stays for the tests that import it."""

from streamlens.testing.sam_models import INNER, build_random_mobile_sam, build_tiny_sam, inner_box  # noqa: F401
