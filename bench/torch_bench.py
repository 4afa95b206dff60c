#!/usr/bin/env python3
"""PyTorch eager side of bench/gpu_compare.sh (issue 23): the same workloads as `soma bench`,
on the same device, printed in soma bench's line format with "torch" in front:

  torch workload=<name> batch=<b> value=<x> unit=<unit> precision=<p> device=<d>

Workloads (the models are the ones of apps/soma/bench.cpp):
  mlp_train        784-128-128-10 MLP, Adam, cross-entropy on logits; samples/s
  cifar_cnn_train  Conv(32)x2, pool, Conv(64)x2, pool, Dense 512, Dense 10; samples/s
  sgemm            n x n x n matmul, f32 (tf32: TF32 products); GFLOP/s
  bf16_gemm        n x n x n matmul in bf16 (f32 accumulation); GFLOP/s
Data lives on the device before timing (synthetic, as soma bench's device runs); each timed
section ends with torch.cuda.synchronize(). precision: f32 (full f32 products), tf32 (TF32 for
matmul and cuDNN), bf16 / f16 (torch.autocast; f16 with a GradScaler, as soma's loss scaling).
Exit status 3 when torch cannot be imported, 2 on a usage mistake.
"""
import argparse
import sys
import time

try:
    import torch
    from torch import nn
except Exception as e:  # the caller (gpu_compare.sh) reports the torch column as missing
    print(f"torch_bench: cannot import torch: {e}", file=sys.stderr)
    sys.exit(3)


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def cifar_cnn():
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding="same"), nn.ReLU(), nn.Conv2d(32, 32, 3, padding="same"),
        nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding="same"), nn.ReLU(),
        nn.Conv2d(64, 64, 3, padding="same"), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(64 * 8 * 8, 512), nn.ReLU(), nn.Linear(512, 10))


def train_rate(model, sample, batch, steps, precision, dev):
    model = model.to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    pool = max(1, min(16, 8192 // batch, steps))
    g = torch.Generator().manual_seed(1)
    x = torch.rand((pool * batch,) + sample, generator=g).to(dev)
    y = torch.randint(0, 10, (pool * batch,), generator=g).to(dev)
    low = {"bf16": torch.bfloat16, "f16": torch.float16}.get(precision)
    scaler = torch.cuda.amp.GradScaler() if precision == "f16" and dev.type == "cuda" else None

    def step(i):
        b = (i % pool) * batch
        xb, yb = x[b:b + batch], y[b:b + batch]
        opt.zero_grad(set_to_none=True)
        if low is not None:
            with torch.autocast(device_type=dev.type, dtype=low):
                loss = loss_fn(model(xb), yb)
        else:
            loss = loss_fn(model(xb), yb)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    for i in range(3):
        step(i)
    sync(dev)
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
    sync(dev)
    return steps * batch / (time.perf_counter() - t0), "samples/s"


def gemm(n, steps, dtype, dev):
    g = torch.Generator().manual_seed(4)
    a = (torch.rand((n, n), generator=g) * 2 - 1).to(dtype).to(dev)
    b = (torch.rand((n, n), generator=g) * 2 - 1).to(dtype).to(dev)
    torch.matmul(a, b)
    sync(dev)
    block = 1 if dev.type == "cpu" else 10
    calls = 0
    t0 = time.perf_counter()
    while calls < steps or time.perf_counter() - t0 < 0.3:
        for _ in range(block):
            torch.matmul(a, b)
        calls += block
        sync(dev)
    t = time.perf_counter() - t0
    return 2.0 * n ** 3 * calls / t / 1e9, "GFLOP/s"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", required=True,
                   choices=["mlp_train", "cifar_cnn_train", "sgemm", "bf16_gemm"])
    p.add_argument("--batch", type=int, required=True, help="batch size, or N for the GEMMs")
    p.add_argument("--steps", type=int, default=0, help="timed steps (default: the workload's)")
    p.add_argument("--precision", default="f32", choices=["f32", "tf32", "bf16", "f16"])
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: torch's)")
    a = p.parse_args()
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("torch_bench: torch sees no CUDA device", file=sys.stderr)
        sys.exit(3)
    if a.threads:
        torch.set_num_threads(a.threads)
    tf32 = a.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.manual_seed(1)
    if a.workload == "mlp_train":
        value, unit = train_rate(mlp(), (1, 28, 28), a.batch, a.steps or 200, a.precision, dev)
    elif a.workload == "cifar_cnn_train":
        value, unit = train_rate(cifar_cnn(), (3, 32, 32), a.batch, a.steps or 20, a.precision, dev)
    elif a.workload == "sgemm":
        value, unit = gemm(a.batch, a.steps or 3, torch.float32, dev)
    else:
        value, unit = gemm(a.batch, a.steps or 3, torch.bfloat16, dev)
    print(f"torch workload={a.workload} batch={a.batch} value={value:.6g} unit={unit} "
          f"precision={a.precision} device={a.device}", flush=True)


if __name__ == "__main__":
    main()
