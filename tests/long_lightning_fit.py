"""Test helper script: a Lightning fit under GapscopeCallback, long enough to be captured on
demand, writing into a relative OUT (the job's registration must say where it really is).
It prints its run directory once registered; the test stops it with SIGTERM. Usage: OUT"""
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
    callback = GapscopeCallback("lit-long", trace_steps=None, out=sys.argv[1], warmup_steps=2)

    class Announce(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == 20:  # past the warm-up: the window has steps to compare with
                print(callback.run_dir, flush=True)

    trainer = pl.Trainer(accelerator="cpu", max_steps=10**7, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[callback, Announce()])
    trainer.fit(trainer_fits.lightning_module("Mlp"), loader)
