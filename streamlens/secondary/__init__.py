"""Secondary models: classifiers and embedders run on the crops of tracked objects, a few times per
track, batched on a thread of their own and cached by the crops' pixel hashes (see stage.py)."""
