"""Models without hunting: the models streamlens knows (`catalogue`), the local cache a pipeline
names them from (`cache`: `model: models:yolox_nano`, and `model_problem`, the one check of a model
file), downloads checked against their sha256 (`pull`), and Ultralytics exports (`export`). The
`streamlens models` command (streamlens/commands/models.py) is their face; a run never downloads.
"""

from .cache import PREFIX, cache_dir, is_reference, model_problem, reference_path
from .catalogue import CATALOGUE, KnownModel, known
from .pull import MIRROR_ENV, Pulled, PullError, pull

__all__ = ["CATALOGUE", "MIRROR_ENV", "PREFIX", "KnownModel", "PullError", "Pulled", "cache_dir", "is_reference",
           "known", "model_problem", "pull", "reference_path"]
