"""Test helper script: a two-rank Lightning DDP fit on CPU (gloo), recorded by GapscopeCallback.
Lightning's ddp strategy starts rank 1 by running this script again. Usage: OUT"""
from __future__ import annotations

import sys

if __name__ == "__main__":
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import trainer_fits
    import user_loops
    from gapscope.trainers.lightning import GapscopeCallback

    torch.set_num_threads(1)
    x, y = user_loops.data()
    loader = DataLoader(TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=user_loops.BATCH)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=8, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False,
                         callbacks=[GapscopeCallback("lit-ddp", trace_steps=(3, 5), out=sys.argv[1],
                                                     warmup_steps=2)])
    trainer.fit(trainer_fits.lightning_module("Mlp"), loader)
