"""SAM-format models the tests and the benchmarks build offline: a tiny ONNX encoder and prompt
decoder whose mask is a known function of the box, and a MobileSAM with random weights saved as
Ultralytics loads it.

The tiny pair, at encoder side S (256 here; SAM's is 1024):
- encoder: `[1, 3, S, S]` -> `image_embeddings` `[1, 8, S/16, S/16]` (the image averaged over 16 x 16
  cells, mixed by a 1x1 convolution: a function of the pixels, so the cache's key matters);
- decoder: segment-anything's inputs and outputs; `low_res_masks` `[B, 1, S/4, S/4]` holds, per
  box (points 0 and 1: its corners, in encoder pixels), the signed distance (in low-resolution cells)
  to the edge of the box's middle half (`INNER`): positive inside. Bilinear sampling of a signed
  distance puts the zero exactly on that edge, so a mask made by streamlens must cover the middle
  half of the box it was prompted with, to within a pixel.
"""

from __future__ import annotations

from pathlib import Path

#: the share of the box's width and height cut from each side to make the known mask
INNER = 0.25


def inner_box(box) -> tuple[float, float, float, float]:
    """Where the tiny decoder's mask of `box` lies (source pixels)."""
    x1, y1, x2, y2 = box
    w, h = x2 - x1, y2 - y1
    return x1 + INNER * w, y1 + INNER * h, x2 - INNER * w, y2 - INNER * h


def build_tiny_sam(folder: Path, side: int = 256, batched: bool = True) -> tuple[Path, Path]:
    """`folder/tiny_encoder.onnx` and `folder/tiny_decoder.onnx` (see the module's docstring);
    `batched`: the decoder's batch dimension is free (else fixed at 1, as segment-anything exports)."""
    import torch
    from torch import nn

    low = side // 4

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = nn.AvgPool2d(16)
            self.mix = nn.Conv2d(3, 8, 1)

        def forward(self, image):
            return self.mix(self.pool(image))

    class Decoder(nn.Module):
        def forward(self, image_embeddings, point_coords, point_labels, mask_input, has_mask_input, orig_im_size):
            cells = (torch.arange(low, dtype=torch.float32) + 0.5)  # low-resolution cell centres
            corners = point_coords[:, :2, :] / 4.0  # the box's corners in cells
            x1, y1 = corners[:, 0, 0:1], corners[:, 0, 1:2]
            x2, y2 = corners[:, 1, 0:1], corners[:, 1, 1:2]
            w, h = x2 - x1, y2 - y1
            ax1, ax2 = x1 + INNER * w, x2 - INNER * w
            ay1, ay2 = y1 + INNER * h, y2 - INNER * h
            dx = torch.minimum(cells[None, :] - ax1, ax2 - cells[None, :])  # B x L
            dy = torch.minimum(cells[None, :] - ay1, ay2 - cells[None, :])
            inside = torch.minimum(dy[:, :, None], dx[:, None, :])  # B x L x L
            used = 0.0 * (image_embeddings.mean() + point_labels.mean() + mask_input.mean()
                          + has_mask_input.sum() + orig_im_size.sum())  # every input stays in the graph
            low_res = (inside + used)[:, None]
            return low_res, torch.ones(low_res.shape[0], 1) + used, low_res

    encoder, decoder = folder / "tiny_encoder.onnx", folder / "tiny_decoder.onnx"
    torch.manual_seed(0)
    torch.onnx.export(Encoder().eval(), (torch.zeros(1, 3, side, side),), str(encoder), input_names=["image"],
                      output_names=["image_embeddings"], opset_version=17, dynamo=False)
    inputs = (torch.zeros(1, 8, side // 16, side // 16), torch.zeros(1, 2, 2), torch.tensor([[2.0, 3.0]]),
              torch.zeros(1, 1, low, low), torch.zeros(1), torch.tensor([480.0, 640.0]))
    axes = {"point_coords": {0: "boxes", 1: "points"}, "point_labels": {0: "boxes", 1: "points"}} if batched \
        else {"point_coords": {1: "points"}, "point_labels": {1: "points"}}
    torch.onnx.export(Decoder(), inputs, str(decoder), opset_version=17, dynamo=False,
                      input_names=["image_embeddings", "point_coords", "point_labels", "mask_input",
                                   "has_mask_input", "orig_im_size"],
                      output_names=["masks", "iou_predictions", "low_res_masks"], dynamic_axes=axes)
    return encoder, decoder


def build_random_mobile_sam(folder: Path) -> Path:
    """`folder/mobile_sam.pt`: Ultralytics' MobileSAM with random weights (its state dict, the form
    Ultralytics' `build_sam` loads; the name tells it the architecture)."""
    import torch

    from streamlens.detect.ultralytics_offline import import_ultralytics_offline

    import_ultralytics_offline()
    from ultralytics.models.sam.build import build_mobile_sam

    torch.manual_seed(0)
    path = folder / "mobile_sam.pt"
    torch.save(build_mobile_sam().state_dict(), path)
    return path
