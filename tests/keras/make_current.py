"""Writes the fixtures of tests/keras/current/ with today's Keras, the version pinned in
scripts/oracles.lock (its `fixtures` group), as a Keras user saves a model:
model.to_json() + model.save_weights("NAME.weights.h5").

    bash scripts/oracles.sh fixtures
    .oracles/bin/python tests/keras/make_current.py

Each model is an ordinary one built only from layers soma has, written the way Keras 3.13+
writes them (InputLayer's "optional", BatchNormalization's renorm fields, call arguments such as
{"mask": null} and {"training": false} in functional models, ...). For each NAME the files are
NAME.json, NAME.weights.h5 and NAME_io.txt (the inputs and Keras' predictions, as in
make_fixtures.py), and keras_version.txt says which Keras wrote them. The files are checked in;
tests/unit/test_keras_import.cpp reads every model listed in current/models.txt.
"""
import os

os.environ.setdefault("KERAS_BACKEND", "numpy")

import numpy as np  # noqa: E402
import keras  # noqa: E402
from keras import layers  # noqa: E402

from make_fixtures import write_files  # noqa: E402  (this folder: the same file formats)

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "current")


def save(name, model, x, rng, names):
    # Random weights everywhere (batch-norm variances positive), so that no value is an initial
    # one that a wrong mapping could still match; integer ones (a count) as they are.
    weights = []
    for w in model.weights:
        if "int" in str(w.dtype):  # Normalization's count: kept as adapt() left it
            weights.append(np.asarray(w.numpy()))
            continue
        lo = 0.5 if "variance" in w.path else -0.5
        weights.append(rng.uniform(lo, 1.0, size=w.shape).astype(np.float32))
    model.set_weights(weights)
    # Normalization computes its mean and variance from its variables here (as when Keras loads
    # a weights file), not in set_weights.
    for layer in model.layers:
        if isinstance(layer, layers.Normalization):
            layer.finalize_state()
    write_files(OUT, name, model, x)
    names.append(name)


def main():
    os.makedirs(OUT, exist_ok=True)
    keras.utils.set_random_seed(1234)
    rng = np.random.default_rng(11)
    names = []

    # The MLP a first Keras program writes: Input, Dense + activations (Keras 3's hard_sigmoid,
    # relu6(x + 3) / 6), Dropout, softmax.
    mlp = keras.Sequential(
        [
            keras.Input(shape=(6,)),
            layers.Dense(16, activation="relu"),
            layers.Dropout(0.2),
            layers.Dense(8),
            layers.ReLU(),
            layers.Dense(6, activation="hard_sigmoid"),
            layers.Dense(4, activation="softmax"),
        ]
    )
    save("mlp", mlp, rng.uniform(-1, 1, size=(5, 6)), rng, names)

    # Sequential with BatchNormalization (renorm fields) and LayerNormalization (rms_scaling).
    norm = keras.Sequential(
        [
            keras.Input(shape=(7,)),
            layers.Dense(12),
            layers.BatchNormalization(),
            layers.Activation("relu"),
            layers.Dense(9),
            layers.LayerNormalization(),
            layers.Dense(3),
        ]
    )
    save("norm", norm, rng.uniform(-1, 1, size=(4, 7)), rng, names)

    # A functional residual block: Dense, BatchNormalization and Dropout called in a graph (their
    # call arguments {"mask": null}, {"training": false} recorded), Add, a second input branch.
    inp = keras.Input(shape=(10,))
    h = layers.Dense(10)(inp)
    h = layers.BatchNormalization()(h)
    h = layers.Activation("relu")(h)
    h = layers.Dropout(0.1)(h)
    h = layers.Dense(10)(h)
    h = layers.Add()([h, inp])
    h = layers.ReLU()(h)
    out = layers.Dense(5, activation="softmax")(h)
    res = keras.Model(inp, out)
    save("residual", res, rng.uniform(-1, 1, size=(3, 10)), rng, names)

    # Recurrent layers (Keras 3 keeps their weights under layers/<name>/cell/vars): an LSTM
    # returning sequences into a GRU, and a SimpleRNN, over [batch, time, features].
    rnn = keras.Sequential(
        [
            keras.Input(shape=(5, 3)),
            layers.LSTM(6, return_sequences=True),
            layers.GRU(4),
            layers.Dense(2),
        ]
    )
    save("recurrent", rnn, rng.uniform(-1, 1, size=(2, 5, 3)), rng, names)
    simple = keras.Sequential(
        [
            keras.Input(shape=(4, 3)),
            layers.SimpleRNN(5),
            layers.Dense(2, activation="sigmoid"),
        ]
    )
    save("simple_rnn", simple, rng.uniform(-1, 1, size=(3, 4, 3)), rng, names)

    # An adapted Normalization (mean, variance and Keras' int64 count among its weights).
    adapted = layers.Normalization()
    adapted.adapt(rng.normal(2.0, 3.0, size=(64, 4)).astype(np.float32))
    pre = keras.Sequential([keras.Input(shape=(4,)), adapted, layers.Dense(3)])
    save("normalization", pre, rng.normal(2.0, 3.0, size=(3, 4)), rng, names)

    # Self-attention in a functional model (Keras 3 keeps MultiHeadAttention's weights under
    # query_dense/, key_dense/, value_dense/, output_dense/), with a residual and LayerNormalization.
    seq = keras.Input(shape=(6, 8))
    att = layers.MultiHeadAttention(num_heads=2, key_dim=4)(seq, seq)
    h = layers.LayerNormalization()(layers.Add()([seq, att]))
    out = layers.Dense(3)(h)
    attn = keras.Model(seq, out)
    save("attention", attn, rng.uniform(-1, 1, size=(2, 6, 8)), rng, names)

    with open(os.path.join(OUT, "models.txt"), "w") as f:
        f.write("\n".join(names) + "\n")
    with open(os.path.join(OUT, "keras_version.txt"), "w") as f:
        f.write(keras.__version__ + "\n")


if __name__ == "__main__":
    main()
