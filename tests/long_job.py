"""Test helper script: a torch loop under gapscope.capture that runs until a stop file appears
(or MAX_STEPS), to be captured on demand by `gapscope capture --pid`. Usage: OUT STOP_FILE
[FETCH_S]: a fetch that takes FETCH_S seconds (a slow loader) keeps windows long enough to
overlap."""
from __future__ import annotations

import sys
import time
from pathlib import Path

MAX_STEPS = 100_000

if __name__ == "__main__":
    import torch

    import gapscope

    torch.manual_seed(0)
    torch.set_num_threads(1)
    out, stop = Path(sys.argv[1]), Path(sys.argv[2])
    fetch_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    model = torch.nn.Sequential(torch.nn.Linear(100, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = torch.randn(64, 100), torch.randint(0, 10, (64,))
    with gapscope.capture("long-mlp", trace_steps=None, out=out, warmup_steps=3) as cap:
        for step in range(MAX_STEPS):
            if step == 20:  # past the warm-up: a window then has unprofiled steps to compare with
                print(cap.run_dir, flush=True)  # the test waits for this line
            if step % 50 == 0 and stop.exists():
                break
            with cap.phase("data_load"):
                batch = inputs.clone(), targets.clone()
                if fetch_s:
                    time.sleep(fetch_s)
            with cap.phase("forward"):
                loss = torch.nn.functional.cross_entropy(model(batch[0]), batch[1])
            with cap.phase("backward"):
                loss.backward()
            with cap.phase("optimizer"):
                optimizer.step()
                optimizer.zero_grad()
            cap.step(loss)
