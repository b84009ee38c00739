"""Engines as Ray actors: `runtime.cluster` (or `streamlens run --cluster ADDRESS`).

Ray (an optional extra, `pip install 'streamlens[cluster]'`; never needed on one machine) places
each engine on a node that has the resources it asks for (`cluster.cpus`, `cluster.gpus`: a
fraction shares a GPU), and restarts an actor whose process or node died (the supervisor then
starts its live streams on it again, wherever Ray put it). Only control and figures travel
through Ray (a snapshot about twice a second); results go over ZeroMQ from the actor's node to the
supervisor, whose forwarders join each actor's sinks where its snapshots say they listen; frames
never leave the node that decodes them.

Every node needs streamlens installed, and the files a pipeline names (videos, models) at the same
paths. A cluster:

    ray start --head --port 6379                  # on the first machine
    ray start --address HEAD:6379                 # on each of the others
    streamlens run pipeline.yaml --cluster HEAD:6379

After an actor's death its streams go on with `seq` past the last one it reported, plus what they
could have published since (`SEQ_MARGIN_S`): a subscriber sees a gap, never a repeat.
"""

from __future__ import annotations

import math
import signal
import time
from typing import Any

from ..config import SinkConfig
from .engine import SNAPSHOT_EVERY_S, EngineRun, EngineSpec

#: an actor's restart: how much longer than the time since its last figures a stream may have
#: published for (a snapshot on its way, and the time Ray takes to see the death)
SEQ_MARGIN_S = 2.0


class EngineActor:
    """What runs inside the actor (made a Ray actor class by `RayActors`)."""

    def __init__(self):
        self._engine: EngineRun | None = None

    def run(self, spec: EngineSpec) -> tuple[str, Any]:
        import ray

        host = ray.util.get_node_ip_address()
        spec.config = spec.config.model_copy(update={"sinks": [_on_node(s, host) for s in spec.config.sinks]})
        self._engine = EngineRun(spec, host=host)
        return self._engine.run()

    def snapshot(self):
        return self._engine.snapshot() if self._engine is not None else None

    def stop(self) -> None:
        if self._engine is not None:
            self._engine.stop()

    def abort(self) -> None:
        if self._engine is not None:
            self._engine.abort()

    def pid(self) -> int:
        import os

        return os.getpid()


def _on_node(sink: SinkConfig, host: str) -> SinkConfig:
    """A sink of an actor's config bound on its node's address (`{node}` in a zmq endpoint)."""
    if sink.type != "zmq":
        return sink
    return sink.model_copy(update={"endpoint": sink.endpoint.replace("{node}", host)})


class RayActors:
    """The supervisor's launcher for engines as Ray actors (see processes.py `Processes`)."""

    remote = True

    def __init__(self, cluster):
        try:
            import ray
        except ImportError:
            from ..errors import StreamlensError

            raise StreamlensError("runtime.cluster: needs Ray (pip install 'streamlens[cluster]')") from None
        self.ray = ray
        if not ray.is_initialized():
            handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                ray.init(address=cluster.address, logging_level="WARNING")
            except (ConnectionError, RuntimeError, ValueError) as e:
                from ..errors import StreamlensError

                raise StreamlensError(f"runtime.cluster.address: cannot join the Ray cluster at "
                                      f"{cluster.address or 'this machine'}: {e}") from None
            for s, handler in handlers.items():  # Ray's own would end the driver at the first Ctrl-C
                signal.signal(s, handler)
        self.actor_class = ray.remote(EngineActor).options(
            num_cpus=cluster.cpus, num_gpus=cluster.gpus, max_restarts=-1, max_task_retries=0, max_concurrency=4)
        self._actors: list = []

    def sink_endpoint(self, engine: int, sink: int) -> str:
        return "tcp://{node}:*"

    def start(self, engine, spec: EngineSpec) -> None:
        if engine.handle:  # started again: Ray restarted the actor (or is restarting it)
            actor = engine.handle["actor"]
        else:
            actor = self.actor_class.remote()
            self._actors.append(actor)
        engine.handle = {"actor": actor, "run": actor.run.remote(spec), "snapshot": None, "asked": 0.0,
                         "fps": {}}

    def tell(self, engine, order: str) -> None:
        getattr(engine.handle["actor"], order).remote()

    def poll(self, engines: list, timeout: float) -> list[tuple[Any, str, Any]]:
        ray, now = self.ray, time.monotonic()
        for e in engines:
            h = e.handle
            if h["snapshot"] is None and now - h["asked"] >= SNAPSHOT_EVERY_S:
                h["snapshot"], h["asked"] = h["actor"].snapshot.remote(), now
        waiting = {}
        for e in engines:
            waiting[e.handle["run"]] = (e, "run")
            if e.handle["snapshot"] is not None:
                waiting[e.handle["snapshot"]] = (e, "snapshot")
        if not waiting:
            time.sleep(timeout)
            return []
        ready, _ = ray.wait(list(waiting), num_returns=len(waiting), timeout=timeout)
        events = []
        for ref in ready:
            engine, what = waiting[ref]
            try:
                value = ray.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as e:
                if what == "run":
                    events.append((engine, "gone", f"its actor died: {type(e).__name__}"))
                else:
                    engine.handle["snapshot"] = None
                continue
            if what == "snapshot":
                engine.handle["snapshot"] = None
                if value is not None:
                    engine.handle["fps"] = {n: st.fps for n, st in value.stats.items()}
                    events.append((engine, "snapshot", value))
            else:
                events.append((engine, *value))
                events.append((engine, "gone", None))
        return events

    def next_seq(self, engine) -> dict[str, int]:
        """Past the last seq the actor reported, by what its streams could have published since."""
        snapshot = engine.snapshot
        if snapshot is None:
            return dict(engine.first_seq)
        since = time.monotonic() - engine.snapshot_at + SEQ_MARGIN_S
        return {name: snapshot.seqs.get(name, engine.first_seq.get(name, 0) - 1) + 1 +
                math.ceil(since * (engine.handle["fps"].get(name) or 30.0)) for name in engine.streams}

    def kill(self, engine) -> None:
        self.ray.kill(engine.handle["actor"], no_restart=True)

    def close(self) -> None:
        """End the actors (their runs have ended)."""
        for actor in self._actors:
            self.ray.kill(actor, no_restart=True)
