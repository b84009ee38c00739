"""After the engine: `Stage` (stage.py), what every result stage is; the stages of analytics and
snapshots (stages.py) and clips (clips.py); every stage built in one place, in order (build.py);
the route of a result through them (route.py) and the fan-out to the sinks (fanout.py)."""
