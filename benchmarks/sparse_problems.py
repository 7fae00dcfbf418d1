"""The matrices and functions of the sparse benchmark's color table.

Patterns built by construction (banded, arrowhead, the 2-D five-point Laplacian,
random), patterns detected from functions (the Brusselator, Rosenbrock and CUTEst
problems, written here in array code after their SIF definitions in CUTEst), and
what is known about their colors by construction.

:func:`matrices` returns ``(name, pattern, symmetric, known)`` with ``known``
mapping a kind ("column", "row", "star", "acyclic") to ``(colors, reason)``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from array_api_compat import array_namespace as namespace

from diffiface.testing._sparse import brusselator, rosenbrock


# ---- CUTEst objectives (Hessians) and equations (Jacobians) ------------------------
def arwhead(x):
    xp = namespace(x)
    return xp.sum(-4.0 * x[:-1] + 3.0) + xp.sum((x[:-1] ** 2 + x[-1] ** 2) ** 2)


def bdqrtic(x):
    xp = namespace(x)
    a, b, c, d = x[:-4], x[1:-3], x[2:-2], x[3:-1]
    quad = a**2 + 2 * b**2 + 3 * c**2 + 4 * d**2 + 5 * x[-1] ** 2
    return xp.sum((-4.0 * a + 3.0) ** 2) + xp.sum(quad**2)


def _wood_pieces(x):
    return x[0:-3:2], x[1:-2:2], x[2:-1:2], x[3::2]


def chainwoo(x):
    xp = namespace(x)
    a, b, c, d = _wood_pieces(x)
    terms = (
        100 * (b - a**2) ** 2
        + (1 - a) ** 2
        + 90 * (d - c**2) ** 2
        + (1 - c) ** 2
        + 10 * (b + d - 2) ** 2
        + 0.1 * (b - d) ** 2
    )
    return 1.0 + xp.sum(terms)


def cragglvy(x):
    xp = namespace(x)
    a, b, c, d = _wood_pieces(x)
    terms = (
        (xp.exp(a) - b) ** 4
        + 100 * (b - c) ** 6
        + (xp.tan(c - d) + c - d) ** 4
        + a**8
        + (d - 1) ** 2
    )
    return xp.sum(terms)


def dqdrtic(x):
    xp = namespace(x)
    return xp.sum(100 * x[1:-1] ** 2 + 100 * x[2:] ** 2 + x[:-2] ** 2)


def edensch(x):
    xp = namespace(x)
    a, b = x[:-1], x[1:]
    return 16.0 + xp.sum((a - 2) ** 4 + (a * b - 2 * b) ** 2 + (b + 1) ** 2)


def freuroth(x):
    xp = namespace(x)
    a, b = x[:-1], x[1:]
    r1 = ((5 - b) * b - 2) * b + a - 13
    r2 = ((1 + b) * b - 14) * b + a - 29
    return xp.sum(r1**2 + r2**2)


def liarwhd(x):
    xp = namespace(x)
    return xp.sum(4 * (x**2 - x[0]) ** 2 + (x - 1) ** 2)


def nondia(x):
    xp = namespace(x)
    return (x[0] - 1) ** 2 + xp.sum(100 * (x[0] - x[:-1] ** 2) ** 2)


def powellsg(x):
    xp = namespace(x)
    a, b, c, d = x[0::4], x[1::4], x[2::4], x[3::4]
    return xp.sum((a + 10 * b) ** 2 + 5 * (c - d) ** 2 + (b - 2 * c) ** 4 + 10 * (a - d) ** 4)


def srosenbr(x):
    xp = namespace(x)
    a, b = x[0::2], x[1::2]
    return xp.sum(100 * (b - a**2) ** 2 + (1 - a) ** 2)


def tridia(x):
    xp = namespace(x)
    i = xp.arange(2, x.shape[0] + 1, dtype=x.dtype)
    return (x[0] - 1) ** 2 + xp.sum(i * (2 * x[1:] - x[:-1]) ** 2)


def broydn3d(x):
    """Broyden's tridiagonal equations (x_0 = x_{n+1} = 0)."""
    xp = namespace(x)
    z = x[:1] * 0
    left, right = xp.concat([z, x[:-1]]), xp.concat([x[1:], z])
    return (3 - 2 * x) * x - left - 2 * right + 1


def broydnbd(x):
    """Broyden's banded equations: each reads 5 neighbours below and 1 above."""
    xp = namespace(x)
    g = x * (1 + x)
    pad = xp.concat([g[:5] * 0, g, g[:1] * 0])
    n = x.shape[0]
    near = sum(pad[5 + k : 5 + k + n] for k in (-5, -4, -3, -2, -1, 1))
    return x * (2 + 5 * x**2) + 1 - near


CUTEST_HESSIANS = {
    "ARWHEAD": arwhead,
    "BDQRTIC": bdqrtic,
    "CHAINWOO": chainwoo,
    "CRAGGLVY": cragglvy,
    "DQDRTIC": dqdrtic,
    "EDENSCH": edensch,
    "FREUROTH": freuroth,
    "LIARWHD": liarwhd,
    "NONDIA": nondia,
    "POWELLSG": powellsg,
    "SROSENBR": srosenbr,
    "TRIDIA": tridia,
}
CUTEST_JACOBIANS = {"BROYDN3D": broydn3d, "BROYDNBD": broydnbd}

TRI = "tridiagonal: 3 (a path's star chromatic number; 3 nonzeros in a row)"
ARROW = "arrowhead: 2 (one hub color, one for the leaves)"
CYCLE = "4-cycles (a-b-c-d-a): 2 colors leave a two-colored path on 4 vertices"
KNOWN_CUTEST = {
    "ARWHEAD": {"star": (2, ARROW), "acyclic": (2, ARROW)},
    "DQDRTIC": {"star": (1, "diagonal"), "acyclic": (1, "diagonal")},
    "EDENSCH": {"star": (3, TRI)},
    "FREUROTH": {"star": (3, TRI)},
    "LIARWHD": {"star": (2, ARROW), "acyclic": (2, ARROW)},
    "NONDIA": {"star": (2, ARROW), "acyclic": (2, ARROW)},
    "POWELLSG": {"column": (4, "4x4 blocks whose columns all meet"), "star": (3, CYCLE)},
    "SROSENBR": {"star": (2, "dense 2x2 blocks"), "acyclic": (2, "dense 2x2 blocks")},
    "TRIDIA": {"star": (3, TRI)},
    "BROYDN3D": {k: (3, "tridiagonal: 3 nonzeros in a row") for k in ("column", "row")},
    "BROYDNBD": {k: (7, "band of 5 below, 1 above: 7 in a row") for k in ("column", "row")},
}


# ---- patterns by construction --------------------------------------------------------
def csr(a) -> sp.csr_array:
    p = sp.csr_array(a, dtype=bool)
    p.sum_duplicates()
    p.sort_indices()
    return p


def banded(n: int, b: int) -> sp.csr_array:
    return csr(
        sp.diags_array([np.ones(n - abs(k)) for k in range(-b, b + 1)], offsets=range(-b, b + 1))
    )


def arrowhead(n: int) -> sp.csr_array:
    a = sp.lil_array((n, n), dtype=bool)
    a.setdiag(True)
    a[0, :] = True
    a[:, 0] = True
    return csr(a)


def laplacian(k: int) -> sp.csr_array:
    """The five-point stencil on a k x k grid (Dirichlet boundary)."""
    path = sp.diags_array([np.ones(k - 1), np.ones(k), np.ones(k - 1)], offsets=(-1, 0, 1))
    eye = sp.eye_array(k)
    return csr(sp.kron(path, eye) + sp.kron(eye, path))


def random(m: int, n: int, density: float, seed: int, symmetric: bool) -> sp.csr_array:
    a = sp.random_array((m, n), density=density, rng=np.random.default_rng(seed))
    if symmetric:
        a = a + a.T + sp.eye_array(n)
    return csr(a)


def detected(f, n: int, hessian: bool) -> sp.csr_array:
    """f's global pattern from JAX's detector (exact for these functions)."""
    import jax.numpy as jnp

    import diffiface as di

    return csr(di.sparsity_pattern(f, di.AutoJax(), jnp.full(n, 0.7), hessian=hessian))


def _band_known(b: int) -> dict:
    known = {"column": (2 * b + 1, f"{2 * b + 1} nonzeros in a row; i mod {2 * b + 1}")}
    if b == 1:
        known["star"] = (3, TRI)
    return known


QUICK = ("banded", "arrowhead", "Laplacian 5-point 32x32", "random", "Brusselator N=32",
         "Rosenbrock", "ARWHEAD", "POWELLSG", "BROYDNBD")  # fmt: skip


def matrices(mode: str = "full") -> list:
    """(name, pattern, symmetric, known) for every matrix of the color table: "full",
    "quick" (a subset of full's, to compare with the same references) or "tiny"."""
    if mode == "quick":
        return [m for m in _matrices(False, QUICK) if m[0].startswith(QUICK) and "0.01" not in m[0]]
    return _matrices(mode == "tiny", None)


def _matrices(tiny: bool, only) -> list:
    n, k, grid = (60, 6, 8) if tiny else (1000, 32, 100)
    five = "5 nonzeros in a row; (i + 2j) mod 5 colors them"
    out = []
    for b in (1, 2, 5):
        out.append((f"banded n={n} b={b}", banded(n, b), True, _band_known(b)))
    arrow_known = {"column": (n, "a dense row")}
    arrow_known |= {"star": (2, ARROW), "acyclic": (2, ARROW)}
    out.append((f"arrowhead n={n}", arrowhead(n), True, arrow_known))
    for side in (k,) if only else (k, grid):
        lap = {"column": (5, five)}
        lap["star"] = (5, "the grid's star chromatic number (Fertin, Raspaud & Reed 2004)")
        lap["acyclic"] = (3, "the grid's acyclic chromatic number (Fertin, Raspaud & Reed 2004)")
        out.append((f"Laplacian 5-point {side}x{side}", laplacian(side), True, lap))
    for density in (0.002, 0.01):
        out.append((f"random {n}x{n} d={density}", random(n, n, density, 1, False), False, {}))
        out.append(
            (f"random {n // 2}x{n} d={density}", random(n // 2, n, density, 2, False), False, {})
        )
        out.append((f"random symmetric {n} d={density}", random(n, n, density, 3, True), True, {}))
    for side in (8,) if tiny else (32,) if only else (32, 48):
        bru = {"column": (6, "6 nonzeros in a row: a lower bound")}
        out.append(
            (f"Brusselator N={side}", detected(brusselator, 2 * side * side, False), False, bru)
        )
    out.append((f"Rosenbrock n={n}", detected(rosenbrock, n, True), True, {"star": (3, TRI)}))
    for name, f in CUTEST_HESSIANS.items():
        if only is not None and name not in only:
            continue
        out.append((f"{name} n={n}", detected(f, n, True), True, KNOWN_CUTEST.get(name, {})))
    for name, f in CUTEST_JACOBIANS.items():
        if only is not None and name not in only:
            continue
        out.append((f"{name} n={n}", detected(f, n, False), False, KNOWN_CUTEST.get(name, {})))
    return out
