#!/usr/bin/python3
"""Runs onnx.checker.check_model(full_check=True) on each file named on the command line.

Run with Debian's /usr/bin/python3 (python3-onnx). Exit status: 0 all files pass, 1 one fails
(the checker's message is printed), 77 the onnx module is not available (tests skip).
"""
import sys

try:
    import onnx
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"onnx is not importable: {e}")
    sys.exit(77)

failed = 0
for path in sys.argv[1:]:
    try:
        model = onnx.load(path)
        # full_check also runs strict shape inference over the whole graph.
        onnx.checker.check_model(model, full_check=True)
        print(f"ok {path} (opset {model.opset_import[0].version}, {len(model.graph.node)} nodes)")
    except Exception as e:  # noqa: BLE001 - report every failure, whatever its type
        failed += 1
        print(f"FAIL {path}: {type(e).__name__}: {e}")
sys.exit(1 if failed else 0)
