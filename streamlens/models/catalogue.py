"""The models streamlens knows: where their publishers put them, under which licence, and the sha256
each download is checked against.

A checksum is listed only where it could be established, and `sha256_from` says how: from the
publisher, or (YOLOX-Nano, whose publisher gives none) as the checksum of the copy the project's
tests and benchmarks run. An entry without one says so, and `streamlens models pull NAME` then
needs `--sha256`. `size` is in bytes, None when not known; a download longer than a listed size
cannot match its sum and is cut off there.

Example:
    >>> known("yolox_nano").file
    'yolox_nano.onnx'
    >>> known("yolov9000") is None
    True
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KnownModel:
    """One model of the catalogue: `name` is what `pull` and a pipeline's `models:NAME` say, `file`
    the name it has in the cache, `url` its publisher's download."""

    name: str
    file: str
    url: str
    licence: str
    about: str
    size: int | None
    sha256: str | None
    sha256_from: str


_YOLOX = "https://github.com/Megvii-BaseDetection/YOLOX/releases/download/0.1.1rc0"
_ULTRALYTICS = "https://github.com/ultralytics/assets/releases/download"

CATALOGUE: tuple[KnownModel, ...] = (
    KnownModel(
        "yolox_nano", "yolox_nano.onnx", f"{_YOLOX}/yolox_nano.onnx", "Apache-2.0",
        "YOLOX-Nano, COCO's 80 classes, 416x416 (backend onnx or openvino); Megvii's YOLOX release 0.1.1rc0",
        3_660_092, "695e750a5d5754bb5a8d5325643b59282191a7e7a564e435a415fd3c578eab14",
        "Megvii publish no checksum: this is the sha256 of the copy the project's tests and benchmarks run "
        "(../shared/data/models/yolox_nano), whose notes do not say it is the release asset unchanged; a "
        "download that differs is refused"),
    KnownModel(
        "yolox_tiny", "yolox_tiny.onnx", f"{_YOLOX}/yolox_tiny.onnx", "Apache-2.0",
        "YOLOX-Tiny, COCO's 80 classes, 416x416 (backend onnx or openvino); Megvii's YOLOX release 0.1.1rc0",
        None, None, "Megvii publish no checksum and the project has no copy: pull it with --sha256"),
    KnownModel(
        "yolo11n", "yolo11n.pt", f"{_ULTRALYTICS}/v8.4.0/yolo11n.pt", "AGPL-3.0",
        "Ultralytics YOLO11n, COCO's 80 classes (backend ultralytics; `streamlens models export` for "
        "ONNX or OpenVINO); the release asset Ultralytics 8.4 itself downloads",
        5_613_764, "0ebbc80d4a7680d14987a577cd21342b65ecfd94632bd9a8da63ae6417644ee1",
        "Ultralytics publish it as the Git LFS object of yolo11n.pt in their huggingface.co/Ultralytics/YOLO11 "
        "(commit 5599de6); projects that pin this GitHub asset record the same sum and size"),
    KnownModel(
        "yolov8n", "yolov8n.pt", f"{_ULTRALYTICS}/v0.0.0/yolov8n.pt", "AGPL-3.0",
        "Ultralytics YOLOv8n, COCO's 80 classes (backend ultralytics; `streamlens models export` for "
        "ONNX or OpenVINO); the release asset YOLOv8 first shipped in",
        6_534_387, "31e20dde3def09e2cf938c7be6fe23d9150bbbe503982af13345706515f2ef95",
        "Ultralytics publish it as the Git LFS object of yolov8n.pt in their huggingface.co/Ultralytics/YOLOv8 "
        "(commit 8a9e1a5, sum and size); projects that pin this GitHub asset record the same sum"),
    KnownModel(
        "yolo11n-seg", "yolo11n-seg.pt", f"{_ULTRALYTICS}/v8.4.0/yolo11n-seg.pt", "AGPL-3.0",
        "Ultralytics YOLO11n-seg, COCO's 80 classes with a mask per box (backend ultralytics, or its ONNX "
        "export on backend onnx: docs/masks.md)",
        6_182_636, "55ed65c56c91713d23e8402371c6c49a6fd84f257f7dce452e8d70e41dcbe152",
        "Ultralytics publish it as the Git LFS object of yolo11n-seg.pt in their "
        "huggingface.co/Ultralytics/YOLO11 (commit 5df55ae, sum and size)"),
    KnownModel(
        "mobile_sam", "mobile_sam.pt", f"{_ULTRALYTICS}/v8.4.0/mobile_sam.pt", "Apache-2.0",
        "MobileSAM for `segment.model` (masks for tracked objects), as Ultralytics redistribute it",
        None, None, "Ultralytics publish no checksum for their copy: pull it with --sha256"),
)


def known(name: str) -> KnownModel | None:
    """The catalogue's entry called `name`, or None."""
    return next((m for m in CATALOGUE if m.name == name), None)


def by_file(file: str) -> KnownModel | None:
    """The catalogue's entry whose cached file is called `file` (`yolox_nano.onnx`), or None."""
    return next((m for m in CATALOGUE if m.file == file), None)


__all__ = ["CATALOGUE", "KnownModel", "by_file", "known"]
