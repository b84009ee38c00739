"""Import Ultralytics so that it never touches the network: no probe, no pip auto-install, no telemetry, no fonts.

Ultralytics 8.4 reads its switches once, at import: `YOLO_OFFLINE=1` makes `is_online()` answer
False without a DNS probe (so `ONLINE` is False, and with it events, Sentry and every "AutoUpdate"),
and `YOLO_AUTOINSTALL=false` stops `check_requirements` from running pip. Both are set before the
first import. Should the host program have imported Ultralytics already, the module-level copies
of those switches are turned off too. The `sync` setting (telemetry) is turned off in memory only:
the user's settings file is not rewritten. `check_font` (which downloads Arial.ttf for Ultralytics'
own plotting; streamlens draws with supervision and never calls it) is replaced by a lookup that
only finds fonts already on disk.

Example:
    >>> ultralytics = import_ultralytics_offline()   # doctest: +SKIP
    >>> ultralytics.utils.ONLINE                     # doctest: +SKIP
    False
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType

OFFLINE_ENV = {"YOLO_OFFLINE": "1", "YOLO_AUTOINSTALL": "false", "YOLO_VERBOSE": "false"}


def _local_font_only(font: str = "Arial.ttf") -> Path | None:
    """Ultralytics' `check_font` without the download: the font if it is on disk, else None."""
    from ultralytics.utils import USER_CONFIG_DIR

    file = USER_CONFIG_DIR / Path(font).name
    return file if file.exists() else None


def import_ultralytics_offline() -> ModuleType:
    """`ultralytics`, imported (or fixed up, if already imported) to stay offline."""
    for key, value in OFFLINE_ENV.items():
        if key != "YOLO_VERBOSE" or key not in os.environ:
            os.environ[key] = value
    import ultralytics
    from ultralytics import utils
    from ultralytics.utils import checks

    for module in (utils, checks):
        module.ONLINE = False
        module.AUTOINSTALL = False
    dict.__setitem__(utils.SETTINGS, "sync", False)  # in memory; JSONDict.__setitem__ would save the file
    checks.check_font = _local_font_only
    for name in ("ultralytics.utils.plotting", "ultralytics.data.utils"):
        if name in sys.modules and hasattr(sys.modules[name], "check_font"):
            sys.modules[name].check_font = _local_font_only
    events = sys.modules.get("ultralytics.utils.events")
    if events is not None and hasattr(events, "events"):
        events.events.enabled = False
    return ultralytics
