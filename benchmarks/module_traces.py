"""Records foreign torch.profiler traces with module ranges (with_stack, with_modules), as other projects make them.

    python -m benchmarks.module_traces inference DST   # a tiny ViT in inference_mode, ProfilerStep per batch
    python -m benchmarks.module_traces training DST    # a small MLP's forward/backward, no optimizer, no schedule
    python -m benchmarks.module_traces shapes DST      # a module's 3 forward/backward cycles with record_shapes

Nothing of gapscope is imported: these are someone else's traces. The inference one is made to be
cut to two steps with benchmarks.cut_trace; tests/fixtures/foreign/module_inference and
module_training and module_shapes hold the fixtures made with it (their README says how)."""
from __future__ import annotations

import argparse
import sys

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        x = (q @ k.transpose(-2, -1) * (d // self.heads) ** -0.5).softmax(-1) @ v
        return self.proj(x.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyViT(nn.Module):
    """A ViT's shape at toy size: patch embedding, blocks (attention, MLP), norm, head."""

    def __init__(self, dim: int = 32, depth: int = 2, heads: int = 4, patch: int = 4, classes: int = 10):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        return self.head(self.norm(self.blocks(x)).mean(1))


def _profile(**options):
    return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_stack=True,
                                  with_modules=True, **options)


def inference(path: str) -> None:
    """Five batches, the last three traced (one ProfilerStep each), inside inference_mode, which is
    entered under the profiler as a serving loop does."""
    model = TinyViT().eval()
    images = torch.randn(4, 3, 16, 16)
    with _profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=3)) as prof:
        with torch.inference_mode():
            for _ in range(5):
                model(images)
                prof.step()
    prof.export_chrome_trace(path)


def training(path: str) -> None:
    """Four forward/backward passes of a small MLP with its loss, no optimizer and no prof.step():
    the trace has no step marker, only the model's module ranges."""
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    loss_fn = nn.CrossEntropyLoss()
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    with _profile() as prof:
        for _ in range(4):
            loss_fn(model(x), y).backward()
    prof.export_chrome_trace(path)


class Net(nn.Module):
    """A user's model as tutorials write it: its own class, called as `net(x)`."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(256, 512), nn.Linear(512, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def shapes(path: str) -> None:
    """Three forward/backward cycles of `Net` with record_shapes (Input Dims on every op), no
    optimizer (the gradients accumulate) and no prof.step(): `nn.Module: Net_0` marks them."""
    net, loss_fn = Net(), nn.CrossEntropyLoss()
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    with _profile(record_shapes=True) as prof:
        for _ in range(3):
            loss_fn(net(x), y).backward()
    prof.export_chrome_trace(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.module_traces",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("inference", "training", "shapes"))
    parser.add_argument("dst")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    {"inference": inference, "training": training, "shapes": shapes}[args.kind](args.dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
