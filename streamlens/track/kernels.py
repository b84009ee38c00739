"""The tracker's per-frame arithmetic, compiled (numba): it runs on every frame of every stream.

A tracker step works on a handful of boxes and a few thousand motion vectors. Written with numpy it
is some hundred small array operations, each costing more to dispatch than to compute (about 1 ms a
step on a 2-core machine); compiled loops do the same work in a few tens of microseconds. They keep
the GIL: each is too short to be worth releasing it (getting it back can take a thread switch
interval, longer than the kernel ran).

Compiled on first use and cached next to this file (or in numba's user cache directory when that is
read-only), so only the first run on a machine pays the compile time.

Example:
    >>> starts = np.array([[10.0, 10.0], [12.0, 11.0], [50.0, 50.0]], np.float32)
    >>> motion = np.array([[2.0, 0.0], [4.0, 1.0], [9.0, 9.0]], np.float32)
    >>> columns = starts[:, 0].astype(np.int16)
    >>> box = np.array([[0.0, 0.0, 20.0, 20.0]])
    >>> shift, quality, growth = box_motion(starts, motion, columns, box, 1.0, 2, 256.0)
    >>> shift.tolist(), quality.tolist()  # two vectors in a box of 400 px^2: 2 of 1.56 blocks
    ([[3.0, 0.5]], [1.0])
    >>> growth.tolist()                   # two vectors are too few to tell a growth
    [nan]
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

_JIT = {"cache": True}
_warm = False


@njit(**_JIT)
def order_vectors(start, motion):
    """The vectors (`start` and `motion`, `(N, 2)` each) ordered by the whole pixel column of their
    start (x truncated, as int16), stably, by counting: `(start, motion, column)`, float32 and int16."""
    n = len(start)
    column = np.empty(n, np.int16)
    low, high = 32767, -32768
    for i in range(n):
        c = int(min(32767.0, max(-32768.0, start[i, 0])))
        column[i] = c
        low, high = min(low, c), max(high, c)
    ordered_start = np.empty((n, 2), np.float32)
    ordered_motion = np.empty((n, 2), np.float32)
    ordered_column = np.empty(n, np.int16)
    if n == 0:
        return ordered_start, ordered_motion, ordered_column
    offset = np.zeros(high - low + 2, np.int64)
    for i in range(n):
        offset[column[i] - low + 1] += 1
    for c in range(1, len(offset)):
        offset[c] += offset[c - 1]
    for i in range(n):
        at = offset[column[i] - low]
        offset[column[i] - low] += 1
        ordered_start[at, 0], ordered_start[at, 1] = start[i, 0], start[i, 1]
        ordered_motion[at, 0], ordered_motion[at, 1] = motion[i, 0], motion[i, 1]
        ordered_column[at] = column[i]
    return ordered_start, ordered_motion, ordered_column


@njit(**_JIT)
def field_of(vectors):
    """`Frame.motion_vectors` (`(N, 4)` x, y, dx, dy) as the mv model keeps them: each block's start
    on the previous frame (x - dx, y - dy) and its motion, float32, ordered as by `order_vectors`:
    `(start, motion, column)`. One pass instead of numpy's slices of the rows (about 50 us on a
    720p frame's 3,900 blocks, more than the ordering)."""
    n = len(vectors)
    start = np.empty((n, 2), np.float32)
    motion = np.empty((n, 2), np.float32)
    for i in range(n):
        start[i, 0] = vectors[i, 0] - vectors[i, 2]
        start[i, 1] = vectors[i, 1] - vectors[i, 3]
        motion[i, 0], motion[i, 1] = vectors[i, 2], vectors[i, 3]
    return order_vectors(start, motion)


@njit(**_JIT)
def box_motion(start, motion, columns, boxes, keep, min_vectors, block_area, inlier_px=1.0, max_growth=1.25,
               min_coverage=0.0):
    """Per box `(B, 4)` (x1, y1, x2, y2): the median motion `(B, 2)` of the vectors whose `start`
    `(N, 2)` lies in its central part (`keep` of its width and height around its centre), NaN where
    fewer than `min_vectors` do or their quality is under `min_coverage`, the quality `(B,)`: those
    vectors over the blocks of `block_area` square pixels that part holds (at most 1), and the growth
    `(B,)`: how far the vectors that moved with the median (within `inlier_px`) spread out (> 1) or
    drew together, the ratio of their mean distance from their centre after and before, within
    `max_growth` either way (NaN where the median is, or where fewer than `min_vectors`, or at least
    3, moved so, or they lie too close together to tell). `columns` `(N,)`
    is each start's x truncated to whole pixels, ascending (the vectors are ordered by it)."""
    count = boxes.shape[0]
    shift = np.full((count, 2), np.nan)
    quality = np.zeros(count)
    growth = np.full(count, np.nan)
    dx = np.empty(len(columns), np.float64)
    dy = np.empty(len(columns), np.float64)
    sx = np.empty(len(columns), np.float64)
    sy = np.empty(len(columns), np.float64)
    for b in range(count):
        cx, cy = (boxes[b, 0] + boxes[b, 2]) / 2, (boxes[b, 1] + boxes[b, 3]) / 2
        half_w, half_h = (boxes[b, 2] - boxes[b, 0]) * keep / 2, (boxes[b, 3] - boxes[b, 1]) * keep / 2
        x1, y1, x2, y2 = cx - half_w, cy - half_h, cx + half_w, cy + half_h
        k = 0
        if x2 > x1 and y2 > y1:
            # truncation moves a start by less than a pixel: bisect one column wider on each side
            low = np.searchsorted(columns, max(-32768.0, math.floor(x1) - 1.0))
            high = np.searchsorted(columns, min(32767.0, math.floor(x2) + 2.0))
            for i in range(low, high):
                x, y = start[i, 0], start[i, 1]
                if x >= x1 and x < x2 and y >= y1 and y < y2:
                    dx[k] = motion[i, 0]
                    dy[k] = motion[i, 1]
                    sx[k] = x
                    sy[k] = y
                    k += 1
        quality[b] = min(1.0, k / max(1.0, (x2 - x1) * (y2 - y1) / block_area))
        if k >= max(min_vectors, 1) and quality[b] >= min_coverage:
            mx, my = np.median(dx[:k]), np.median(dy[:k])
            shift[b, 0] = mx
            shift[b, 1] = my
            growth[b] = _spread(sx, sy, dx, dy, k, mx, my, inlier_px, max(min_vectors, 3), max_growth)
    return shift, quality, growth


@njit(**_JIT)
def _spread(sx, sy, dx, dy, k, mx, my, inlier_px, least, max_growth):
    """For `box_motion`: the growth of the first `k` vectors (starts `sx`, `sy`, motion `dx`, `dy`)
    that moved within `inlier_px` of the median (`mx`, `my`)."""
    n = 0
    cx0 = cy0 = cx1 = cy1 = 0.0
    for j in range(k):
        if abs(dx[j] - mx) <= inlier_px and abs(dy[j] - my) <= inlier_px:
            n += 1
            cx0 += sx[j]
            cy0 += sy[j]
            cx1 += sx[j] + dx[j]
            cy1 += sy[j] + dy[j]
    if n < least:
        return np.nan
    cx0, cy0, cx1, cy1 = cx0 / n, cy0 / n, cx1 / n, cy1 / n
    before = after = 0.0
    for j in range(k):
        if abs(dx[j] - mx) <= inlier_px and abs(dy[j] - my) <= inlier_px:
            before += math.hypot(sx[j] - cx0, sy[j] - cy0)
            after += math.hypot(sx[j] + dx[j] - cx1, sy[j] + dy[j] - cy1)
    if before / n <= 1.0:
        return np.nan
    return min(max_growth, max(1.0 / max_growth, after / before))


@njit(**_JIT)
def sample_median(motion, step):
    """The median `(2,)` of every `step`-th row of `motion` `(N, 2)` (zeros when there is none)."""
    rows = (len(motion) + step - 1) // step
    out = np.zeros(2)
    if rows == 0:
        return out
    values = np.empty(rows, np.float64)
    for c in range(2):
        for r in range(rows):
            values[r] = motion[r * step, c]
        out[c] = np.median(values)
    return out


@njit(**_JIT)
def moving_outside(start, motion, step, boxes, grow, camera, min_motion):
    """Of every `step`-th vector whose start lies outside every box `(B, 4)` grown by `grow` of its
    size on every side, the share whose motion differs from `camera` `(2,)` by at least `min_motion`
    pixels (0 when none lies outside)."""
    grown = np.empty_like(boxes)
    for b in range(boxes.shape[0]):
        margin_x, margin_y = (boxes[b, 2] - boxes[b, 0]) * grow, (boxes[b, 3] - boxes[b, 1]) * grow
        grown[b, 0], grown[b, 1] = boxes[b, 0] - margin_x, boxes[b, 1] - margin_y
        grown[b, 2], grown[b, 3] = boxes[b, 2] + margin_x, boxes[b, 3] + margin_y
    outside = 0
    moved = 0
    limit = min_motion * min_motion
    for i in range(0, len(start), step):
        x, y = start[i, 0], start[i, 1]
        inside = False
        for b in range(grown.shape[0]):
            if x >= grown[b, 0] and x < grown[b, 2] and y >= grown[b, 1] and y < grown[b, 3]:
                inside = True
                break
        if inside:
            continue
        outside += 1
        ax, ay = motion[i, 0] - camera[0], motion[i, 1] - camera[1]
        if ax * ax + ay * ay >= limit:
            moved += 1
    return moved / outside if outside else 0.0


@njit(**_JIT)
def kalman_move(mean, cov, delta, dt, horizon, noise, position_noise, velocity_noise, min_size):
    """`BoxKalmanFilter.move` for every box: see there. `noise` `(N,)`; returns new arrays."""
    ahead = min(dt, horizon)  # how far the velocity is extrapolated; noise builds up over all of dt
    out_mean = np.empty_like(mean)
    out_cov = np.empty_like(cov)
    qp, qv = position_noise * position_noise, velocity_noise * velocity_noise
    for n in range(mean.shape[0]):
        observed_var = noise[n] * noise[n]
        for c in range(4):
            scale = max(mean[n, 2 + c % 2], min_size)  # x and w scale with the width, y and h with the height
            scale_sq = scale * scale
            pos, cross, rate = cov[n, 0, c], cov[n, 1, c], cov[n, 2, c]
            velocity = mean[n, 4 + c]
            predicted_pos = pos + ahead * (2.0 * cross + ahead * rate) + dt * qp * scale_sq
            predicted_cross = cross + ahead * rate
            rate_var = rate + dt * qv * scale_sq
            expected = ahead * velocity
            measured = delta[n, c]
            if dt > 0 and math.isfinite(measured):
                expected_var = ahead * ahead * rate_var + dt * qp * scale_sq
                fused = expected + expected_var / (expected_var + observed_var) * (measured - expected)
                gain = rate_var / (rate_var + observed_var / (dt * dt))
                out_mean[n, c] = mean[n, c] + fused
                out_mean[n, 4 + c] = velocity + gain * (measured / dt - velocity)
                out_cov[n, 0, c] = predicted_pos
                out_cov[n, 1, c] = (1.0 - gain) * predicted_cross
                out_cov[n, 2, c] = (1.0 - gain) * rate_var
            else:
                out_mean[n, c] = mean[n, c] + expected
                out_mean[n, 4 + c] = velocity
                out_cov[n, 0, c] = predicted_pos
                out_cov[n, 1, c] = predicted_cross
                out_cov[n, 2, c] = rate_var
        for c in range(2, 4):
            out_mean[n, c] = max(out_mean[n, c], min_size)
    return out_mean, out_cov


# the track states as tracks.py numbers them (TrackState; tests/test_track_step.py checks), for the kernels below
_TENTATIVE, _CONFIRMED, _LOST = 0, 1, 2


@njit(**_JIT)
def _shown(state, missing, seen, keep_s):
    """Whether a track in `state` is shown (or followed): tentative and confirmed ones are; a lost one
    `missing` seconds is for at most `keep_s`, and no longer than it had been `seen` before."""
    if state == _TENTATIVE or state == _CONFIRMED:
        return True
    return state == _LOST and missing <= min(keep_s, seen)


@njit(**_JIT)
def _corners(means, i):
    """Row `i` of `means` (cx, cy, w, h, ...) as corners (x1, y1, x2, y2), as `kalman.xywh_to_xyxy`
    computes them."""
    x1 = means[i, 0] - means[i, 2] / 2
    y1 = means[i, 1] - means[i, 3] / 2
    return x1, y1, x1 + means[i, 2], y1 + means[i, 3]

@njit(**_JIT)
def in_view_rows(means, width, height, min_px, min_visible):
    """`TrackTable.in_view`'s mask for boxes `means[:, :4]` (cx, cy, w, h): at least `min_px` wide
    and high inside a `width` x `height` frame, and at least `min_visible` of their area there
    (False for a box that is not finite, as numpy's comparisons make it)."""
    n = means.shape[0]
    out = np.empty(n, np.bool_)
    for i in range(n):
        cx, cy, w, h = means[i, 0], means[i, 1], means[i, 2], means[i, 3]
        if not (math.isfinite(cx) and math.isfinite(cy) and math.isfinite(w) and math.isfinite(h)):
            out[i] = False
            continue
        half_w, half_h = w / 2, h / 2
        seen_x = min(cx + half_w, width) - max(cx - half_w, 0.0)
        seen_y = min(cy + half_h, height) - max(cy - half_h, 0.0)
        out[i] = seen_x >= min_px and seen_y >= min_px and seen_x * seen_y >= min_visible * (w * h)
    return out


@njit(**_JIT)
def shown_boxes(means, states, last_seen, born, now, coast_s, width, height, min_px):
    """`KeyframeTracker.objects_of` in one pass: the boxes of `means` as corners, float32, clipped to
    a `width` x `height` frame (none for a frame of unknown size), and which rows are shown: tentative,
    confirmed, or lost for at most `coast_s` (and no longer than seen before) at time `now`, and at
    least `min_px` wide and high once clipped. Returns `(boxes, rows, any_state)`: `any_state` says
    whether any track was in a shown state before clipping."""
    n = means.shape[0]
    boxes = np.empty((n, 4), np.float32)
    rows = np.empty(n, np.bool_)
    any_state = False
    clip = width > 1 and height > 1
    fw, fh = np.float32(width), np.float32(height)
    for i in range(n):
        shown = _shown(states[i], now - last_seen[i], last_seen[i] - born[i], coast_s)
        any_state = any_state or shown
        x1, y1, x2, y2 = _corners(means, i)
        corners = (np.float32(x1), np.float32(y1), np.float32(x2), np.float32(y2))
        for c in range(4):
            v = corners[c]
            if clip:
                if v < 0:
                    v = np.float32(0.0)
                limit = fw if c % 2 == 0 else fh
                if v > limit:
                    v = limit
            boxes[i, c] = v
        rows[i] = shown and boxes[i, 2] - boxes[i, 0] >= min_px and boxes[i, 3] - boxes[i, 1] >= min_px
    return boxes, rows, any_state


@njit(**_JIT)
def step_rows(means, states, last_seen, born, now, follow_s):
    """What a tracker step starts from, in one pass: the tracks followed by motion at time `now`
    (tentative, confirmed, and lost for at most `follow_s` and no longer than seen before) as indices
    `(V,)`; `means` with every lost track's size held (its w and h velocities zero: ByteTrack), a
    copy where any is lost, else `means` itself; and the followed tracks' boxes as corners `(V, 4)`."""
    n = means.shape[0]
    followed = np.empty(n, np.int64)
    count = 0
    held, copied = means, False
    for i in range(n):
        if states[i] == _LOST:
            if not copied:
                held, copied = means.copy(), True
            held[i, 6] = 0.0
            held[i, 7] = 0.0
        if not _shown(states[i], now - last_seen[i], last_seen[i] - born[i], follow_s):
            continue
        followed[count] = i
        count += 1
    boxes = np.empty((count, 4))
    for j in range(count):
        boxes[j, 0], boxes[j, 1], boxes[j, 2], boxes[j, 3] = _corners(means, followed[j])
    return held, followed[:count].copy(), boxes


@njit(**_JIT)
def carry_tracks(means, covs, visible, shift, growth, noise, quality, camera, gain, dt, horizon,
                 position_noise, velocity_noise, min_size, travel, motion_quality, decay, learns_scale):
    """The arithmetic of one tracker step after the motion model measured the tracks at `visible`
    (indices into `means`): `shift` `(V, 2)` as measured (before the stream's factor `gain`,
    `motion/scale.py`), `growth`, `noise`, `quality` `(V,)` (`MotionEstimate`), the camera's motion
    `camera` `(2,)` (before `gain`; not finite: none). Returns `(means, covs, travel,
    motion_quality)`, new arrays; the inputs are left as they were:
    - each visible track's measured change of (cx, cy, w, h): its shift times `gain`, its size times
      its growth less one, less the camera's motion (the velocities are the objects' own); NaN for
      the others, which the Kalman step (`kalman_move`) then only predicts;
    - every track moved with the camera, measured or not (BoT-SORT's camera motion compensation);
    - with `learns_scale`, each track's `travel` (`TrackTable.travel`) one frame on: a visible track
      adds its shift as measured, or where there was none (a frame without vectors, a box with too
      few) the step it took over `gain` (its prediction in the model's units: it keeps the sum
      going); a track only predicted (lost past following) gets NaN until its next detection;
    - each visible track's motion quality: the measured one, at most 1, else its own times `decay`."""
    n = means.shape[0]
    delta = np.full((n, 4), np.nan)
    sigma = np.ones(n)
    cam_x, cam_y = camera[0] * gain, camera[1] * gain
    has_camera = math.isfinite(cam_x) and math.isfinite(cam_y)
    for j in range(len(visible)):
        i = visible[j]
        sx, sy = shift[j, 0], shift[j, 1]
        if gain != 1.0:
            sx, sy = sx * gain, sy * gain
        delta[i, 0], delta[i, 1] = sx, sy
        delta[i, 2] = means[i, 2] * (growth[j] - 1.0)
        delta[i, 3] = means[i, 3] * (growth[j] - 1.0)
        sigma[i] = noise[j]
    if has_camera:
        for i in range(n):
            delta[i, 0] -= cam_x
            delta[i, 1] -= cam_y
    out_mean, out_cov = kalman_move(means, covs, delta, dt, horizon, sigma, position_noise, velocity_noise,
                                    min_size)
    if has_camera:
        for i in range(n):
            out_mean[i, 0] += cam_x
            out_mean[i, 1] += cam_y
    out_travel = travel
    if learns_scale:
        out_travel = np.full_like(travel, np.nan)
        for j in range(len(visible)):
            i = visible[j]
            for c in range(2):
                step = shift[j, c] if math.isfinite(shift[j, c]) else (out_mean[i, c] - means[i, c]) / gain
                out_travel[i, c] = travel[i, c] + step
    out_quality = motion_quality.copy()
    for j in range(len(visible)):
        i = visible[j]
        q = quality[j]
        out_quality[i] = min(q, 1.0) if math.isfinite(q) else motion_quality[i] * decay
    return out_mean, out_cov, out_travel, out_quality


def warm_up() -> None:
    """Compile (first run on a machine: some seconds) or load (later: a fraction of a second) every
    kernel now, with the types the tracker passes, rather than on a stream's first frames. Once per
    process; every `KeyframeTracker` calls it when made."""
    global _warm
    if _warm:
        return
    _warm = True
    start, _, _ = field_of(np.zeros((1, 4), np.float32))  # and order_vectors, which it calls
    boxes = np.array([[0.0, 0.0, 1.0, 1.0]])
    box_motion(start, start, np.zeros(1, np.int16), boxes, 0.5, 2, 256.0, 1.0, 1.25, 0.3)
    moving_outside(start, start, 1, boxes, 0.1, sample_median(start, 1), 1.0)
    kalman_move(np.ones((1, 8)), np.ones((1, 3, 4)), np.zeros((1, 4)), 0.1, 0.1, np.ones(1), 1.0, 1.0, 1.0)
    means, one = np.ones((1, 8)), np.ones(1)
    in_view_rows(means, 10, 10, 1.0, 0.5)
    step_rows(means, np.ones(1, np.int8), one, one, 1.0, 0.4)
    shown_boxes(means, np.ones(1, np.int8), one, one, 1.0, 0.0, 10, 10, 1.0)
    carry_tracks(means, np.ones((1, 3, 4)), np.zeros(1, np.int64), np.ones((1, 2)), one, one, one, np.ones(2), 1.0,
                 0.1, 0.1, 1.0, 1.0, 1.0, np.zeros((1, 2)), one, 0.5, True)
    from ..sources import motion_vectors

    motion_vectors.warm_up()
