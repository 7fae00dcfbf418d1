"""Colors: diffiface's colorings against SparseMatrixColorings.jl's and ColPack's.

Every kind and order that ``diffiface.sparse.coloring`` lists (``KINDS``, ``ORDERS``)
colors every matrix of :mod:`sparse_problems`; each coloring is checked valid where
``check_coloring`` knows its kind. The references come from sparse_reference.json
(written by ``python sparse_colors.py --reference`` with asdex 0.5.1 installed; its
"sources" say where each number comes from) and from the matrices' construction.

Run alone: ``python benchmarks/sparse_colors.py [--tiny]`` prints the table.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

import numpy as np
from sparse_problems import matrices

from diffiface._errors import DiffifaceTypeError, DiffifaceValueError
from diffiface.sparse import coloring as col

REFERENCE = pathlib.Path(__file__).with_name("sparse_reference.json")
SYMMETRIC = ("star", "acyclic")  # kinds for a symmetric (Hessian) pattern
REFS = ("SMC natural", "SMC largest_first", "ColPack natural", "ColPack largest_first")
SOURCES = {
    "known": "by construction: the reason is given beside the number",
    "SMC natural": "SparseMatrixColorings.jl's GreedyColoringAlgorithm(NaturalOrder()), "
    "computed with asdex 0.5.1's port of its kernels (partial distance-2 coloring, star "
    "coloring Algorithm 4.1, postprocessing off as in SMC's default); asdex's colors equal "
    "SMC's on tests/sparse/test_coloring.py::test_same_colors_as_asdex",
    "SMC largest_first": "the same with LargestFirst() (asdex's own order)",
    "ColPack natural": "equal to SMC natural: SMC's test/colpack.jl asserts that its natural "
    "order star coloring gives ColPack's colors, and test/suitesparse.jl that its partial "
    "distance-2 colorings give the counts of ColPack's paper (Tables VI-VII: N, LF, SL, ID, "
    "DLF orders)",
    "ColPack largest_first": "equal to SMC largest_first for column and row colorings "
    "(test/suitesparse.jl, as above); not established for star colorings",
}


def kinds_of(symmetric: bool) -> list:
    """The kinds to run on a pattern: columns always; rows and the other Jacobian kinds
    (bicolorings) for a general pattern; the symmetric kinds for a symmetric one."""
    kinds = list(getattr(col, "KINDS", ("column", "row", "star")))
    wanted = [k for k in kinds if any(s in k for s in SYMMETRIC)] if symmetric else []
    if not symmetric:
        wanted = [k for k in kinds if not any(s in k for s in SYMMETRIC)]
    return (["column"] if "column" not in wanted else []) + wanted


def orders() -> list:
    return list(getattr(col, "ORDERS", ("largest_first", "natural", "smallest_last")))


def count(colors) -> int:
    """The colors a coloring uses: distinct nonnegative colors (a negative color marks
    a vertex that needs none), summed over the parts of a bicoloring."""
    for attr in ("ncolors", "num_colors"):
        got = getattr(colors, attr, None)
        if got is not None:
            return int(got() if callable(got) else got)
    if isinstance(colors, (tuple, list)):
        return sum(count(c) for c in colors)
    c = np.asarray(colors)
    return int(np.unique(c[c >= 0]).size)


def color_one(pattern, kind, order):
    """(colors, seconds) of one coloring; (None, error) when diffiface refuses it."""
    t0 = time.perf_counter()
    try:
        got = col.coloring(pattern, kind, order)
    except Exception as e:  # a kind that does not take this order: shown as "—"
        return None, f"{type(e).__name__}: {e}"
    seconds = time.perf_counter() - t0
    if not _valid(pattern, got, kind):
        raise AssertionError(f"{kind} coloring in order {order} is not valid")
    return count(got), seconds


def _valid(pattern, colors, kind) -> bool:
    """check_coloring's verdict; True for a kind it does not check (yet)."""
    try:
        return bool(col.check_coloring(pattern, colors, kind))
    except (DiffifaceTypeError, DiffifaceValueError):
        if kind in ("column", "row", "star"):
            raise
        return True


def references() -> dict:
    if not REFERENCE.exists():
        return {}
    return json.loads(REFERENCE.read_text())["matrices"]


def _bases(kind: str) -> list:
    """The reference kinds a kind is held to: itself; star for the symmetric ones
    (acyclic); the better of column and row for the other Jacobian ones (bicolorings)."""
    if kind in ("column", "row", "star"):
        return [kind]
    return ["star"] if any(s in kind for s in SYMMETRIC) else ["column", "row"]


def _ref(stored: dict, kind, name: str):
    got = stored.get(kind, {}).get(name)
    return "—" if got is None else got


def _pair(a, b) -> str:
    return f"{a} / {b}"


def table(mode: str = "full") -> dict:
    """The color table: header, rows and notes."""
    refs = references()
    ords = orders()
    header = ["matrix", "n", "nnz", "kind", "known", "SMC (N / LF)", "ColPack (N / LF)"]
    header += [f"diffiface {o}" for o in ords] + ["diffiface best", "≤ SMC and ColPack"]
    rows, seconds, reasons = [], 0.0, set()
    for name, p, symmetric, known in matrices(mode):
        reasons |= {reason for _, reason in known.values()}
        stored = refs.get(name, {})
        if stored and stored.get("nnz") != int(p.nnz):
            stored = {}  # built differently from the stored reference: not compared
        for kind in kinds_of(symmetric):
            got = [color_one(p, kind, o) for o in ords]
            seconds += sum(s for c, s in got if c is not None)
            counts = [c for c, _ in got if c is not None]
            best = min(counts) if counts else None
            k = known.get(kind)
            shown = kind if kind in ("column", "row", "star") else None
            smc = [_ref(stored, shown, r) for r in REFS[:2]]
            colpack = [_ref(stored, shown, r) for r in REFS[2:]]
            numbers = [stored.get(b, {}).get(r) for b in _bases(kind) for r in REFS]
            numbers = [v for v in numbers if v is not None]
            ok = "—" if best is None or not numbers else ("✓" if best <= min(numbers) else "✗")
            rows.append(
                [name, p.shape[1], p.nnz, kind, "—" if k is None else k[0]]
                + [_pair(*smc), _pair(*colpack)]
                + ["—" if c is None else c for c, _ in got]
                + ["—" if best is None else best, ok]
            )
    return {"header": header, "rows": rows, "coloring_seconds": seconds, "known": sorted(reasons)}


# ---- writing the reference file (needs asdex) -----------------------------------------
def _asdex_counts(p, symmetric: bool) -> dict:
    """SMC's counts in natural and largest-first order, through asdex's port."""
    from asdex.coloring._color_greedy import _largest_first_order, _partial_distance2_coloring
    from asdex.coloring._color_symmetric import _star_coloring_core
    from asdex.coloring._graph import _build_csr, _build_edge_to_index, _build_symmetric_csr

    q = p.tocoo()
    r, c = q.row.astype(np.int32), q.col.astype(np.int32)
    m, n = p.shape
    out = {}
    sides = {"column": (c, r, n, m)} if symmetric else {"column": (c, r, n, m), "row": (r, c, m, n)}
    for kind, (a, b, na, nb) in sides.items():
        a_ptr, a_nbr = _build_csr(a, b, na)
        b_ptr, b_nbr = _build_csr(b, a, nb)
        lf = _largest_first_order(na, a_ptr, a_nbr, b_ptr, b_nbr)
        out[kind] = {}
        for label, order in (("natural", np.arange(na)), ("largest_first", lf)):
            _, k = _partial_distance2_coloring(na, a_ptr, a_nbr, b_ptr, b_nbr, order)
            out[kind][f"SMC {label}"] = out[kind][f"ColPack {label}"] = int(k)
    if symmetric:
        indptr, nbrs, _ = _build_symmetric_csr(r, c, n)
        edges = _build_edge_to_index(indptr, nbrs)
        lf = np.argsort(-(indptr[1:] - indptr[:-1]), kind="stable").astype(np.int64)
        out["star"] = {}
        for label, order in (("natural", np.arange(n, dtype=np.int64)), ("largest_first", lf)):
            got = _star_coloring_core(
                n, len(nbrs) // 2, indptr, nbrs, edges, order, np.empty(0, np.int32), False
            )
            out["star"][f"SMC {label}"] = int(got[4])
        out["star"]["ColPack natural"] = out["star"]["SMC natural"]
    return out


def write_reference() -> None:
    from importlib.metadata import version

    stored = {}
    for name, p, symmetric, known in matrices("full"):
        entry = {"shape": list(p.shape), "nnz": int(p.nnz), **_asdex_counts(p, symmetric)}
        entry["known"] = {k: {"colors": v[0], "reason": v[1]} for k, v in known.items()}
        stored[name] = entry
        print(name, {k: v for k, v in entry.items() if k not in ("shape", "known")}, flush=True)
    doc = {"sources": {**SOURCES, "asdex": f"asdex {version('asdex')}"}, "matrices": stored}
    REFERENCE.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    if "--reference" in sys.argv:
        write_reference()
    else:
        t = table("tiny" if "--tiny" in sys.argv else "full")
        print(" | ".join(t["header"]))
        for r in t["rows"]:
            print(" | ".join(map(str, r)))
