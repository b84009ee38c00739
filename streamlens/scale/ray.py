"""Engines as Ray actors: `runtime.cluster` (or `streamlens run --cluster ADDRESS`).

Ray (an optional extra, `pip install 'streamlens[cluster]'`; never needed on one machine) places
each engine on a node that has the resources it asks for (`cluster.cpus`, `cluster.gpus`: a
fraction shares a GPU), and restarts an actor whose process or node died (the supervisor then
starts its live streams on it again, wherever Ray put it). Only control and figures travel
through Ray (a snapshot about twice a second); results go over ZeroMQ from the actor's node to the
supervisor, whose forwarders join each actor's sinks where its snapshots say they listen; frames
never leave the node that decodes them.

The wire between the actors and the supervisor is for them alone: the supervisor makes CurveZMQ
keys for the run (`RunKeys`, never written by it), every actor's sockets towards it are CurveZMQ
servers that admit only the supervisor's key, and an actor on the supervisor's own node binds them
on loopback (127.0.0.1) rather than on the node's address. Ray's own channel carries the keys to
the actors (secure it with Ray's TLS settings where the network is not trusted).

Every node needs streamlens installed, and the files a pipeline names (videos, models) at the same
paths. A cluster:

    ray start --head --port 6379                  # on the first machine
    ray start --address HEAD:6379                 # on each of the others
    streamlens run pipeline.yaml --cluster HEAD:6379

After an actor's death its streams go on with `seq` past the last one it reported, plus what they
could have published since (`SEQ_MARGIN_S`): a subscriber sees a gap, never a repeat.
"""

from __future__ import annotations

import dataclasses
import math
import queue
import signal
import tempfile
import time
from typing import Any

from ..config import SinkConfig
from ..config.sinks import CurveConfig
from ..wire.keys import RunKeys
from .engine import SNAPSHOT_EVERY_S, EngineRun, EngineSpec

#: an actor's restart: how much longer than the time since its last figures a stream may have
#: published for (a snapshot on its way, and the time Ray takes to see the death)
SEQ_MARGIN_S = 2.0


class EngineActor:
    """What runs inside the actor (made a Ray actor class by `RayActors`)."""

    def __init__(self):
        self._engine: EngineRun | None = None
        self._changes: queue.SimpleQueue = queue.SimpleQueue()  # streams added or removed, for the engine

    def run(self, spec: EngineSpec) -> tuple[str, Any]:
        import ray

        host = ray.util.get_node_ip_address()
        bind = "127.0.0.1" if host == spec.supervisor_node else host
        with tempfile.TemporaryDirectory(prefix="streamlens-keys-") as folder:  # 0700, gone with the run
            curve = spec.keys.write_server(folder) if spec.keys is not None else None
            sinks = [_on_node(s, bind, curve) for s in spec.config.sinks]
            spec.config = spec.config.model_copy(update={"sinks": sinks})
            if spec.preview is not None:
                spec.preview = spec.preview.replace("{node}", bind)
            self._engine = EngineRun(spec, host=host, changes=self._changes, curve=curve)
            return self._engine.run()

    def snapshot(self):
        return self._engine.snapshot() if self._engine is not None else None

    def stop(self) -> None:
        if self._engine is not None:
            self._engine.stop()

    def abort(self) -> None:
        if self._engine is not None:
            self._engine.abort()

    def add(self, source) -> None:
        """A stream added (an actor marks no `seq` in shared memory: its queue is all it needs)."""
        self._changes.put(("add", source))

    def remove(self, name: str) -> None:
        self._changes.put(("remove", name))

    def floor(self, level: int) -> None:
        """The other engines of this actor's machine have climbed `level` rungs (engine.py)."""
        self._changes.put(("floor", level))

    def pid(self) -> int:
        import os

        return os.getpid()


def _on_node(sink: SinkConfig, host: str, curve: dict | None) -> SinkConfig:
    """A sink of an actor's config bound on `host` (`{node}` in a zmq endpoint), with the run's
    CurveZMQ keys (`curve`, from `RunKeys.write_server`) when it has them."""
    if sink.type != "zmq":
        return sink
    update = {"endpoint": sink.endpoint.replace("{node}", host)}
    if curve is not None:
        update["curve"] = CurveConfig(**curve)
    return sink.model_copy(update=update)


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
        #: the run's keys for the wire between the actors and the supervisor's forwarders
        self.keys = RunKeys.make()
        self.node = ray.util.get_node_ip_address()
        self.actor_class = ray.remote(EngineActor).options(
            num_cpus=cluster.cpus, num_gpus=cluster.gpus, max_restarts=-1, max_task_retries=0, max_concurrency=4)
        self._actors: list = []

    def sink_endpoint(self, engine: int, sink: int | str) -> str:
        return "tcp://{node}:*"

    def start(self, engine, spec: EngineSpec) -> None:
        if engine.handle:  # started again: Ray restarted the actor (or is restarting it)
            actor = engine.handle["actor"]
        else:
            actor = self.actor_class.remote()
            self._actors.append(actor)
        spec = dataclasses.replace(spec, keys=self.keys, supervisor_node=self.node)
        engine.handle = {"actor": actor, "run": actor.run.remote(spec), "snapshot": None, "asked": 0.0,
                         "fps": {}}

    def tell(self, engine, order: str | tuple) -> None:
        """`order`: "stop", "abort", or ("add", SourceConfig) / ("remove", name) / ("floor", level) (engine.py)."""
        name, *args = (order,) if isinstance(order, str) else order
        getattr(engine.handle["actor"], name).remote(*args)

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
