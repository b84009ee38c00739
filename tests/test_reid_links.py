"""The cross-camera Linker's links without appearance: a track broken in two within a camera, a lone
hand-over between cameras, and links by the places where two cameras meet, learned from those."""

from streamlens.reid.links import Linker
from streamlens.reid.places import Places

SIZE = (100, 100)  # both cameras' frames; camera "a"'s bottom edge meets camera "b"'s top edge
STEP = 0.1
#: the columns of the lone hand-overs that teach where the cameras meet (places.MIN_LINKS of them)
COLUMNS = (20.0, 35.0, 50.0, 65.0, 80.0)


def box(x: float, y: float, side: float = 10.0) -> list[float]:
    return [x - side / 2, y - side / 2, x + side / 2, y + side / 2]


def linker() -> Linker:
    return Linker(["a", "b"], window_s=60.0, threshold=0.5, margin=0.1)


def walk(link: Linker, t0: float, steps: int, where: dict, cameras: tuple = ("a", "b")) -> float:
    """`steps` frames of `cameras` from `t0`: `where` maps (stream, track) -> (x, y, vx, vy) at `t0`,
    speeds in pixels a second; each camera sees its tracks whose centre is inside its frame. The
    last time."""
    t = t0
    for k in range(steps):
        t = t0 + k * STEP
        for stream in cameras:
            link.tick(stream, t)
        for (stream, track), (x, y, vx, vy) in where.items():
            cx, cy = x + vx * (t - t0), y + vy * (t - t0)
            if 0 <= cx <= SIZE[0] and 0 <= cy <= SIZE[1]:
                link.seen(stream, track, t, box(cx, cy), SIZE)
        link.sweep(t)
    return t


def hand_over(link: Linker, t0: float, x: float, a_track: int, b_track: int) -> float:
    """One object alone: down camera "a" at column `x`, then on into camera "b" (b's row 0 is a's
    row 100)."""
    return walk(link, t0, 10, {("a", a_track): (x, 50.0, 0.0, 100.0), ("b", b_track): (x, -50.0, 0.0, 100.0)})


def taught() -> tuple[Linker, float]:
    """A linker that has seen the lone hand-overs of `COLUMNS` (it knows where the cameras meet), and
    the time of the last."""
    link = linker()
    t = 0.0
    for k, x in enumerate(COLUMNS):
        t = hand_over(link, t + 5.0, x, 10 + k, 20 + k)
    return link, t


def test_a_track_broken_in_two_keeps_its_global_id_and_a_stranger_does_not_take_it():
    link = linker()
    t = walk(link, 0.0, 5, {("a", 1): (10.0, 50.0, 100.0, 0.0), ("a", 9): (80.0, 20.0, 0.0, 0.0)})
    # track 1 lost for 0.2 s, found again under id 2 where its speed takes it; id 3 far off
    walk(link, t + 0.3, 3, {("a", 2): (10.0 + 100.0 * (t + 0.3), 50.0, 100.0, 0.0),
                             ("a", 3): (50.0, 90.0, 0.0, 0.0), ("a", 9): (80.0, 20.0, 0.0, 0.0)})
    assert link.global_id("a", 2) == link.global_id("a", 1)
    assert link.global_id("a", 3) not in (link.global_id("a", 1), link.global_id("a", 9))
    # a second new track at the same place while track 2 carries the object: not the same object
    t = walk(link, t + 0.6, 1, {("a", 4): (10.0 + 100.0 * (t + 0.6), 50.0, 100.0, 0.0),
                                 ("a", 2): (10.0 + 100.0 * (t + 0.6), 52.0, 100.0, 0.0)})
    assert link.global_id("a", 4) != link.global_id("a", 1)
    assert link.figures()["continued"] == 1


def test_a_lone_object_is_handed_over_and_teaches_where_the_cameras_meet():
    link = linker()
    t = 0.0
    for k, x in enumerate(COLUMNS):
        t = hand_over(link, t + 5.0, x, 10 + k, 20 + k)
        assert link.global_id("b", 20 + k) == link.global_id("a", 10 + k)
    figures = link.figures()
    assert figures["links"] == 5 and figures["places"]["a|b"]["links"] == 5
    assert figures["transits"]["a>b"]["links"] == 5
    # two objects near the seam at once, at columns 20 and 70: the one that comes into "b" at column
    # 70 is the one of "a" that was there, though neither is alone now
    walk(link, t + 5.0, 10, {("a", 30): (20.0, 50.0, 0.0, 100.0), ("a", 31): (70.0, 50.0, 0.0, 100.0),
                             ("b", 40): (70.0, -50.0, 0.0, 100.0)})
    assert link.global_id("b", 40) == link.global_id("a", 31) != link.global_id("a", 30)
    assert link.figures()["by_place"] == 1


def test_two_objects_that_fit_alike_are_not_told_apart():
    link, t = taught()
    walk(link, t + 5.0, 10, {("a", 30): (48.0, 50.0, 0.0, 100.0), ("a", 31): (52.0, 50.0, 0.0, 100.0),
                             ("b", 40): (50.0, -50.0, 0.0, 100.0)})
    assert link.global_id("b", 40) not in (link.global_id("a", 30), link.global_id("a", 31))


def test_a_link_by_place_waits_for_the_other_cameras_clock():
    """Streams reach the stage at their own pace: camera "b" a second ahead of camera "a"."""
    link, t = taught()
    start = t + 5.0
    walk(link, start, 5, {("a", 30): (20.0, 0.0, 0.0, 0.0)})  # a parked car: "a" is never alone again
    # camera "b" has reached start + 1.2 s, camera "a" only start + 0.4 s
    walk(link, start + 1.0, 3, {("b", 40): (70.0, 0.0, 0.0, 100.0)}, cameras=("b",))
    assert link.global_id("a", 31) is None  # not seen yet
    walk(link, start + 0.5, 8, {("a", 31): (70.0, 45.0, 0.0, 100.0), ("a", 30): (20.0, 0.0, 0.0, 0.0)},
         cameras=("a",))
    assert link.global_id("b", 40) == link.global_id("a", 31)


def test_places_are_one_offset_whichever_way_objects_go():
    places = Places()
    assert places.fits("a", (0.5, 0.9), "b", (0.5, 0.1)) is None  # nothing learned: no opinion
    for x in (0.2, 0.3, 0.4, 0.5, 0.6):
        places.learn("b", (x, 0.05), "a", (x, 0.95))  # objects going up, from b into a
    assert places.fits("a", (0.3, 0.95), "b", (0.32, 0.05)) < 1.0  # one coming down fits the same boundary
    assert places.fits("a", (0.3, 0.95), "b", (0.7, 0.05)) > 1.0


def test_a_link_made_after_a_track_is_gone_shows_on_the_other_cameras_later_frames():
    """Camera "b" runs ahead: its new track has come and gone before camera "a" shows the moment it
    came in. Its frames are published with its own global_id, so the link makes the track of "a"
    that is still in view take that global_id, not the other way round (which would show on no frame)."""
    link, t = taught()
    start = t + 5.0
    walk(link, start, 5, {("a", 30): (20.0, 0.0, 0.0, 0.0)})  # a parked car: "a" is never alone again
    # in "b", track 40 comes in at start + 1.0 and is lost after 0.2 s; "b" goes on to start + 1.5
    walk(link, start + 1.0, 6, {("b", 40): (70.0, 0.0, 0.0, 400.0)}, cameras=("b",))
    published = link.global_id("b", 40)  # what its frames carried
    seen = {}
    for k in range(8):  # "a" from start + 0.5: track 31 reaches the seam at start + 1.0
        now = start + 0.5 + k * STEP
        walk(link, now, 1, {("a", 31): (70.0, 45.0 + 100.0 * k * STEP, 0.0, 100.0), ("a", 30): (20.0, 0.0, 0.0, 0.0)},
             cameras=("a",))
        if link.global_id("a", 31) is not None and 45.0 + 100.0 * k * STEP <= SIZE[1]:
            seen[now] = link.global_id("a", 31)
    assert link.figures()["by_place"] == 1
    assert seen[max(seen)] == published == link.global_id("b", 40)


def test_a_new_track_continues_an_objects_latest_piece_not_an_earlier_fragment():
    """Far off, one object is several short tracks: a new track where an earlier piece was lost is
    not that object when its latest piece has moved on (another vehicle came into view there)."""
    link = linker()
    walk(link, 0.0, 5, {("a", 1): (50.0, 10.0, 0.0, 0.0)}, cameras=("a",))
    walk(link, 0.6, 5, {("a", 2): (53.0, 10.0, 50.0, 0.0)}, cameras=("a",))  # the same object, moving on
    assert link.global_id("a", 2) == link.global_id("a", 1)
    walk(link, 1.1, 3, {("a", 3): (50.0, 10.0, 0.0, 0.0)}, cameras=("a",))  # where piece 1 was lost
    assert link.global_id("a", 3) != link.global_id("a", 1)
