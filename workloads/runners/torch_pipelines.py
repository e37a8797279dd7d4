"""PyTorch input pipelines of the blog's "input data format" column, each yielding epochs of batches."""
from __future__ import annotations

import numpy as np

from gapscope.workloads.data import MNIST_MEAN, MNIST_STD, to_torch_layout


class TransformingDataset:
    """A map-style Dataset that prepares each sample when it is fetched, as torchvision's
    ToTensor + Normalize do: the per-sample work that worker processes can take over."""

    def __init__(self, x: np.ndarray, y: np.ndarray, channels_first: bool = True):
        self.x, self.y, self.channels_first = x, y, channels_first

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int):
        import torch
        sample = torch.from_numpy(np.asarray(self.x[index]))
        if sample.dtype == torch.uint8:
            sample = (sample.float() / 255.0 - MNIST_MEAN) / MNIST_STD
        if sample.dim() == 3 and self.channels_first:
            sample = sample.permute(2, 0, 1).contiguous()  # HWC -> CHW
        return sample.float(), torch.as_tensor(self.y[index])


class PreloadedBatches:
    """Prepared tensors already on the device; shuffling is a permutation of indices there."""

    def __init__(self, x, y, batch_size: int, drop_last: bool, seed: int):
        import torch
        self.x, self.y, self.batch_size, self.drop_last = x, y, batch_size, drop_last
        self.generator = torch.Generator(device=x.device).manual_seed(seed)

    def __len__(self) -> int:
        full, rest = divmod(len(self.x), self.batch_size)
        return full + (0 if self.drop_last or not rest else 1)

    def __iter__(self):
        import torch
        order = torch.randperm(len(self.x), device=self.x.device, generator=self.generator)
        for start in range(0, len(self) * self.batch_size, self.batch_size):
            index = order[start:start + self.batch_size]
            yield self.x[index], self.y[index]


def make_batches(pipeline: str, x: np.ndarray, y: np.ndarray, *, batch_size: int,
                 num_workers: int, drop_last: bool, device, seed: int, channels_first: bool = True,
                 pageable: bool = False):
    """An iterable of (inputs, targets) batches; one pass over it is one epoch."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    generator = torch.Generator().manual_seed(seed)
    pin = device.type == "cuda" and not pageable  # pinned pages copy by DMA, asynchronously
    if pipeline == "transforms":
        return DataLoader(TransformingDataset(x, y, channels_first), batch_size=batch_size, shuffle=True,
                          num_workers=num_workers, drop_last=drop_last, generator=generator,
                          pin_memory=pin, persistent_workers=num_workers > 0)
    # x arrives prepared (normalised once, ahead of the data set: the blog's prepared tensors).
    prepared_x = torch.from_numpy(to_torch_layout(x) if channels_first else x)
    prepared_y = torch.from_numpy(y)
    if pipeline == "preload":
        return PreloadedBatches(prepared_x.to(device), prepared_y.to(device), batch_size,
                                drop_last, seed)
    return DataLoader(TensorDataset(prepared_x, prepared_y), batch_size=batch_size, shuffle=True,
                      num_workers=num_workers, drop_last=drop_last, generator=generator,
                      pin_memory=pin, persistent_workers=num_workers > 0)

