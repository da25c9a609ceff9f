"""The data set of logistic-regression.js, in Python: the same rows, for checking the job's result.

``generate(rows, dims, seed)`` draws exactly what the job's input function draws: mulberry32 (a
32-bit integer generator, bit-identical here), Box-Muller normals (within an ulp or so of the
browser's: libm and V8 may round ``log`` and ``cos`` differently) and two classes, each row's label
a fair coin and its features unit normals around +0.4 (label 1) or -0.4 (label 0) in every
dimension. The best possible accuracy is Phi(0.4 * sqrt(dims)), about 0.897 for 10 dimensions.

    python docs/examples/logreg_data.py    # prints scikit-learn's training accuracy on the job's data
"""

from __future__ import annotations

import math

ROWS, DIMS, SEED = 8000, 10, 42  # as in logistic-regression.js


def mulberry32(seed: int):
    a = seed & 0xFFFFFFFF

    def random() -> float:
        nonlocal a
        a = (a + 0x6D2B79F5) & 0xFFFFFFFF
        t = ((a ^ (a >> 15)) * (a | 1)) & 0xFFFFFFFF
        t = ((t + (((t ^ (t >> 7)) * (t | 61)) & 0xFFFFFFFF)) & 0xFFFFFFFF) ^ t
        return ((t ^ (t >> 14)) & 0xFFFFFFFF) / 4294967296

    return random


def generate(rows: int = ROWS, dims: int = DIMS, seed: int = SEED) -> tuple[list[list[float]], list[int]]:
    """(X, y): ``rows`` lists of ``dims`` floats and their labels (0 or 1)."""
    random = mulberry32(seed)

    def normal() -> float:  # Box-Muller, the log's draw first as in JS
        return math.sqrt(-2 * math.log(1 - random())) * math.cos(2 * math.pi * random())

    X: list[list[float]] = []
    y: list[int] = []
    for _ in range(rows):
        label = 1 if random() < 0.5 else 0
        X.append([normal() + (0.4 if label else -0.4) for _ in range(dims)])
        y.append(label)
    return X, y


def accuracy(weights: list[float], X: list[list[float]], y: list[int]) -> float:
    """The share of rows a linear model classifies right: ``weights`` as the job emits them, one per
    dimension and the bias last; a row is labelled 1 when its score is positive."""
    *w, bias = weights
    scores = [sum(a * b for a, b in zip(w, row, strict=True)) + bias for row in X]
    return sum((score > 0) == bool(label) for score, label in zip(scores, y, strict=True)) / len(y)


if __name__ == "__main__":
    from sklearn.linear_model import LogisticRegression

    X, y = generate()
    model = LogisticRegression().fit(X, y)
    print(f"scikit-learn training accuracy: {model.score(X, y):.4f}")
    print("weights (bias last):", [round(float(v), 4) for v in [*model.coef_[0], model.intercept_[0]]])
