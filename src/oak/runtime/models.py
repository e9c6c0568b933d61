"""Models trained by the runtime worker: a tiny CPU-test network and ResNet-18 for CIFAR-10 (no torchvision)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

MODELS = ("tiny", "resnet18")
NUM_CLASSES = 10


class TinyNet(nn.Module):
    """Patchify conv (4×4, stride 4) → ReLU → dropout → linear: ~5 k parameters, hundreds of steps/s on 1 CPU.

    The dropout consumes the torch RNG, so bit-exact resumption depends on restoring the RNG state.
    """

    def __init__(self, num_classes: int = NUM_CLASSES, channels: int = 8, dropout: float = 0.1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, channels, kernel_size=4, stride=4)
        self.drop = nn.Dropout(dropout)
        self.fc = nn.Linear(channels * 8 * 8, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x))
        out: torch.Tensor = self.fc(self.drop(torch.flatten(h, 1)))
        return out


class BasicBlock(nn.Module):
    """ResNet basic block: two 3×3 conv-BN layers with an identity or 1×1 projection shortcut."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """ResNet-18 for 32×32 inputs: 3×3 stride-1 stem, no max-pool, stages of 2 blocks each.

    ``width_mult`` scales every channel count (64·w, 128·w, 256·w, 512·w, at least 4); 1.0 is the standard
    11.2 M-parameter network, 0.25 a CPU-sized one.
    """

    def __init__(self, num_classes: int = NUM_CLASSES, width_mult: float = 1.0) -> None:
        super().__init__()
        if not width_mult > 0:
            raise ValueError(f"width_mult must be > 0, got {width_mult}")
        widths = [max(4, round(c * width_mult)) for c in (64, 128, 256, 512)]
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, stride=1, padding=1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()
        )
        blocks: list[nn.Module] = []
        cin = widths[0]
        for i, cout in enumerate(widths):
            stride = 1 if i == 0 else 2
            blocks += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.layers(self.stem(x))
        h = h.mean(dim=(2, 3))  # global average pool (what adaptive_avg_pool2d(h, 1) dispatches to)
        out: torch.Tensor = self.fc(h)
        return out


def build_model(name: str, *, width_mult: float = 1.0, num_classes: int = NUM_CLASSES) -> nn.Module:
    """Construct model ``name`` (one of ``MODELS``) with parameters drawn from the current torch RNG."""
    if name == "tiny":
        return TinyNet(num_classes)
    if name == "resnet18":
        return ResNet18(num_classes, width_mult)
    raise ValueError(f"unknown model {name!r}; expected one of {', '.join(MODELS)}")


class MomentumSGD:
    """SGD with heavy-ball momentum and L2 weight decay: the update of ``torch.optim.SGD`` with dampening 0 and
    nesterov off (buf ← μ·buf + g + λ·p, first buf = g; p ← p − lr·buf).

    Written out because ``torch.optim`` imports ``torch._dynamo`` on first use, which adds 3–4 s of CPU time to
    every worker start — a restart cost the scheduler would otherwise pay on each resize.
    ``state_dict()`` holds only tensors and numbers (``weights_only``-loadable).
    """

    def __init__(
        self, params: Iterable[torch.Tensor], *, lr: float, momentum: float = 0.0, weight_decay: float = 0.0
    ) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("optimizer got an empty parameter list")
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)

    @torch.no_grad()
    def step(self) -> None:
        """Apply one update from the parameters' ``.grad`` (parameters without a gradient are skipped)."""
        for i, p in enumerate(self.params):
            g = p.grad
            if g is None:
                continue
            if self.weight_decay:
                g = g.add(p, alpha=self.weight_decay)
            if self.momentum:
                buf = self.buffers[i]
                if buf is None:
                    buf = self.buffers[i] = torch.clone(g).detach()
                else:
                    buf.mul_(self.momentum).add_(g)
                g = buf
            p.add_(g, alpha=-self.lr)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def state_dict(self) -> dict[str, Any]:
        return {
            "lr": self.lr,
            "momentum": self.momentum,
            "weight_decay": self.weight_decay,
            "momentum_buffers": [None if b is None else b.detach().clone() for b in self.buffers],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore momentum buffers (hyper-parameters stay as constructed); raises ValueError on a shape mismatch."""
        bufs = state["momentum_buffers"]
        if len(bufs) != len(self.params):
            raise ValueError(f"optimizer state has {len(bufs)} buffers, model has {len(self.params)} parameters")
        new: list[torch.Tensor | None] = []
        for p, b in zip(self.params, bufs, strict=True):
            if b is not None and b.shape != p.shape:
                raise ValueError(f"momentum buffer shape {tuple(b.shape)} != parameter shape {tuple(p.shape)}")
            new.append(None if b is None else b.to(device=p.device, dtype=p.dtype).clone())
        self.buffers = new
