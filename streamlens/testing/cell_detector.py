"""A detector the tests and the benchmarks build offline whose boxes are a function of the frame's
pixels alone, and nothing else: the same frame gives the same boxes whenever it comes (unlike the
motion detector, whose background model remembers the frames before).

The frame (stretched to the model's 64 x 64 input, `detector.resize: resize`) is cut into an 8 x 8
grid of cells; each cell is a candidate box of class 0 whose score is the cell's mean grey level
(0-1). With `detector.conf` between the levels of a clip's dark and bright parts, boxes come and
go as bright things cross the cells. It is an ONNX model of Ultralytics' YOLOv8 head layout,
`[1, 4 + 1, 84]` (84 anchor points at 64 x 64; the 20 past the grid score 0), which streamlens'
`onnx` backend reads without metadata.
"""

from __future__ import annotations

from pathlib import Path

#: the model's input side, and the grid's cells a side
SIDE = 64
GRID = 8
#: anchor points of a stride-8/16/32 head at SIDE x SIDE
ANCHORS = (SIDE // 8) ** 2 + (SIDE // 16) ** 2 + (SIDE // 32) ** 2


def build_cell_detector(folder: Path) -> Path:
    """`folder/cells.onnx` (see the module's docstring)."""
    import torch
    from torch import nn

    cell = SIDE // GRID
    centres = (torch.arange(GRID, dtype=torch.float32) + 0.5) * cell
    cy, cx = torch.meshgrid(centres, centres, indexing="ij")
    boxes = torch.zeros(4, ANCHORS)
    boxes[0, :GRID * GRID], boxes[1, :GRID * GRID] = cx.flatten(), cy.flatten()
    boxes[2:, :GRID * GRID] = cell

    class Cells(nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = nn.AvgPool2d(cell)
            self.register_buffer("boxes", boxes[None])
            self.register_buffer("rest", torch.zeros(1, ANCHORS - GRID * GRID))

        def forward(self, images):
            level = self.pool(images.mean(1, keepdim=True)).flatten(1)  # [1, GRID * GRID], row by row
            scores = torch.cat([level, self.rest], 1)[:, None]
            return torch.cat([self.boxes, scores], 1)

    path = folder / "cells.onnx"
    torch.onnx.export(Cells().eval(), (torch.zeros(1, 3, SIDE, SIDE),), str(path), input_names=["images"],
                      output_names=["output0"], opset_version=17, dynamo=False)
    return path
