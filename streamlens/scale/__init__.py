"""Scaling out: the streams of one pipeline over several engine processes (`runtime.workers`).

`supervisor.py` splits the streams, starts and restarts the engines, and joins their outputs into
one set of endpoints and files; `engine.py` is what each engine process runs.
"""
