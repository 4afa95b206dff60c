#!/usr/bin/env python3
"""Writes ONNX models whose initialisers live in external data files (tests/unit/test_onnx_external_data.cpp).

Usage: external_data.py OUT DIR MODE.
  small: DIR/model.onnx (written by soma) is saved again as DIR/ext/model.onnx with every
         initialiser in DIR/ext/weights.bin (onnx.save_model(save_as_external_data=True,
         all_tensors_to_one_file=True, size_threshold=0)); DIR/ext/escape.onnx names
         "../weights.bin" for its first initialiser, DIR/ext/absolute.onnx
         the absolute path of weights.bin; DIR/ext/inputs_listed.onnx is the model with
         its initialisers listed as graph inputs too (IR version 3, as old exporters wrote).
         DIR/ext/constants.onnx: y = x * c + b, c a Constant node's value, b an initialiser, both
         external in DIR/ext/constants.bin; writes "constants_x" and "constants_y" to OUT.
  large: DIR/large/model.onnx: y = Gather(table, ids) + bias, table [ROWS, 64] f32 (> 2 GB) and
         bias [64] after it in one sparse file DIR/large/big.bin (offset > 2^31); rows 0, 7 and
         ROWS-1 hold known values, written to OUT as "table_rows" with the bias as "bias".
OUT gets "name rank dims values" lines (tests/support/torch_script.hpp). Exit 77 without onnx.
"""
import os
import sys

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"onnx not importable: {e}")
    sys.exit(77)


def write(out, name, a):
    a = np.asarray(a, dtype=np.float64)
    out.write(f"{name} {a.ndim} {' '.join(map(str, a.shape))} {' '.join(repr(float(v)) for v in a.reshape(-1))}\n")


def small(folder):
    m = onnx.load(os.path.join(folder, "model.onnx"))
    ext = os.path.join(folder, "ext")
    os.makedirs(ext, exist_ok=True)
    listed = onnx.ModelProto()
    listed.CopyFrom(m)
    onnx.save_model(m, os.path.join(ext, "model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    m2 = onnx.load(os.path.join(ext, "model.onnx"), load_external_data=False)
    n_ext = sum(1 for t in m2.graph.initializer if t.data_location == TensorProto.EXTERNAL)
    print(f"{n_ext} of {len(m2.graph.initializer)} initialisers external")
    for kv in m2.graph.initializer[0].external_data:
        if kv.key == "location":
            kv.value = "../weights.bin"
    onnx.save_model(m2, os.path.join(ext, "escape.onnx"))
    for kv in m2.graph.initializer[0].external_data:
        if kv.key == "location":
            kv.value = os.path.abspath(os.path.join(ext, "weights.bin"))
    onnx.save_model(m2, os.path.join(ext, "absolute.onnx"))
    listed.ir_version = 3
    for t in listed.graph.initializer:
        vi = listed.graph.input.add()
        vi.CopyFrom(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    onnx.save_model(listed, os.path.join(ext, "inputs_listed.onnx"))
    # The tensors of node attributes (Constant) go out too with convert_attribute=True.
    c = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    b = np.linspace(0.5, 1.5, 4, dtype=np.float32)
    g = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=onnx.numpy_helper.from_array(c, "c_value")),
         helper.make_node("Mul", ["x", "c"], ["xc"]), helper.make_node("Add", ["xc", "b"], ["y"])],
        "constants", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        [onnx.numpy_helper.from_array(b, "b")])
    cm = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    cm.ir_version = 8
    onnx.save_model(cm, os.path.join(ext, "constants.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="constants.bin", size_threshold=0,
                    convert_attribute=True)
    cm2 = onnx.load(os.path.join(ext, "constants.onnx"), load_external_data=False)
    assert cm2.graph.node[0].attribute[0].t.data_location == TensorProto.EXTERNAL
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    return x, x * c + b


def large(folder, out):
    d = os.path.join(folder, "large")
    os.makedirs(d, exist_ok=True)
    cols = 64
    rows = (2**31 + 2**24) // (cols * 4)  # a little over 2 GiB
    table_bytes = rows * cols * 4
    data = os.path.join(d, "big.bin")
    bias = np.linspace(-1, 1, cols, dtype=np.float32)
    known = {}
    with open(data, "wb") as f:
        f.truncate(table_bytes + bias.nbytes)  # sparse: the unwritten rows read as zeros
        for r in (0, 7, rows - 1):
            known[r] = np.arange(cols, dtype=np.float32) * 0.5 + r % 1000
            f.seek(r * cols * 4)
            f.write(known[r].tobytes())
        f.seek(table_bytes)
        f.write(bias.tobytes())

    def ext_tensor(name, dims, offset, length):
        t = TensorProto()
        t.name = name
        t.data_type = TensorProto.FLOAT
        t.dims.extend(dims)
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "big.bin"), ("offset", str(offset)), ("length", str(length))):
            e = t.external_data.add()
            e.key, e.value = k, v
        return t

    g = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0),
         helper.make_node("Add", ["rows", "bias"], ["y"])],
        "large",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, cols])],
        [ext_tensor("table", [rows, cols], 0, table_bytes),
         ext_tensor("bias", [cols], table_bytes, bias.nbytes)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(m.SerializeToString())
    ids = [0, 7, rows - 1]
    write(out, "ids", ids)
    write(out, "table_rows", np.stack([known[r] for r in ids]))
    write(out, "bias", bias)
    print(f"large: {rows} x {cols} f32 table, {table_bytes + bias.nbytes} bytes")


def main():
    out_path, folder, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(out_path, "w") as out:
        if mode == "small":
            x, y = small(folder)
            write(out, "constants_x", x)
            write(out, "constants_y", y)
        else:
            large(folder, out)
    return 0


sys.exit(main())
