"""Finds or makes the ONNX backend node tests (model.onnx + test_data_set_*/input_*.pb, output_*.pb).

Prints the directory holding one folder per node test, or nothing (exit 0) when no onnx package
with node tests is importable. Older onnx wheels ship the data (onnx/backend/test/data/node);
newer ones ship only the generators (onnx.backend.test.case.node), so the data is generated once
into OUT with onnx's own writer (cmd_tools.generate_data), and reused while the versions of onnx,
numpy and ml_dtypes are the same (the pinned ones of scripts/oracles.lock, in the tests).

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
    # The generators' numbers depend on numpy and ml_dtypes too (ml_dtypes 0.7 writes other
    # values for out-of-range INT4 casts than 0.5 did): the data is made again when any moves.
    versions = f"onnx {onnx.__version__}"
    for name in ("numpy", "ml_dtypes"):
        try:
            versions += f" {name} {__import__(name).__version__}"
        except Exception:  # noqa: BLE001 - not installed: not part of the stamp
            pass
    stamp = os.path.join(out, "onnx_version")
    node_dir = os.path.join(out, "node")
    if os.path.isfile(stamp) and open(stamp).read() == versions and os.path.isdir(node_dir):
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
        f.write(versions)
    print(node_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
