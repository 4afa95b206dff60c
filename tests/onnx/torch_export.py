#!/usr/bin/python3
"""Exports small PyTorch models with torch.onnx.export for soma's interop test.

Usage: /usr/bin/python3 torch_export.py OUTDIR

Writes, for each model NAME (mlp, cnn, ..., bigru, and issue 25's transformer,
  mha, gpt2, embed, upsample, convt, groupnorm):
  NAME.onnx     the model, exported in eval mode with a dynamic batch axis
  NAME_x.bin    a reference input, float32 little-endian, row-major (int64 for embed)
  NAME_y.bin    PyTorch's output for that input, float32
  NAME.shape    one line "x d0 d1 ..." and one line "y d0 d1 ..."
and, when torchvision is importable, resnet18 and mobilenet_v2 (random weights).
Exit status 77 when torch (or onnx) cannot be imported, so the test can skip.
"""
import os
import sys

try:
    import torch
    from torch import nn
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"torch is not importable: {e}")
    sys.exit(77)


class LastStep(nn.Module):
    """A recurrent layer followed by a linear head on the last step's output."""

    def __init__(self, rnn, units, classes):
        super().__init__()
        self.rnn = rnn
        self.head = nn.Linear(units, classes)

    def forward(self, x):
        y, _ = self.rnn(x)
        return self.head(y[:, -1, :])


class GPT2Block(nn.Module):
    """A GPT-2-style pre-norm decoder block: causal self-attention written out by hand
    (a fused qkv projection, a lower-triangular mask filled with -inf) and a GELU MLP."""

    def __init__(self, d, heads, ctx):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))
        self.register_buffer("mask", torch.tril(torch.ones(ctx, ctx)).view(1, 1, ctx, ctx))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (d // self.heads) ** 0.5)
        att = att.masked_fill(self.mask[:, :, :t, :t] == 0, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class SelfAttention(nn.Module):
    """nn.MultiheadAttention used as self-attention (batch_first), its weights discarded."""

    def __init__(self, d, heads):
        super().__init__()
        self.mha = nn.MultiheadAttention(d, heads, batch_first=True)

    def forward(self, x):
        return self.mha(x, x, x, need_weights=False)[0]


class EmbedNorm(nn.Module):
    """Token ids (int64) -> nn.Embedding -> nn.LayerNorm."""

    def __init__(self, vocab, d):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.ln = nn.LayerNorm(d)

    def forward(self, ids):
        return self.ln(self.emb(ids))


def models():
    torch.manual_seed(0)
    mlp = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(),
                        nn.Linear(16, 4))
    cnn = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(4, 8, 3, stride=1), nn.Sigmoid(), nn.AvgPool2d(2),
        nn.Flatten(), nn.Linear(8 * 1 * 1, 3), nn.Softmax(dim=1))
    cnn2 = nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1, stride=2), nn.ReLU(), nn.Dropout(0.3),
        nn.Conv2d(6, 6, 3, padding=1, groups=2), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 5))
    deconv = nn.Sequential(
        nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1), nn.GELU(),
        nn.ConvTranspose2d(4, 2, (2, 3), stride=2), nn.LeakyReLU(0.1), nn.ELU(0.5))
    norm = nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.Softplus(), nn.Linear(8, 3),
                         nn.LogSoftmax(dim=1))
    hard = nn.Sequential(nn.Linear(6, 8), nn.ReLU6(), nn.Linear(8, 8), nn.Hardsigmoid(),
                         nn.Linear(8, 4), nn.Hardswish())
    rnn = LastStep(nn.RNN(5, 6, batch_first=True), 6, 3)
    lstm = LastStep(nn.LSTM(5, 7, batch_first=True), 7, 3)
    gru = LastStep(nn.GRU(5, 6, batch_first=True), 6, 3)
    bilstm = LastStep(nn.LSTM(5, 4, batch_first=True, bidirectional=True), 8, 3)
    bigru = LastStep(nn.GRU(5, 4, batch_first=True, bidirectional=True), 8, 3)
    # BatchNorm statistics that are not the defaults, so that they matter.
    with torch.no_grad():
        for bn in (cnn[1], mlp[1]):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 1.5)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.2, 0.2)
    layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, dropout=0.1, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    mha = SelfAttention(16, 4)
    gpt2 = GPT2Block(16, 4, 8)
    embed = EmbedNorm(20, 12)
    with torch.no_grad():
        embed.ln.weight.uniform_(0.5, 1.5)
        embed.ln.bias.uniform_(-0.2, 0.2)
    upsample = nn.Sequential(nn.Upsample(scale_factor=2, mode="nearest"), nn.Conv2d(2, 3, 3, padding=1),
                             nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False))
    convt = nn.Sequential(nn.ConvTranspose2d(3, 5, 4, stride=2, padding=1), nn.ReLU(),
                          nn.ConvTranspose2d(5, 2, 3, stride=(1, 2), padding=(1, 0), dilation=(2, 1)))
    groupnorm = nn.Sequential(nn.Conv2d(4, 6, 3, padding=1), nn.GroupNorm(3, 6), nn.SiLU())
    with torch.no_grad():
        groupnorm[1].weight.uniform_(0.5, 1.5)
        groupnorm[1].bias.uniform_(-0.2, 0.2)
    # name: (model, reference input, opset)
    return {
        "mlp": (mlp, torch.randn(5, 8), 14),
        "cnn": (cnn, torch.randn(4, 1, 8, 8), 14),
        "cnn2": (cnn2, torch.randn(3, 3, 10, 10), 14),
        "deconv": (deconv, torch.randn(3, 3, 5, 4), 14),
        "norm": (norm, torch.randn(4, 6), 17),
        "hard": (hard, 4 * torch.randn(5, 6), 14),
        "rnn": (rnn, torch.randn(4, 6, 5), 14),
        "lstm": (lstm, torch.randn(4, 6, 5), 14),
        "gru": (gru, torch.randn(4, 6, 5), 14),
        "bilstm": (bilstm, torch.randn(4, 6, 5), 14),
        "bigru": (bigru, torch.randn(4, 6, 5), 14),
        # Issue 25's seven, at opset 17 (the highest torch 1.13 writes).
        "transformer": (encoder, torch.randn(3, 7, 16), 17),
        "mha": (mha, torch.randn(3, 5, 16), 17),
        "gpt2": (gpt2, torch.randn(3, 8, 16), 17),
        "embed": (embed, torch.randint(0, 20, (3, 6)), 17),
        "upsample": (upsample, torch.randn(3, 2, 4, 5), 17),
        "convt": (convt, torch.randn(3, 3, 5, 4), 17),
        "groupnorm": (groupnorm, torch.randn(3, 4, 5, 6), 17),
        **torchvision_models(),
    }


def torchvision_models():
    """Issue 24's imported models, when torchvision is importable (else none: the tests that
    read them skip): ResNet-18 and MobileNetV2 with random weights and non-default batch-norm
    statistics, at 224x224."""
    try:
        import torchvision
    except ImportError:
        return {}
    out = {}
    for name, make in (("resnet18", torchvision.models.resnet18),
                       ("mobilenet_v2", torchvision.models.mobilenet_v2)):
        model = make()
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, nn.BatchNorm2d):
                    m.running_mean.uniform_(-0.1, 0.1)
                    m.running_var.uniform_(0.5, 1.5)
        out[name] = (model, torch.randn(2, 3, 224, 224), 14)
    return out


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, (model, x, opset) in models().items():
        model.eval()
        with torch.no_grad():
            y = model(x)
        path = os.path.join(out, name + ".onnx")
        torch.onnx.export(model, x, path, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
                          opset_version=opset)
        # Token ids stay int64 (NAME.shape says so); everything else is float32.
        xtype = "<i8" if x.dtype == torch.int64 else "<f4"
        x.numpy().astype(xtype).tofile(os.path.join(out, name + "_x.bin"))
        y.numpy().astype("<f4").tofile(os.path.join(out, name + "_y.bin"))
        with open(os.path.join(out, name + ".shape"), "w") as f:
            f.write("x " + " ".join(str(d) for d in x.shape) + "\n")
            f.write("y " + " ".join(str(d) for d in y.shape) + "\n")
            if x.dtype == torch.int64:
                f.write("xtype i64\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
