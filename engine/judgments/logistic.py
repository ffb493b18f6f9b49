"""Penalised logistic regression by Newton's method, pure numpy: the solver the probe
(`engine.judgments.learning`) and its Platt calibration (`engine.judgments.calibration`) share."""

from __future__ import annotations

import numpy as np


def sigmoid(x: np.ndarray) -> np.ndarray:
    """The logistic function, written through tanh so that large |x| does not overflow."""
    out: np.ndarray = 0.5 * (1.0 + np.tanh(0.5 * np.asarray(x, dtype=np.float64)))
    return out


def fit_map(
    offset: np.ndarray,
    features: np.ndarray,
    targets: np.ndarray,
    precision: np.ndarray,
    theta: np.ndarray,
    max_iter: int,
    tol: float,
) -> tuple[np.ndarray, float, int]:
    """Newton's method with backtracking on the (convex) penalised cross-entropy: the optimum,
    the objective there, and the iterations taken."""

    def objective(t: np.ndarray) -> float:
        z = offset + features @ t
        # log(1 + e^z) - target * z, written so that large |z| does not overflow
        loss = np.logaddexp(0.0, z) - targets * z
        return float(loss.sum() + 0.5 * np.dot(precision * t, t))

    current = objective(theta)
    iterations = 0
    for _ in range(max_iter):
        iterations += 1
        p = sigmoid(offset + features @ theta)
        gradient = features.T @ (p - targets) + precision * theta
        step = newton_step(features, p * (1 - p), precision, gradient)
        size = 1.0
        while True:
            candidate = theta - size * step
            value = objective(candidate)
            if value <= current + 1e-12 or size < 1e-6:
                break
            size *= 0.5
        theta, previous, current = candidate, current, value
        if float(np.max(np.abs(size * step))) < tol or previous - current < tol * max(1.0, current):
            break
    return theta, current, iterations


def newton_step(
    features: np.ndarray, curvature: np.ndarray, precision: np.ndarray, gradient: np.ndarray
) -> np.ndarray:
    """Solve (D + F' W F) step = gradient, with D = diag(precision), W = diag(curvature).

    With fewer judgments than dimensions, through Woodbury: D^-1 g - D^-1 F' S (I + S F D^-1 F'
    S)^-1 S F D^-1 g with S = W^1/2, an n x n solve instead of a d x d one."""
    n, dim = features.shape
    if n < dim:
        inverse = 1.0 / precision
        scaled = features * np.sqrt(curvature)[:, None]  # S F
        inner = np.eye(n) + (scaled * inverse) @ scaled.T
        projected = scaled @ (inverse * gradient)
        solved = np.linalg.solve(inner, projected)
        step: np.ndarray = inverse * gradient - inverse * (scaled.T @ solved)
        return step
    hessian = (features * curvature[:, None]).T @ features + np.diag(precision)
    direct: np.ndarray = np.linalg.solve(hessian, gradient)
    return direct
