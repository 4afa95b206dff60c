#!/usr/bin/env python3
"""Derives the Winograd F(2x2, 5x5) matrices of src/backend/cpu/conv_winograd.cpp and compares
interpolation points by the f32 error of the whole pipeline (filter transform in f64, input
transform, element-wise products summed over C channels, output transform in f32) against an f64
direct convolution. Needs sympy and numpy; not part of the build or the tests.

Cook-Toom with the point at infinity: A^T[i][j] = p_j^i, G[j][k] = p_j^k / prod_{l != j}(p_j - p_l)
(the infinity column / row pick the highest coefficient), B^T solved exactly from
y_i = sum_k g_k d_{i+k}.
"""
from fractions import Fraction as Fr
import sys

import numpy as np
import sympy as sp

M, R = 2, 5
N = M + R - 1


def matrices(points):
    pts = [sp.Rational(p) for p in points]
    at, g = sp.zeros(M, N), sp.zeros(N, R)
    for j, p in enumerate(pts):
        for i in range(M):
            at[i, j] = p**i
        den = sp.prod([p - q for q in pts if q != p])
        for k in range(R):
            g[j, k] = p**k / den
    at[M - 1, N - 1] = 1
    g[N - 1, R - 1] = 1
    bt = sp.zeros(N, N)
    for t in range(N):
        x = sp.Matrix(sp.symbols("b0:%d" % N))
        eqs = [sum(at[i, j] * g[j, k] * x[j] for j in range(N)) - (1 if t == i + k else 0)
               for i in range(M) for k in range(R)]
        sol = sp.solve(eqs, list(x), dict=True)
        assert len(sol) == 1, (points, t)
        for j in range(N):
            bt[j, t] = sol[0][x[j]]
    return at, g, bt


def error(at, g, bt, channels=32, trials=600, seed=1):
    """Median and largest max|y - ref| / rms(ref) over random tiles."""
    rng = np.random.default_rng(seed)
    a64, g64, b64 = (np.array(m.tolist(), dtype=np.float64) for m in (at, g, bt))
    a32, b32 = a64.astype(np.float32), b64.astype(np.float32)
    errs = []
    for _ in range(trials):
        d = rng.standard_normal((channels, N, N)).astype(np.float32)
        w = (rng.standard_normal((channels, R, R)) / np.sqrt(channels * R * R)).astype(np.float32)
        ref = np.zeros((M, M))
        for i in range(M):
            for j in range(M):
                ref[i, j] = np.sum(w.astype(np.float64) * d[:, i:i + R, j:j + R])
        u = np.einsum("ik,ckl,jl->cij", g64, w.astype(np.float64), g64).astype(np.float32)
        v = np.einsum("ik,ckl,jl->cij", b32, d, b32).astype(np.float32)
        y = (a32 @ np.sum(u * v, axis=0, dtype=np.float32) @ a32.T).astype(np.float32)
        errs.append(np.max(np.abs(y - ref)) / np.sqrt(np.mean(ref**2)))
    return np.median(errs), np.max(errs)


if __name__ == "__main__":
    for pts in ([0, 1, -1, 2, -2], [0, 1, -1, Fr(1, 2), Fr(-1, 2)], [0, 1, -1, 2, Fr(-1, 2)],
                [0, 1, -1, Fr(1, 2), -2], [0, 1, -1, 2, Fr(1, 2)]):
        at, g, bt = matrices(pts)
        print([str(p) for p in pts] + ["inf"], "error / rms: median %.2e, largest %.2e"
              % error(at, g, bt))
    at, g, bt = matrices([0, 1, -1, 2, Fr(-1, 2)])  # the points conv_winograd.cpp uses
    print("A^T", at.tolist(), "\nG", g.tolist(), "\nB^T", bt.tolist())
