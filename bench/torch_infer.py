#!/usr/bin/python3
"""PyTorch eager inference throughput of torchvision's ResNet-18, the reference of
bench/gpu_infer_compare.sh (issue 24).

usage: torch_infer.py [--device cuda|cpu] [--batch 64] [--precision f32|tf32|bf16]
                      [--iters 30] [--warmup 5] [--image 224] [--export PATH]
Prints one line:
  torch_infer model=resnet18 device=cuda precision=tf32 batch=64 iters=30 ms_per_batch=...
    images_per_s=...
Precision: f32 (TF32 off for cuDNN and matmul), tf32 (on), bf16 (torch.autocast to bfloat16:
bf16 products, f32 elsewhere, as soma's AutocastScope). Eager, NCHW, no torch.compile.
--export PATH writes the same seeded random-weight ResNet-18 as ONNX (opset 14) for soma to
load, and exits. Exit status 77 when torch or torchvision cannot be imported.
"""
import argparse
import sys
import time

try:
    import torch
    import torchvision
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"# skipped: torch/torchvision not importable: {e}")
    sys.exit(77)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--precision", default="f32", choices=["f32", "tf32", "bf16"])
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--image", type=int, default=224)
    p.add_argument("--export")
    a = p.parse_args()
    torch.manual_seed(1)
    model = torchvision.models.resnet18().eval()
    if a.export:
        x = torch.randn(1, 3, a.image, a.image)
        torch.onnx.export(model, x, a.export, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, opset_version=14)
        print(f"wrote {a.export}")
        return 0
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("# skipped: torch sees no CUDA device")
        return 77
    dev = torch.device(a.device)
    tf32 = a.precision != "f32"
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = False  # soma uses cuDNN's heuristics, not benchmarking
    model = model.to(dev)
    x = torch.randn(a.batch, 3, a.image, a.image, device=dev)

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16,
                                         enabled=a.precision == "bf16"):
        for _ in range(a.warmup):
            model(x)
        sync()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            model(x)
        sync()
        s = time.perf_counter() - t0
    print(f"torch_infer model=resnet18 device={dev} precision={a.precision} batch={a.batch} "
          f"iters={a.iters} ms_per_batch={1e3 * s / a.iters:.3f} "
          f"images_per_s={a.batch * a.iters / s:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
