"""Finds or makes the ONNX backend node tests (model.onnx + test_data_set_*/input_*.pb, output_*.pb).

Prints the directory holding one folder per node test, or nothing (exit 0) when no onnx package
with node tests is importable. Older onnx wheels ship the data (onnx/backend/test/data/node);
newer ones ship only the generators (onnx.backend.test.case.node), so the data is generated once
into OUT with onnx's own writer (cmd_tools.generate_data), and reused while the onnx version is
the same.

usage: node_data.py OUT
"""
import os
import sys


def main() -> int:
    out = sys.argv[1]
    try:
        import onnx
    except Exception:  # no onnx: the conformance test skips
        return 0
    shipped = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")
    if os.path.isdir(shipped) and os.listdir(shipped):
        print(shipped)
        return 0
    stamp = os.path.join(out, "onnx_version")
    node_dir = os.path.join(out, "node")
    if os.path.isfile(stamp) and open(stamp).read() == onnx.__version__ and os.path.isdir(node_dir):
        print(node_dir)
        return 0
    try:
        import argparse

        import numpy as np

        for alias, t in (("float", float), ("int", int), ("bool", bool), ("object", object)):
            if alias not in vars(np):  # onnx 1.12's generators still use the removed aliases
                setattr(np, alias, t)

        import onnx.backend.test.case.model as model_cases
        import onnx.backend.test.case.node as node_cases
        from onnx.backend.test import cmd_tools

        cases = node_cases.collect_testcases(None)
        model_cases.collect_testcases = lambda: cases  # the writer takes node cases as well
        cmd_tools.generate_data(argparse.Namespace(output=out, op_type=None))
    except Exception as e:  # generators that need what is not installed: skip, say why
        print(f"node_data.py: cannot generate the node tests with onnx {onnx.__version__}: {e}",
              file=sys.stderr)
        return 0
    with open(stamp, "w") as f:
        f.write(onnx.__version__)
    print(node_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
