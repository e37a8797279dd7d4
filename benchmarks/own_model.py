"""A user's own torch model and loop, run through `gapscope.capture(model=...)`: three levels of
modules (LayerNorm, GELU, attention, an LSTM, a module called twice), AdamW. The tests run it on
the CPU; benchmarks.gpu_check runs `python -m benchmarks.own_model --device cuda`."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

WARMUP = 3
OWN_STEPS, OWN_TRACE, OWN_BATCH, OWN_SEQ, OWN_WIDTH, OWN_VOCAB = 10, (6, 9), 16, 8, 32, 50


def own_model():
    """A user's own model three levels deep: embed -> block.{0,1} (Linear, GELU, LayerNorm,
    MultiheadAttention) -> rnn (an LSTM, which torch's FLOP counter counts as 0) -> head, with
    `mix` called twice (a reused module)."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.act = nn.Linear(OWN_WIDTH, OWN_WIDTH), nn.GELU()
            self.norm = nn.LayerNorm(OWN_WIDTH)
            self.attn = nn.MultiheadAttention(OWN_WIDTH, 2, batch_first=True)

        def forward(self, x):
            x = self.norm(x + self.act(self.fc(x)))
            return x + self.attn(x, x, x, need_weights=False)[0]

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(OWN_VOCAB, OWN_WIDTH)
            self.mix = nn.Linear(OWN_WIDTH, OWN_WIDTH)
            self.block = nn.ModuleList([Block(), Block()])
            self.rnn = nn.LSTM(OWN_WIDTH, OWN_WIDTH, batch_first=True)
            self.head = nn.Linear(OWN_WIDTH, OWN_VOCAB)

        def forward(self, tokens):
            x = self.mix(self.embed(tokens))
            for block in self.block:
                x = block(x)
            return self.head(self.rnn(self.mix(x))[0])

    torch.manual_seed(0)
    return Net()


def own_batches(count: int = OWN_STEPS):
    import torch
    generator = torch.Generator().manual_seed(1)
    return [(torch.randint(0, OWN_VOCAB, (OWN_BATCH, OWN_SEQ), generator=generator),
             torch.randint(0, OWN_VOCAB, (OWN_BATCH, OWN_SEQ), generator=generator))
            for _ in range(count)]


def own_loss(model, tokens, targets):
    import torch
    return torch.nn.CrossEntropyLoss()(model(tokens).flatten(0, 1), targets.flatten())


def own_model_loop(out: Path, layer_depth: int = 1, steps: int = OWN_STEPS,
                   trace_steps=OWN_TRACE, fail_at: int | None = None, device: str = "cpu"):
    """The own model trained with AdamW through `gapscope.capture(model=...)`; returns the
    capture and the model."""
    import torch

    import gapscope

    if device == "cpu":  # one intra-op thread: a shared CPU's spinning pool slows tiny steps
        torch.set_num_threads(1)
    model = own_model().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with gapscope.capture("own-model", trace_steps=trace_steps, out=out, device=device,
                          warmup_steps=min(WARMUP, trace_steps[0]), model=model,
                          layer_depth=layer_depth) as cap:
        for step, (tokens, targets) in enumerate(cap.data(own_batches(steps))):
            if step == fail_at:
                raise ValueError("the user's loop broke")
            with cap.phase("forward"):
                loss = own_loss(model, tokens, targets)
            with cap.phase("backward"):
                loss.backward()
            with cap.phase("optimizer"):
                optimizer.step()
                optimizer.zero_grad()
            cap.step(loss)
    return cap, model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="where the run directory goes")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=OWN_STEPS)
    parser.add_argument("--trace-steps", type=int, nargs=2, default=OWN_TRACE, metavar=("FIRST", "STOP"))
    args = parser.parse_args(argv)
    cap, _ = own_model_loop(args.out, steps=args.steps, trace_steps=tuple(args.trace_steps),
                            device=args.device)
    print(cap.run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
