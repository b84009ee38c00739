"""Links by appearance and the transit band they teach: what a pair of cameras learned from a few wrong
links early in a run must not shut out the links that show it wrong (a looped camera once linked
every vehicle to an earlier, alike one for five minutes: the band learned from the first wrong links
let in only more of them)."""

import numpy as np

from streamlens.reid.links import Linker
from streamlens.reid.transit import MIN_LINKS

DIM = 32


def unit(v: np.ndarray) -> np.ndarray:
    return (v / np.linalg.norm(v)).astype(np.float32)


def appear(link: Linker, stream: str, track: int, first: float, last: float, look: np.ndarray) -> bool:
    """`track` seen from `first` to `last`, its appearance made (two looks) at its first sighting:
    whether it was linked then."""
    link.seen(stream, track, first)
    linked = link.embedded(stream, track, look, 2, first)
    link.seen(stream, track, last)
    return linked


def test_a_band_learned_from_early_wrong_links_gives_way_to_the_sure_ones():
    rng = np.random.default_rng(7)
    link = Linker(["a", "b"], window_s=60.0, threshold=0.5, margin=0.1, by_place=False, continuing=False)
    for k in range(10):  # other objects: the group's mean appearance
        appear(link, "a", 900 + k, 0.0, 0.5, unit(rng.normal(size=DIM)))
    t, track = 10.0, 0
    for _ in range(MIN_LINKS):  # wrong, yet sure: each b object alike the a object seen 5 s before it
        look = unit(rng.normal(size=DIM))
        track += 1
        appear(link, "a", track, t, t + 1.0, look)
        assert appear(link, "b", track, t + 6.0, t + 7.0, unit(look + 0.05 * rng.normal(size=DIM)))
        t += 20.0
    assert link.transits.window("a", "b")[1] < 5.0 + 2.0  # it learned a gap of about 5 s

    outcomes = []
    for _ in range(3 * MIN_LINKS):
        # an object crosses from a to b at once; an earlier a object, inside the learned band, looks
        # somewhat alike (over the threshold), the object itself far more
        look = unit(rng.normal(size=DIM))
        decoy = unit(look + 1.2 * unit(rng.normal(size=DIM)))
        appear(link, "a", track + 1, t - 5.0, t - 4.8, decoy)
        appear(link, "a", track + 2, t - 1.0, t, look)
        appear(link, "b", track + 3, t + 0.2, t + 1.0, unit(look + 0.05 * rng.normal(size=DIM)))
        b = link.global_id("b", track + 3)
        outcomes.append("right" if b == link.global_id("a", track + 2) else
                        "decoy" if b == link.global_id("a", track + 1) else "none")
        track += 3
        t += 20.0
    # the sure links outside the band teach it, though not linked while outside; within a few the
    # band holds their gap, and from then on each object is linked to itself
    first = outcomes.index("right")
    assert first <= 3 and outcomes[first:] == ["right"] * (len(outcomes) - first), outcomes
    low, high = link.transits.window("a", "b")
    assert low <= 0.2 <= high


def test_a_less_sure_link_is_made_inside_the_band_and_teaches_nothing():
    rng = np.random.default_rng(3)
    link = Linker(["a", "b"], window_s=60.0, threshold=0.5, margin=0.1, by_place=False, continuing=False)
    for k in range(10):
        appear(link, "a", 900 + k, 0.0, 0.5, unit(rng.normal(size=DIM)))
    t = 10.0
    for k in range(MIN_LINKS):  # sure links 2 s apart: the band
        look = unit(rng.normal(size=DIM))
        appear(link, "a", k, t, t + 1.0, look)
        assert appear(link, "b", k, t + 3.0, t + 4.0, unit(look + 0.05 * rng.normal(size=DIM)))
        t += 20.0
    band, confident = link.transits.window("a", "b"), link.confident

    def fair(offset: float) -> bool:
        """A b object like the a object `offset` s before it and, a little less, like another a object
        10 s before it (outside the band): over the threshold, not sure."""
        nonlocal t
        look = unit(rng.normal(size=DIM))
        appear(link, "a", 100 + int(t), t - 10.0, t - 9.0, unit(look + 0.85 * unit(rng.normal(size=DIM))))
        near = unit(look + 0.7 * unit(rng.normal(size=DIM)))
        appear(link, "a", 200 + int(t), t + 1.0 - offset, t + 1.0 - offset, near)
        ok = appear(link, "b", 300 + int(t), t + 1.0, t + 2.0, look)
        t += 20.0
        return ok

    assert fair(2.0)  # inside the band
    assert not fair(30.0)  # outside it
    assert link.confident == confident and link.transits.window("a", "b") == band
