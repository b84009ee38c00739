"""Past capacity, latency holds and accuracy gives way first: the budget controller's ladder of
rungs (control.py: longer keyframe intervals, keyframes that do not wait, batching for
throughput, then frames shed) and each live stream's shedder, which gives frames up evenly and
where they cost least (shedding.py). docs/overload.md tells the ladder with its figures."""
