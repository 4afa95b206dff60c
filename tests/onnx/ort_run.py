#!/usr/bin/env python3
"""Runs soma's ONNX exports through onnx.checker and onnxruntime (tests/unit/test_onnx_export_ort.cpp).

Usage: ort_run.py OUT DIR. DIR holds MODEL.onnx files and, per model, MODEL.in.txt: its inputs,
one a line ("name rank d0 d1 ... values...", the graph input's name; ".i64" ending the name means
int64). For each model the checker runs with full_check=True, then onnxruntime (CPU) runs it on
those inputs; every output is written to OUT as "MODEL:OUTPUT rank dims values" for the C++ test
to compare with soma's. A failure prints "FAIL MODEL: reason" and the script goes on. Exit
status: 0, or 77 when onnx or onnxruntime cannot be imported (the test skips).
"""
import os
import sys

try:
    import numpy as np
    import onnx
    import onnxruntime as ort
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"onnx/onnxruntime not importable: {e}")
    sys.exit(77)


def read_inputs(path):
    feeds = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            name, rank = parts[0], int(parts[1])
            dims = [int(d) for d in parts[2:2 + rank]]
            vals = parts[2 + rank:]
            if name.endswith(".i64"):
                feeds[name[:-4]] = np.array([int(float(v)) for v in vals], dtype=np.int64).reshape(dims)
            else:
                feeds[name] = np.array([float(v) for v in vals], dtype=np.float32).reshape(dims)
    return feeds


def main():
    out_path, folder = sys.argv[1], sys.argv[2]
    print(f"onnx {onnx.__version__}, onnxruntime {ort.__version__}")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 3
    with open(out_path, "w") as out:
        for fname in sorted(os.listdir(folder)):
            if not fname.endswith(".onnx"):
                continue
            tag = fname[:-5]
            path = os.path.join(folder, fname)
            try:
                model = onnx.load(path)
                onnx.checker.check_model(model, full_check=True)
            except Exception as e:  # noqa: BLE001 - report every failure, whatever its type
                print(f"FAIL {tag}: checker: {type(e).__name__}: {e}".replace("\n", " "))
                continue
            try:
                case = tag.rsplit("_op", 1)[0]
                feeds = read_inputs(os.path.join(folder, case + ".in.txt"))
                sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
                names = [o.name for o in sess.get_outputs()]
                for name, y in zip(names, sess.run(names, feeds)):
                    y = np.asarray(y, dtype=np.float64)
                    vals = " ".join(repr(float(v)) for v in y.reshape(-1))
                    out.write(f"{tag}:{name} {y.ndim} {' '.join(map(str, y.shape))} {vals}\n")
                print(f"ok {tag}")
            except Exception as e:  # noqa: BLE001
                print(f"FAIL {tag}: onnxruntime: {type(e).__name__}: {e}".replace("\n", " "))
    return 0


sys.exit(main())
