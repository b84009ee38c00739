"""The annotated-video sink: each result's boxes and labels drawn on its frame, encoded to mp4.

One mp4 file per stream, with exactly one video frame per `FrameResult`, played at the stream's
frame rate (`stream_fps[stream]`, else 30). File names:
- `path` holds `{stream}`: it is replaced by the stream's name (`out/{stream}.mp4` gives
  `out/cam1.mp4`, `out/cam2.mp4`);
- otherwise the first stream seen writes `path` itself and every further stream writes
  `<stem>-<stream><suffix>` beside it (`out/annotated.mp4`, then `out/annotated-cam2.mp4`).
Characters of a stream name other than letters, digits, `.`, `_` and `-` become `_` in file names.

Drawing: `streamlens.draw.FrameAnnotator` (shared with the JPEG frames of the zmq sink): labels
like `#7 car 0.83` (`#id` only for a tracked object, `tracker_id >= 0`), coloured by track id when
tracked, else by class, so a tracked object keeps its colour. Line width and text size follow the
frame size.

Encoding: PyAV, `codec` (libx264 by default, with libx264's own frame threading) to yuv420p.
A stream's encoder opens on its first frame, when the size is known; an odd width or height is
padded by one replicated pixel row or column to an even size, as yuv420p needs. Should a
stream's frame size change later (a camera reconfigured), later frames are resized to the first
size. A stream's file is finished on its `StreamEnd`; `close()` finishes every file still open,
so a run stopped early (Ctrl-C) still leaves playable files.

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
import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np

from .. import draw
from ..errors import SinkError
from ..frame import FrameResult, StreamEnd
from .base import Sink

DEFAULT_FPS = 30.0
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


class VideoSink(Sink):
    """Draws each `FrameResult` and encodes it to one mp4 per stream (see the module docs).

    `frames_written[stream]` counts the frames encoded for each stream, including streams whose
    files are already finished.
    """

    name = "video"

    def __init__(
        self,
        path: str | Path,
        *,
        stream_fps: Mapping[str, float] | None = None,
        codec: str = "libx264",
        preset: str = "veryfast",
        crf: int = 23,
    ):
        self.path = Path(path)
        self.stream_fps = dict(stream_fps or {})
        self.codec = codec
        self.preset = preset
        self.crf = crf
        self.frames_written: dict[str, int] = {}
        self._writers: dict[str, _StreamWriter] = {}
        self._paths: dict[str, Path] = {}  # every stream seen, finished or not
        self._finished: set[str] = set()
        self._closed = False

    def open(self) -> None:
        """Nothing to do yet: each stream's file opens on its first frame."""

    def write(self, item: FrameResult | StreamEnd, message: dict[str, Any], payload: bytes) -> None:
        """Draw and encode a frame result, or finish a stream's file on its `StreamEnd`."""
        if self._closed:
            raise SinkError(f"video sink: {self.path} is closed")
        if isinstance(item, StreamEnd):
            writer = self._writers.pop(item.stream, None)
            self._finished.add(item.stream)
            if writer is not None:
                self._finish(writer)
            return
        stream = item.frame.stream
        if stream in self._finished:
            raise SinkError(f"video sink: a frame of stream {stream!r} came after its end")
        writer = self._writers.get(stream)
        if writer is None:
            writer = self._writers[stream] = self._open_stream(stream, item.frame.image)
        image = self._fit_to_encoder(writer, self.annotate(writer, item))
        # OpenCV's BGR -> I420 is BT.601 limited range, as swscale's, and several times faster
        video_frame = av.VideoFrame.from_ndarray(
            cv2.cvtColor(image, cv2.COLOR_BGR2YUV_I420), format="yuv420p"
        )
        video_frame.pts = self.frames_written[stream]
        try:
            writer.container.mux(writer.video.encode(video_frame))
        except (av.FFmpegError, OSError) as e:
            raise SinkError(f"video sink: cannot write {writer.path}: {e}") from None
        self.frames_written[stream] += 1

    def close(self) -> None:
        """Flush every encoder still open and finish its file. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        first_error: SinkError | None = None
        for stream in list(self._writers):
            try:
                self._finish(self._writers.pop(stream))
            except SinkError as e:
                first_error = first_error or e
        if first_error is not None:
            raise first_error

    def path_for(self, stream: str) -> Path:
        """The file a stream is (or would be) written to; fixed for a stream once it is seen.

        Example:
            >>> sink = VideoSink("out/annotated.mp4")
            >>> [str(sink.path_for(s)) for s in ("cam1", "cam2", "cam1")]
            ['out/annotated.mp4', 'out/annotated-cam2.mp4', 'out/annotated.mp4']
        """
        if stream in self._paths:
            return self._paths[stream]
        safe_name = re.sub(r"[^A-Za-z0-9._-]", "_", stream)
        if "{stream}" in str(self.path):
            path = Path(str(self.path).replace("{stream}", safe_name))
        elif not self._paths:
            path = self.path
        else:
            path = self.path.with_name(f"{self.path.stem}-{safe_name}{self.path.suffix}")
        self._paths[stream] = path
        return path

    def annotate(self, writer: _StreamWriter, result: FrameResult) -> np.ndarray:
        """The frame with its detections drawn; the frame's own image is never changed."""
        return writer.annotator.annotate(result.frame.image, result.detections)

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
            reason = getattr(e, "strerror", None) or e
            raise SinkError(f"video sink: cannot open {path}: {reason}") from None
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
            raise SinkError(f"video sink: cannot write {path}: {reason}") from None
        except (av.FFmpegError, ValueError) as e:
            container.close()
            reason = f"codec {self.codec!r}: {e}"
            raise SinkError(f"video sink: cannot write {path}: {reason}") from None
        resolution = (width, height)
        self.frames_written.setdefault(stream, 0)
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

    @staticmethod
    def _finish(writer: _StreamWriter) -> None:
        """Drain the encoder and write the file's index; the file is playable afterwards."""
        try:
            writer.container.mux(writer.video.encode(None))
        except (av.FFmpegError, OSError) as e:
            error = SinkError(f"video sink: cannot finish {writer.path}: {e}")
        else:
            error = None
        try:
            writer.container.close()
        except (av.FFmpegError, OSError) as e:
            error = error or SinkError(f"video sink: cannot finish {writer.path}: {e}")
        if error is not None:
            raise error
