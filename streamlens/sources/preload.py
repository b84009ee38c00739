"""Imported once by the decode workers' forkserver (worker.py `_process_context`), before it forks
any worker: what every worker would otherwise load on its own when its first frames come. Loading
the compiled motion-vector step took each worker 0.5-1.4 s at its stream's first P-frame (1 to 6
workers starting together on 2 cores), and a live stream's frames came out too old behind it."""

from .motion_vectors import warm_up

warm_up()
