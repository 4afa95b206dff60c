#!/usr/bin/env python3
"""examples/char_transformer's model in PyTorch, for tokens/s side by side (docs/attention.md).

The same GPT: Embedding(256, D) + a learned position table [T, D] -> N pre-norm causal
nn.TransformerEncoderLayer (gelu, feed-forward 4D, dropout) -> LayerNorm -> Linear(256), AdamW
(weight decay 0.1 on the matrices only, global clip-norm 1), batches of B windows of T bytes
of /usr/share/common-licenses/GPL-3 (stride T/4 + 1, the last 10% held out).

    /usr/bin/python3 bench/char_transformer_torch.py [--steps 30] [--threads 2] [--generate 100]

Prints training tokens/s (forward, backward, optimiser step), the validation loss after those
steps, and generation tokens/s re-running the window per byte (PyTorch 1.13's
nn.TransformerEncoderLayer has no KV cache). Run it next to
`char_transformer --epochs 1 --steps 30 --generate 100` on the same machine.
"""
import argparse
import math
import time

import torch
import torch.nn as nn


class GPT(nn.Module):
    def __init__(self, layers, d, heads, context, dropout):
        super().__init__()
        self.emb = nn.Embedding(256, d)
        self.pos = nn.Parameter(torch.randn(context, d) * 0.02)
        self.blocks = nn.ModuleList([
            nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, dropout=dropout,
                                       activation="gelu", batch_first=True, norm_first=True)
            for _ in range(layers)])
        self.norm = nn.LayerNorm(d)
        self.out = nn.Linear(d, 256)
        mask = torch.triu(torch.full((context, context), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask)

    def forward(self, x):
        t = x.shape[1]
        h = self.emb(x) + self.pos[:t]
        for b in self.blocks:
            h = b(h, src_mask=self.mask[:t, :t])
        return self.out(self.norm(h))


def windows(ids, context, stride):
    xs, ys = [], []
    for i in range(0, len(ids) - context, stride):
        xs.append(ids[i:i + context])
        ys.append(ids[i + 1:i + context + 1])
    return torch.tensor(xs, dtype=torch.long), torch.tensor(ys, dtype=torch.long)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--file", default="/usr/share/common-licenses/GPL-3")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--context", type=int, default=128)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--generate", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--file-extra", nargs="*", default=[],
                   help="more training text (the held-out tail stays --file's), as char_transformer --extra")
    p.add_argument("--curve", type=int, default=0, metavar="N",
                   help="a learning curve instead of a speed run: N steps with a warm-up then a cosine "
                        "decay to lr/10 (as char_transformer), the validation loss every --eval-every")
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--warmup", type=int, default=20)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)

    ids = list(open(a.file, "rb").read())
    split = len(ids) * 9 // 10
    train_ids = ids[:split]
    for f in a.file_extra:
        train_ids = list(open(f, "rb").read()) + train_ids
    x, y = windows(train_ids, a.context, a.context // 4 + 1)
    vx, vy = windows(ids[split:], a.context, a.context)
    model = GPT(a.layers, a.d_model, a.heads, a.context, a.dropout)
    decay = [q for n, q in model.named_parameters() if q.dim() >= 2 and n != "pos"]
    rest = [q for n, q in model.named_parameters() if not (q.dim() >= 2 and n != "pos")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}], lr=a.lr)
    loss_fn = nn.CrossEntropyLoss()
    n_params = sum(q.numel() for q in model.parameters())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {n_params} parameters, "
          f"{len(x)} training windows")

    def step(i):
        idx = torch.randint(0, len(x), (a.batch,))
        logits = model(x[idx])
        loss = loss_fn(logits.reshape(-1, 256), y[idx].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    if a.curve:
        return curve(a, model, opt, step, loss_fn, vx, vy)

    model.train()
    step(0)  # warm-up (allocations), not timed
    t0 = time.perf_counter()
    for i in range(a.steps):
        loss = step(i)
    dt = time.perf_counter() - t0
    print(f"train: {a.steps} steps of {a.batch}x{a.context} in {dt:.2f} s: "
          f"{a.steps * a.batch * a.context / dt:.0f} tokens/s (last loss {loss:.3f})")

    model.eval()
    with torch.no_grad():
        v = loss_fn(model(vx).reshape(-1, 256), vy.reshape(-1)).item()
        print(f"validation loss after {a.steps + 1} steps: {v:.3f} nats/char")
        window = vx[0:1].clone()
        t0 = time.perf_counter()
        for _ in range(a.generate):
            logits = model(window)[0, -1]
            nxt = torch.multinomial(torch.softmax(logits / 0.8, -1), 1)
            window = torch.cat([window[:, 1:], nxt.view(1, 1)], 1)
        dt = time.perf_counter() - t0
    print(f"generate: {a.generate} bytes in {dt:.2f} s: {a.generate / dt:.0f} tokens/s "
          f"(re-running the {a.context}-byte window per byte)")


def curve(a, model, opt, step, loss_fn, vx, vy):
    """The validation curve of a --curve N run: what this text allows the model (the control for
    char_transformer's validation figure; docs/attention.md)."""
    warm = min(a.warmup, a.curve // 2)

    def rate(i):
        if i < warm:
            return a.lr * (i + 1) / warm
        t = (i - warm) / max(1, a.curve - warm)
        return a.lr / 10 + (a.lr - a.lr / 10) * 0.5 * (1 + math.cos(math.pi * t))

    def validate():
        model.eval()
        with torch.no_grad():
            tot = 0.0
            for i in range(0, len(vx), a.batch):
                lo = model(vx[i:i + a.batch])
                tot += loss_fn(lo.reshape(-1, 256), vy[i:i + a.batch].reshape(-1)).item() * len(vx[i:i + a.batch])
        model.train()
        return tot / len(vx)

    best, best_at, t0 = float("inf"), 0, time.perf_counter()
    model.train()
    for i in range(a.curve):
        for g in opt.param_groups:
            g["lr"] = rate(i)
        loss = step(i)
        if (i + 1) % a.eval_every == 0 or i + 1 == a.curve:
            v = validate()
            if v < best:
                best, best_at = v, i + 1
            print(f"step {i + 1}: train {loss:.3f}, validation {v:.3f} nats/char, "
                  f"{time.perf_counter() - t0:.0f} s", flush=True)
    print(f"best validation {best:.3f} nats/char at step {best_at} of {a.curve}")


if __name__ == "__main__":
    main()
