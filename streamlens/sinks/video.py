"""The annotated-video sink: each result's boxes and labels drawn on its frame, encoded to mp4.

One mp4 file per stream, with exactly one video frame per `FrameResult`, played at the stream's
frame rate (`stream_fps[stream]`, else 30). File names:
- `path` holds `{stream}`: it is replaced by the stream's name (`out/{stream}.mp4` gives
  `out/cam1.mp4`, `out/cam2.mp4`);
- otherwise the first stream seen writes `path` itself and every further stream writes
  `<stem>-<stream><suffix>` beside it (`out/annotated.mp4`, then `out/annotated-cam2.mp4`).
Characters of a stream name other than letters, digits, `.`, `_` and `-` become `_` in file names.

Drawing: `streamlens.sinks.draw.FrameAnnotator` (shared with the JPEG frames of the zmq sink): labels
like `#7 car 0.83` (`#id` only for a tracked object, `tracker_id >= 0`), coloured by track id when
tracked, else by class, so a tracked object keeps its colour. Line width and text size follow the
frame size.

Checks at the start: `open()` makes the output folder and checks that `path` can be written
(with `{stream}`: the file of each stream of `stream_fps`), so a path that cannot be made fails
the run before its first frame, with one line naming the path (and `sinks[i].path` for a sink
from a pipeline file), not halfway through.

Encoding: PyAV, `codec` (libx264 by default, with libx264's own frame threading) to yuv420p.
Each stream has an encoder thread of its own, fed through a queue of `QUEUE_FRAMES` frames
(`write()` waits when it is full), so that drawing, colour conversion and encoding of several
streams run side by side (OpenCV and FFmpeg release the GIL) and a large stream never holds up a
small one. A stream's encoder opens on its first frame, when the size is known; an odd width or
height is padded by one replicated pixel row or column to an even size, as yuv420p needs. Should
a stream's frame size change later (a camera reconfigured), later frames are resized to the
first size. A stream's file is finished on its `StreamEnd` (on its thread); `close()` waits for
every stream's thread and finishes every file still open, so a run stopped early (Ctrl-C) still
leaves playable files. After `interrupt()` (a second Ctrl-C) frames still queued are not
encoded (they are counted in `drops()`), and the files are finished at once. An encoder's error
is raised by the next `write()` or by `close()`.

Example:
    >>> import tempfile
    >>> import numpy as np
    >>> from pathlib import Path
    >>> from streamlens.frame import Frame, FrameResult, empty_detections
    >>> path = Path(tempfile.mkdtemp()) / "annotated.mp4"
    >>> sink = VideoSink(path, stream_fps={"cam1": 25.0})
    >>> sink.open()
    >>> for i in range(3):
    ...     frame = Frame("cam1", i, i / 25, 0.0, np.zeros((240, 320, 3), np.uint8))
    ...     sink.write(FrameResult(frame, i, True, empty_detections()), {}, b"")
    >>> sink.close()
    >>> sink.frames_written
    {'cam1': 3}
"""

from __future__ import annotations

import math
import queue
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np

from ..config.common import section
from ..config.sinks import STREAM, VideoSinkConfig, video_path
from ..errors import SinkError
from ..frame import FrameResult, StreamEnd
from . import draw
from .base import Sink, os_reason

DEFAULT_FPS = 30.0
#: the encoder, its preset and quality when the sink's keys give none
DEFAULT_CODEC = "libx264"
DEFAULT_PRESET = "veryfast"
DEFAULT_CRF = 23
#: frames a stream may have waiting for its encoder thread
QUEUE_FRAMES = 4
_FINISH = object()  # a stream's queue: no more frames, finish the file
#: codecs that take x264-style `preset` and `crf` options
X264_LIKE_CODECS = ("libx264", "libx265")


@dataclass(slots=True, eq=False)
class _StreamWriter:
    """One stream's open output: its file, encoder and annotators."""

    path: Path
    container: Any  # av.container.OutputContainer
    video: Any  # av.video.stream.VideoStream
    width: int  # the size the encoder takes (even)
    height: int
    source_size: tuple[int, int]  # (width, height) of the stream's first frame
    annotator: draw.FrameAnnotator


def _safe(stream: str) -> str:
    """A stream name fit for a file name."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", stream)


class _Encoder:
    """One stream's encoder thread: it takes frame results from its queue, draws and encodes them,
    and finishes the file on `_FINISH`. An error is kept in `error`; the thread then takes (and
    drops) what comes, so that a writer never waits on a full queue for ever."""

    def __init__(self, sink: VideoSink, stream: str):
        self.sink, self.stream = sink, stream
        self.queue: queue.Queue = queue.Queue(QUEUE_FRAMES)
        self.writer: _StreamWriter | None = None
        self.error: SinkError | None = None
        self.thread = threading.Thread(target=self._run, name=f"video-{stream}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        sink = self.sink
        while (item := self.queue.get()) is not _FINISH:
            if self.error is not None or sink._aborted:
                sink._dropped[self.stream] += 1
                continue
            try:
                if self.writer is None:
                    self.writer = sink._open_stream(self.stream, item.frame.image)
                sink._encode(self.writer, item)
            except SinkError as e:
                self.error = e
            except Exception as e:  # noqa: BLE001 - any failure ends this stream's file, said in one line
                path = sink.path_for(self.stream)
                self.error = SinkError(f"{sink.key('path')}: cannot write {path}: {type(e).__name__}: {e}")
        if self.writer is not None:
            try:
                sink._finish(self.writer)
            except SinkError as e:
                self.error = self.error or e


class VideoSink(Sink):
    """Draws each `FrameResult` and encodes it to one mp4 per stream (see the module docs).

    `frames_written[stream]` counts the frames encoded for each stream, including streams whose
    files are already finished.
    """

    name = "video"

    def __init__(self, path: str | Path | VideoSinkConfig, *, stream_fps: Mapping[str, float] | None = None,
                 **keys: Any):
        """`VideoSink(cfg)` with the sink's typed section, or `VideoSink(path, **keys)` with its
        keys, checked as the pipeline file's are (`ValueError`); `stream_fps`: each stream's frame
        rate, in the pipeline's order."""
        cfg = path if isinstance(path, VideoSinkConfig) else section(
            VideoSinkConfig, "video sink", type="video", path=path, **keys)
        self.path = cfg.path
        self.stream_fps = dict(stream_fps or {})
        self.codec = cfg.codec or DEFAULT_CODEC
        self.preset = cfg.preset or DEFAULT_PRESET
        self.crf = DEFAULT_CRF if cfg.crf is None else cfg.crf
        self.frames_written: dict[str, int] = {}
        self._encoders: dict[str, _Encoder] = {}  # every stream seen, finished or not
        self._paths: dict[str, Path] = {}  # every stream seen, finished or not
        self._finished: set[str] = set()
        self._dropped: dict[str, int] = {}
        self._aborted = False
        self._closed = False

    def open(self) -> None:
        """Make the output folders and check that the file of each known stream can be written
        (each stream's encoder opens on its first frame, when the frame size is known)."""
        if STREAM in str(self.path):  # each known stream's own file; others on their first frame
            paths = [video_path(self.path, _safe(stream), False) for stream in self.stream_fps]
        else:  # the first stream's file; the others' are beside it
            paths = [self.path]
        for path in paths:
            self._check_writable(path)

    def interrupt(self) -> None:
        """From any thread (a second Ctrl-C): frames still queued are dropped (counted in
        `drops()`) and each file is finished as soon as its thread has the frame in hand."""
        self._aborted = True

    def drops(self) -> dict[str, int]:
        """Frames never encoded, per stream: dropped after `interrupt()` or an encoder's error."""
        return {stream: n for stream, n in self._dropped.items() if n}

    def write(self, item: FrameResult | StreamEnd, message: dict[str, Any], payload: bytes) -> None:
        """Hand a frame result to its stream's encoder thread (waiting while its queue is full),
        or tell it to finish the file on the stream's `StreamEnd`."""
        if self._closed:
            raise SinkError(f"video sink: {self.path} is closed")
        self._raise_error()
        if not isinstance(item, (FrameResult, StreamEnd)):
            return  # events: nothing to draw of their own
        stream = item.stream if isinstance(item, StreamEnd) else item.frame.stream
        if stream in self._finished:
            if isinstance(item, StreamEnd):
                return
            raise SinkError(f"video sink: a frame of stream {stream!r} came after its end")
        encoder = self._encoders.get(stream)
        if isinstance(item, StreamEnd):
            self._finished.add(stream)
            if encoder is not None:
                encoder.queue.put(_FINISH)
            return
        if encoder is None:
            self.path_for(stream)  # fixed now, in the order streams come
            self.frames_written.setdefault(stream, 0)
            self._dropped.setdefault(stream, 0)
            encoder = self._encoders[stream] = _Encoder(self, stream)
        encoder.queue.put(item)

    def close(self) -> None:
        """Wait for every stream's encoder thread, finishing every file still open. Safe to call
        twice; raises the first encoder error, if any."""
        if self._closed:
            return
        self._closed = True
        for stream, encoder in self._encoders.items():
            if stream not in self._finished:
                encoder.queue.put(_FINISH)
        for encoder in self._encoders.values():
            encoder.thread.join()
        self._raise_error()

    def _raise_error(self) -> None:
        for encoder in self._encoders.values():
            if encoder.error is not None:
                raise encoder.error

    def _check_writable(self, path: Path) -> None:
        """Make `path`'s folder and check that the file can be opened for writing (a file that
        was not there is removed again: the encoder makes it on the stream's first frame)."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            existed = path.exists()
            with open(path, "ab"):
                pass
            if not existed:
                path.unlink()
        except OSError as e:
            raise SinkError(f"{self.key('path')}: cannot write {path}: {os_reason(e)}") from None

    def _encode(self, writer: _StreamWriter, item: FrameResult) -> None:
        """Draw one result on its frame and encode it (on the stream's encoder thread)."""
        image = self._fit_to_encoder(writer, self.annotate(writer, item))
        # OpenCV's BGR -> I420 is BT.601 limited range, as swscale's, and several times faster
        video_frame = av.VideoFrame.from_ndarray(
            cv2.cvtColor(image, cv2.COLOR_BGR2YUV_I420), format="yuv420p"
        )
        stream = item.frame.stream
        video_frame.pts = self.frames_written[stream]
        try:
            writer.container.mux(writer.video.encode(video_frame))
        except (av.FFmpegError, OSError) as e:
            raise SinkError(f"{self.key('path')}: cannot write {writer.path}: {e}") from None
        self.frames_written[stream] += 1

    def path_for(self, stream: str) -> Path:
        """The file a stream is (or would be) written to; fixed for a stream once it is seen.

        Example:
            >>> sink = VideoSink("out/annotated.mp4")
            >>> [sink.path_for(s).name for s in ("cam1", "cam2", "cam1")]
            ['annotated.mp4', 'annotated-cam2.mp4', 'annotated.mp4']
        """
        if stream not in self._paths:  # the first stream seen is the first stream
            self._paths[stream] = video_path(self.path, _safe(stream), not self._paths)
        return self._paths[stream]

    def annotate(self, writer: _StreamWriter, result: FrameResult) -> np.ndarray:
        """The frame with its detections drawn, and its analytics' lines, zones and counts where it
        has them; the frame's own image is never changed."""
        return writer.annotator.annotate(result.frame.image, result.detections, result.analytics)

    def _open_stream(self, stream: str, first_image: np.ndarray) -> _StreamWriter:
        path = self.path_for(stream)
        height, width = first_image.shape[:2]
        even_width, even_height = width + width % 2, height + height % 2
        fps = self.stream_fps.get(stream)
        if not (fps and math.isfinite(fps) and fps > 0):
            fps = DEFAULT_FPS
        rate = Fraction(fps).limit_denominator(100_000)
        options = {}
        if self.codec in X264_LIKE_CODECS:
            options = {"preset": self.preset, "crf": str(self.crf)}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            container = av.open(str(path), mode="w")
        except (av.FFmpegError, OSError) as e:
            reason = os_reason(e) if isinstance(e, OSError) else e
            raise SinkError(f"{self.key('path')}: cannot open {path}: {reason}") from None
        try:
            video = container.add_stream(self.codec, rate=rate, options=options)
            video.width, video.height = even_width, even_height
            video.pix_fmt = "yuv420p"
            # tag the colours as they are converted (BT.601, limited range), so players that
            # assume BT.709 for HD sizes show them right
            video.codec_context.colorspace = 6  # AVCOL_SPC_SMPTE170M (BT.601)
            video.codec_context.color_primaries = 6  # AVCOL_PRI_SMPTE170M
            video.codec_context.color_trc = 6  # AVCOL_TRC_SMPTE170M
            video.codec_context.color_range = 1  # AVCOL_RANGE_MPEG (limited)
            video.time_base = 1 / rate  # one tick per frame: pts counts frames
            # PyAV sets slice threading on every codec context, which makes libx264 switch to
            # sliced threads; AUTO (FFmpeg's own default) leaves libx264 its default frame threads.
            video.codec_context.thread_type = "AUTO"
        except av.codec.codec.UnknownCodecError:
            container.close()
            reason = f"codec {self.codec!r} is not in this FFmpeg build"
            raise SinkError(f"{self.key('codec')}: cannot write {path}: {reason}") from None
        except (av.FFmpegError, ValueError) as e:
            container.close()
            reason = f"codec {self.codec!r}: {e}"
            raise SinkError(f"{self.key('codec')}: cannot write {path}: {reason}") from None
        resolution = (width, height)
        return _StreamWriter(
            path=path,
            container=container,
            video=video,
            width=even_width,
            height=even_height,
            source_size=resolution,
            annotator=draw.FrameAnnotator(resolution),
        )

    @staticmethod
    def _fit_to_encoder(writer: _StreamWriter, image: np.ndarray) -> np.ndarray:
        """The image at the encoder's size: resized if the stream changed size, padded to even."""
        height, width = image.shape[:2]
        if (width, height) != writer.source_size:
            image = cv2.resize(image, writer.source_size, interpolation=cv2.INTER_AREA)
            height, width = image.shape[:2]
        if (width, height) != (writer.width, writer.height):
            image = cv2.copyMakeBorder(
                image, 0, writer.height - height, 0, writer.width - width, cv2.BORDER_REPLICATE
            )
        return np.ascontiguousarray(image)

    def _finish(self, writer: _StreamWriter) -> None:
        """Drain the encoder and write the file's index; the file is playable afterwards."""
        try:
            writer.container.mux(writer.video.encode(None))
        except (av.FFmpegError, OSError) as e:
            error = SinkError(f"{self.key('path')}: cannot finish {writer.path}: {e}")
        else:
            error = None
        try:
            writer.container.close()
        except (av.FFmpegError, OSError) as e:
            error = error or SinkError(f"{self.key('path')}: cannot finish {writer.path}: {e}")
        if error is not None:
            raise error
