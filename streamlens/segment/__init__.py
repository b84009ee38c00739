"""Masks for tracked objects (the `segment:` section): SAM's two halves loaded from local files, the
encoder once per chosen keyframe and the decoder once per object (model.py); the mask stage that
runs them on a worker without holding a frame back (stage.py); masks an Ultralytics `-seg`
detector gives (carry.py); a mask as it travels with its track between keyframes (masks.py).
docs/masks.md tells the section and its figures."""
