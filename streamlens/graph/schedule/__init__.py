"""What the detector sees and when: keyframe schedules and the scene cuts that force one
(keyframes.py), the shared schedule that picks the live streams' keyframes by what each is worth
(chooser.py), the regions of a keyframe the detector needs (regions.py), batches gathered within
the budget (batcher.py) and the detector's own thread (detect_worker.py)."""
