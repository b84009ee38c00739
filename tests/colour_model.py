"""The tiny colour classifier: it lives in streamlens/testing/colour_model.py, which
tools/make_classifier.py imports too; this name stays for the tests that import it."""

from streamlens.testing.colour_model import (BRIGHTNESS, COLOURS, SHARPNESS, SIZE,  # noqa: F401
                                             build_colour_model, run_colour_model, solid)
