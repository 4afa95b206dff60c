"""Writes the Keras fixtures that tests/unit/test_keras_import.cpp reads.

Run with Keras 3 (any backend), from the repository root:
    python3 -m pip install keras==3.6.0
    KERAS_BACKEND=numpy python3 tests/keras/make_fixtures.py
(the numpy backend runs predict with nothing else installed; jax or torch do as well).
The files it writes are checked in (each a few KB), so the C++ test needs no Python.

cnn_legacy.h5 is the CNN saved in Keras 2's HDF5 format (model.save to .h5).
For each model NAME: NAME.json (model.to_json()), NAME.weights.h5 (model.save_weights) and
NAME_io.txt: the inputs and Keras' predictions, each as a line "shape d0 d1 ..." followed by a
line of values (float32 printed with 9 significant digits: exact round trip).
"""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "numpy")

import numpy as np  # noqa: E402
import keras  # noqa: E402
from keras import layers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def write_tensor(f, a):
    a = np.asarray(a, dtype=np.float32)
    f.write("shape " + " ".join(str(d) for d in a.shape) + "\n")
    f.write(" ".join("%.9g" % v for v in a.reshape(-1)) + "\n")


def save(name, model, x, rng):
    # Random weights everywhere (batch-norm statistics too, variances positive), so that no value
    # is an initial one that a wrong mapping could still match.
    weights = []
    for w in model.weights:
        lo = 0.5 if "variance" in w.path else -0.5
        weights.append(rng.uniform(lo, 1.0, size=w.shape).astype(np.float32))
    model.set_weights(weights)
    write_files(HERE, name, model, x)


def write_files(out, name, model, x):
    """NAME.json, NAME.weights.h5 and NAME_io.txt (the input and Keras' prediction) in out."""
    with open(os.path.join(out, name + ".json"), "w") as f:
        f.write(model.to_json())
    model.save_weights(os.path.join(out, name + ".weights.h5"))
    y = model.predict(x, verbose=0)
    with open(os.path.join(out, name + "_io.txt"), "w") as f:
        write_tensor(f, x)
        write_tensor(f, y)


def main():
    keras.utils.set_random_seed(1234)
    rng = np.random.default_rng(7)

    # An MLP: Dense with activations, Dropout (inactive in predict), a softmax output.
    mlp = keras.Sequential(
        [
            keras.Input(shape=(5,)),
            layers.Dense(8, activation="relu"),
            layers.Dropout(0.25),
            layers.Dense(6, activation="tanh", kernel_initializer="he_normal"),
            layers.Dense(3, activation="softmax"),
        ],
        name="mlp",
    )
    x = rng.uniform(-1, 1, size=(6, 5)).astype(np.float32)
    save("mlp", mlp, x, rng)

    # A small channels_last CNN (Keras' default) with BatchNormalization over the last axis and a
    # Flatten whose (h, w, c) order the Dense kernel follows.
    cnn = keras.Sequential(
        [
            keras.Input(shape=(8, 8, 2)),
            layers.Conv2D(4, 3, padding="same", activation="relu"),
            layers.BatchNormalization(),
            layers.MaxPooling2D(2),
            layers.Conv2D(5, (2, 3), strides=1, padding="valid"),
            layers.AveragePooling2D(pool_size=2, strides=1, padding="same"),
            layers.Activation("relu"),
            layers.Flatten(),
            layers.Dense(3),
        ],
        name="cnn",
    )
    x = rng.uniform(-1, 1, size=(4, 8, 8, 2)).astype(np.float32)
    save("cnn", cnn, x, rng)
    # The same weights in the Keras 2 HDF5 layout (/model_weights, layer_names, weight_names).
    cnn.save(os.path.join(HERE, "cnn_legacy.h5"))

    # A transposed convolution, then global average pooling after a batch norm without scale.
    gap = keras.Sequential(
        [
            keras.Input(shape=(6, 5, 3)),
            layers.Conv2D(4, 3, activation="relu"),
            layers.Conv2DTranspose(3, (3, 2), strides=2, padding="same"),
            layers.BatchNormalization(scale=False),
            layers.GlobalAveragePooling2D(),
            layers.Dense(2),
        ],
        name="gap",
    )
    x = rng.uniform(-1, 1, size=(3, 6, 5, 3)).astype(np.float32)
    save("gap", gap, x, rng)
    # A functional model: two branches merged by Add and Concatenate.
    inp = keras.Input(shape=(4,), name="features")
    a = layers.Dense(6, activation="relu")(inp)
    b = layers.Dense(6, activation="sigmoid")(inp)
    s = layers.Add()([a, b])
    c = layers.Concatenate()([s, inp])
    out = layers.Dense(2)(c)
    fn = keras.Model(inp, out, name="functional")
    x = rng.uniform(-1, 1, size=(5, 4)).astype(np.float32)
    save("functional", fn, x, rng)
    print("wrote fixtures to", HERE, "with keras", keras.__version__, file=sys.stderr)


if __name__ == "__main__":
    main()
