"""Which Array API functions have derivatives on which backend: the table of docs/array-api.md.

Each function is written once, ``xp = array_namespace(x)`` (array-api-compat), in
``f(x) = sum(w * op(x))`` with weights ``w = 1, 2, ...`` (a permuted derivative shows),
and its gradient on every installed backend is checked against central finite
differences of the NumPy version in float64 (rtol = atol = 1e-5; MLX's float64
transcendentals are float32-accurate, hence not tighter). A wrong value is printed
loudly: it is a diffiface or framework bug.

    python benchmarks/array_api_support.py           # print the table, write it into the page
    python benchmarks/array_api_support.py --check   # exit 1 when the page's table differs
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import pathlib
import re
import sys
import warnings

import numpy as np
from array_api_compat import array_namespace, size

import diffiface as di

PAGE = pathlib.Path(__file__).parents[1] / "docs" / "array-api.md"
MARKERS = ("<!-- array-api:start -->\n", "\n<!-- array-api:end -->")
TOL = 1e-5
STEP = 1e-5
VEC = np.array([0.3, 0.7, 0.45, 0.9])  # distinct, in (0, 1): log, sqrt, asin, sort, max
MAT = np.array([[0.9, 0.2, 0.1], [0.3, 0.8, 0.25], [0.15, 0.35, 0.7]])  # invertible
BACKENDS = {  # column -> (backend, the module it needs)
    "AutoJax": (di.AutoJax(), "jax"),
    "AutoTorch": (di.AutoTorch(), "torch"),
    "AutoAutograd": (di.AutoAutograd(), "autograd"),
    "AutoMLX": (di.AutoMLX(), "mlx"),
    "AutoFiniteDifferences": (di.AutoFiniteDifferences(), None),
}


def _spd(xp, a):  # a symmetric positive definite matrix built from a
    return a @ a.T


# name -> (op(xp, x), the point): the standard's elementwise math, reductions,
# linear algebra and manipulation functions that carry derivatives
OPS = {
    "sin": (lambda xp, x: xp.sin(x), VEC),
    "cos": (lambda xp, x: xp.cos(x), VEC),
    "tan": (lambda xp, x: xp.tan(x), VEC),
    "asin": (lambda xp, x: xp.asin(x), VEC),
    "atan": (lambda xp, x: xp.atan(x), VEC),
    "sinh": (lambda xp, x: xp.sinh(x), VEC),
    "tanh": (lambda xp, x: xp.tanh(x), VEC),
    "exp": (lambda xp, x: xp.exp(x), VEC),
    "expm1": (lambda xp, x: xp.expm1(x), VEC),
    "log": (lambda xp, x: xp.log(x), VEC),
    "log1p": (lambda xp, x: xp.log1p(x), VEC),
    "sqrt": (lambda xp, x: xp.sqrt(x), VEC),
    "square": (lambda xp, x: xp.square(x), VEC),
    "abs": (lambda xp, x: xp.abs(x - 0.5), VEC),
    "pow": (lambda xp, x: xp.pow(x, 1.0 + x), VEC),
    "divide": (lambda xp, x: xp.divide(x, 1.0 + x), VEC),
    "atan2": (lambda xp, x: xp.atan2(x, 1.0 - x), VEC),
    "hypot": (lambda xp, x: xp.hypot(x, 1.0 - x), VEC),
    "logaddexp": (lambda xp, x: xp.logaddexp(x, 2.0 * x), VEC),
    "maximum": (lambda xp, x: xp.maximum(x, 1.0 - x), VEC),
    "minimum": (lambda xp, x: xp.minimum(x, 1.0 - x), VEC),
    "clip": (lambda xp, x: xp.clip(x, 0.4, 0.8), VEC),
    "where": (lambda xp, x: xp.where(x > 0.5, xp.sin(x), x**2), VEC),
    "sum": (lambda xp, x: xp.sum(x**2, axis=0), MAT),
    "prod": (lambda xp, x: xp.prod(x, axis=1), MAT),
    "mean": (lambda xp, x: xp.mean(x**2, axis=1), MAT),
    "max": (lambda xp, x: xp.max(x, axis=0), MAT),
    "min": (lambda xp, x: xp.min(x, axis=1), MAT),
    "std": (lambda xp, x: xp.std(x, axis=1), MAT),
    "var": (lambda xp, x: xp.var(x, axis=0), MAT),
    "cumulative_sum": (lambda xp, x: xp.cumulative_sum(x**2), VEC),
    "cumulative_prod": (lambda xp, x: xp.cumulative_prod(x), VEC),
    "matmul": (lambda xp, x: xp.matmul(x, xp.sin(x)), MAT),
    "vecdot": (lambda xp, x: xp.vecdot(x, xp.sin(x)), MAT),
    "tensordot": (lambda xp, x: xp.tensordot(x, xp.sin(x), axes=1), MAT),
    "matrix_transpose": (lambda xp, x: xp.matrix_transpose(x) @ xp.sin(x), MAT),
    "linalg.vector_norm": (lambda xp, x: xp.linalg.vector_norm(x, axis=1), MAT),
    "linalg.matrix_norm": (lambda xp, x: xp.linalg.matrix_norm(x), MAT),
    "linalg.solve": (lambda xp, x: xp.linalg.solve(x, xp.sin(x)), MAT),
    "linalg.inv": (lambda xp, x: xp.linalg.inv(x), MAT),
    "linalg.det": (lambda xp, x: xp.linalg.det(x), MAT),
    "linalg.slogdet": (lambda xp, x: xp.linalg.slogdet(x)[1], MAT),
    "linalg.cholesky": (lambda xp, x: xp.linalg.cholesky(_spd(xp, x)), MAT),
    "linalg.eigvalsh": (lambda xp, x: xp.linalg.eigvalsh(_spd(xp, x)), MAT),
    "linalg.svdvals": (lambda xp, x: xp.linalg.svdvals(x), MAT),
    "linalg.trace": (lambda xp, x: xp.linalg.trace(x @ x), MAT),
    "concat": (lambda xp, x: xp.concat([x, xp.sin(x)]), VEC),
    "stack": (lambda xp, x: xp.stack([x, xp.sin(x)], axis=1), VEC),
    "reshape": (lambda xp, x: xp.reshape(x, (2, 2)) @ xp.reshape(x, (2, 2)), VEC),
    "take": (lambda xp, x: xp.take(x, xp.asarray([2, 0, 0, 3])), VEC),
    "sort": (lambda xp, x: xp.sort(xp.sin(3.0 * x)), VEC),
    "flip": (lambda xp, x: xp.flip(x) * x, VEC),
    "roll": (lambda xp, x: xp.roll(x, 1) * x, VEC),
    "permute_dims": (lambda xp, x: xp.permute_dims(x, (1, 0)) @ x, MAT),
    "expand_dims": (lambda xp, x: xp.expand_dims(x, axis=1) * x, VEC),
    "broadcast_to": (lambda xp, x: xp.broadcast_to(x, (3, 4)) * x, VEC),
}


@functools.cache
def loss(name, column=""):
    """f(x) = sum(w * op(x)), written once for every namespace. One f per column: f
    closes over the column's name, so each cell stands alone (diffiface remembers the
    one direction f supports per f's code, across frameworks: what autograd lacks sent
    MLX's gradient to forward mode, where MLX lacks cumulative_prod's JVP)."""
    op = OPS[name][0]

    def f(x):
        assert column is not None  # f's code reads the column: its facts are the column's
        xp = array_namespace(x)
        y = op(xp, x)
        w = xp.reshape(xp.arange(1, size(y) + 1, dtype=y.dtype), y.shape)
        return xp.sum(w * y)

    return f


def reference(name):
    """Central finite differences of the NumPy version, float64."""
    f, x = loss(name), OPS[name][1]
    g = np.empty(x.size)
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = STEP
        e = e.reshape(x.shape)
        g[i] = (float(f(x + e)) - float(f(x - e))) / (2 * STEP)
    return g.reshape(x.shape)


def _why(exc):
    """The short reason a gradient failed: missing in the namespace, or no derivative."""
    if "in neither" in str(exc) and exc.__cause__ is not None:
        exc = exc.__cause__  # (no derivative in either direction: the framework's own)
    text = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
    if isinstance(exc, AttributeError):
        return "missing", text
    return "no derivative", text


def cell(name, column, backend, want):
    """(mark, detail) of one function on one backend."""
    f, x = loss(name, column), OPS[name][1]
    try:
        with warnings.catch_warnings():  # one call per f and backend: no compilation to reuse
            warnings.simplefilter("ignore", di.RecompileWarning)
            got = np.asarray(di.gradient(f, backend, x), dtype=np.float64)
    except Exception as exc:  # every failure is a table cell, with its reason
        reason, text = _why(exc)
        return f"✗ {reason}", text
    if np.allclose(got, want, rtol=TOL, atol=TOL):
        return "✓", ""
    err = np.max(np.abs(got - want))
    return "✗ **wrong value**", f"max error {err:.1e} (tolerance {TOL:.0e})"


def backends():
    """The installed columns."""
    have = lambda m: m is None or importlib.util.find_spec(m) is not None  # noqa: E731
    return {col: b for col, (b, m) in BACKENDS.items() if have(m)}


def table(names=tuple(OPS), columns=None):
    """The markdown table, and the details of each ✗ cell."""
    columns = backends() if columns is None else columns
    rows = ["| function | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    details = []
    for name in names:
        want = reference(name)
        marks = []
        for col, b in columns.items():
            mark, detail = cell(name, col, b, want)
            marks.append(mark)
            if detail:
                details.append(f"- `{name}` on {col}: {detail}")
                if "wrong" in mark:
                    print(f"WRONG VALUE: {name} on {col}: {detail}", file=sys.stderr)
        rows.append(f"| `{name}` | " + " | ".join(marks) + " |")
    return "\n".join(rows) + "\n\nWhy each ✗:\n\n" + "\n".join(details)


def write(text, check):
    page = PAGE.read_text()
    pattern = re.escape(MARKERS[0]) + "(.*?)" + re.escape(MARKERS[1])
    found = re.search(pattern, page, re.S)
    if check:
        return 0 if found.group(1) == text else 1
    PAGE.write_text(page[: found.start(1)] + text + page[found.end(1) :])
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the page only")
    args = parser.parse_args()
    if len(backends()) < len(BACKENDS):
        sys.exit("the table lists every backend: install jax, torch, autograd and mlx")
    text = table()
    print(text)
    code = write(text, args.check)
    if "wrong value" in text:
        sys.exit("WRONG VALUES in the table (see above): a diffiface or framework bug")
    sys.exit(code)


if __name__ == "__main__":
    import jax

    jax.config.update("jax_enable_x64", True)
    main()
