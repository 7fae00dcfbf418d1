"""One case of the consistency matrix: a scenario's operator on one backend, array kind,
preparation and calling context, run and checked against closed forms."""

from __future__ import annotations

import dataclasses
import os
import traceback
import warnings
import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
import optree

from .._arrays import framework_of
from .._backend_types import AutoSparse
from .._checks import DisconnectedWarning
from .._contexts import Constant, FixedParams
from .._errors import DiffifaceValueError, RecompileWarning, SparsityWarning
from ..core import registry
from ..core.operator import FAMILY, OPS, SHAPED_LIKE_F
from ._calls import part_shapes
from ._check import relative_error, short_name, tolerance
from ._kit import kit
from ._scenario import Scenario, is_sparse, outputs

TANGENT = {name: d.tangent for name, d in OPS.items() if d.tangent is not None}


@dataclasses.dataclass(frozen=True, eq=False)
class Spec:
    """A matrix scenario: two :class:`Scenario` objects of ``f(x, s)`` at (x, s0), s passed
    as a Constant: ``ref`` (y, jac, hess, second at s0, with the tangent v and cotangent
    w) and ``dref`` (the same references differentiated with respect to s, or None)."""

    ref: Scenario
    dref: Scenario | None

    @property
    def name(self) -> str:
        return self.ref.name

    @property
    def f(self) -> Callable:
        return self.ref.f

    @property
    def x(self) -> np.ndarray:
        return self.ref.x

    @property
    def s(self) -> float:
        return self.ref.contexts[0].value

    @classmethod
    def make(cls, name, f, x, s, closed, d_closed=None) -> Spec:
        x = np.asarray(x)
        if x.dtype.kind != "f":
            x = x.astype(np.float64)
        s = float(s)
        y = np.asarray(f(x, s))
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        v = rng.uniform(-1, 1, x.shape).astype(x.dtype)
        w = rng.uniform(-1, 1, y.shape).astype(x.dtype)
        refs = _refs(name, "closed", closed(s), y)
        base = Scenario(name, "matrix", f, x, contexts=(Constant(s),), v=v, w=w, **refs)
        ops = tuple(op for op in base.operators if all(e is not None for e in base.expected(op)))
        ref = dataclasses.replace(base, operators=ops)
        dref = None
        if d_closed is not None:
            drefs = _refs(name, "d_closed", d_closed(s), None)
            dref = dataclasses.replace(ref, **drefs)
        return cls(ref, dref)


def _refs(name: str, label: str, given: dict, y: np.ndarray | None) -> dict:
    unknown = set(given) - {"y", "jac", "hess", "second"}
    if unknown:
        raise DiffifaceValueError(
            f"consistency_matrix({name!r}): {label} gave unknown keys {unknown}."
        )
    if "jac" not in given or (y is None and "y" not in given):
        need = "'jac'" if y is not None else "'y' and 'jac'"
        raise DiffifaceValueError(f"consistency_matrix({name!r}): {label}(s) must give {need}.")
    out = {
        k: np.asarray(given[k], dtype=np.float64) for k in ("jac", "hess", "second") if k in given
    }
    out["y"] = np.ravel(np.asarray(given["y"] if "y" in given else y, dtype=np.float64))
    out["jac"] = out["jac"].reshape(out["y"].size, -1)
    if "second" in out:
        out["second"] = np.ravel(out["second"])
    return out


@dataclasses.dataclass(frozen=True)
class MatrixResult:
    """The outcome of one :class:`MatrixCase`: ``ok``, and why not in ``message``
    (``raised``: the call raised, the message is its error)."""

    ok: bool
    message: str = ""
    error: float | None = None
    tolerance: float | None = None
    raised: bool = False

    def __bool__(self) -> bool:
        return self.ok


@dataclasses.dataclass(frozen=True, eq=False)
class MatrixCase:
    """One cell of the matrix: ``run()`` calls the operator and checks it.

    ``id`` reads ``scenario-operator-backend-kind-prep|unprep-context``.
    """

    spec: Spec
    op: str
    backend: Any
    kind: str
    prepared: bool
    context: str

    @property
    def id(self) -> str:
        prep = "prep" if self.prepared else "unprep"
        backend = short_name(self.backend)
        return f"{self.spec.name}-{self.op}-{backend}-{self.kind}-{prep}-{self.context}"

    def __repr__(self) -> str:
        return f"MatrixCase({self.id})"

    def run(self) -> MatrixResult:
        """Run the case; a raised error or a DisconnectedWarning is a failure."""
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", DisconnectedWarning)
                # (the matrix makes its closures anew for each case, on purpose)
                warnings.simplefilter("ignore", RecompileWarning)
                if isinstance(self.backend, AutoSparse):  # a local pattern says so each call
                    warnings.simplefilter("ignore", SparsityWarning)
                return self._run()
        except Exception as exc:  # reported, not raised: the caller decides
            text = " ".join(str(exc).split())
            where = traceback.extract_tb(exc.__traceback__)[-1]  # where it was raised
            at = f" (raised at {os.path.basename(where.filename)}:{where.lineno})"
            return MatrixResult(False, f"{type(exc).__name__}: {text[:400]}{at}", raised=True)

    # -- the pieces ----------------------------------------------------------------------------
    @property
    def _where(self) -> str:
        return self.context.partition("+")[0]

    @property
    def _via(self) -> str:
        return self.context.partition("+")[2] or "closure"

    @property
    def _framework(self) -> str:  # (the framework of its arrays)
        return registry.arrays(self.backend)

    @property
    def dtype(self) -> np.dtype:
        """The dtype of the results: x's, or for a Python float x the framework's default
        float (torch: ``torch.get_default_dtype()``; JAX: float64 under x64)."""
        if self.kind != "float":
            return self.spec.x.dtype
        return kit(self._framework).default_float()

    def _tolerance(self) -> float:
        if self._where == "plain":
            return tolerance(self.backend, self.dtype, self.op)
        # a derivative of a derivative: finite differences are held to second order
        return tolerance(self.backend, self.dtype, "hessian")

    def _arrange(self, a: np.ndarray) -> Any:
        return arrange(self.kind, self._framework, np.asarray(a, dtype=self.dtype))

    def _function(self, s: Any) -> tuple:
        """(the function, the contexts) through which ``f`` sees ``s``; "+aux": f returns
        ``(out, {"value": out})`` (``has_aux=True``); "+tree": f returns ``(out, 2 * out)``;
        kind "node": f takes x in a registered pytree node (``Point``)."""
        f, via = self.spec.f, self._via
        if self.kind == "node":
            f = _on_point(f)
        if via == "closure":
            return (lambda z: f(z, s)), ()
        if via == "const":
            return f, (Constant(s),)
        if via == "aux":
            return (lambda z: _with_value(f(z, s))), ()
        if via == "tree":
            return (lambda z: _twice(f(z, s))), ()
        if via == "module":  # FixedParams(model): s a parameter of a torch module
            return FixedParams(kit(self._framework).module(f, s, self.dtype)), ()
        return FixedParams(f, s), ()

    def _prepare(self, s: Any, x: Any, t: Any, fn: Any = None) -> Any:
        """The preparation of this call (None unprepared), for ``fn`` if given."""
        import diffiface as di

        if not self.prepared:
            return None
        fn, ctx = self._function(s) if fn is None else (fn, self._function(s)[1])
        prepare = getattr(di, "prepare_" + FAMILY[self.op])
        t = self._tangent(t)
        aux = self._via == "aux"
        return prepare(fn, self.backend, x, *(() if t is None else (t,)), *ctx, has_aux=aux)

    def _invoke(self, s: Any, x: Any, t: Any, prep: Any = None) -> tuple:
        """The operator's outputs at ``x`` (tangent ``t``), ``f`` seeing ``s``; prepared
        here unless ``prep`` is given."""
        import diffiface as di

        fn, ctx = self._function(s)
        if prep is None:
            prep = self._prepare(s, x, t, fn)
        t = self._tangent(t)
        targs = () if t is None else (t,)
        via = self._via
        out = getattr(di, self.op)(
            fn, self.backend, x, *targs, *ctx, prep=prep, has_aux=via == "aux"
        )
        if via == "aux":
            out, aux = out
            self._check_aux(aux, s)
        outs = out if len(self.spec.ref.expected(self.op)) > 1 else (out,)
        if via == "tree":
            traced = self._where != "plain"  # (an MLX array cannot tell, and must not be read)
            outs = tuple(
                _first_of_twice(o, name, traced) if name in SHAPED_LIKE_F else o
                for o, name in zip(outs, outputs(self.op), strict=True)
            )
        if self.kind == "node":
            outs = tuple(
                _from_point(o, name) for o, name in zip(outs, outputs(self.op), strict=True)
            )
        return outs

    def _tangent(self, t: Any) -> Any:
        """The cotangent of vjp for "+tree": ``(w, 0 * w)``, like f's ``(out, 2 * out)``;
        the tangent of jvp and hvp for kind "node": a ``Point`` like x."""
        if t is None:
            return t
        if self._via == "tree" and FAMILY[self.op] == "vjp":
            return (t, t * 0)
        if self.kind == "node":  # a Point like x, but w is like f(x)
            if FAMILY[self.op] == "vjp":
                return t.v if isinstance(t, Point) else t
            return t if isinstance(t, Point) else Point(t)
        return t

    def _check_aux(self, aux: Any, s: Any) -> None:
        """aux is f's value as computed (checked against the reference in a plain call)."""
        if not isinstance(aux, dict) or set(aux) != {"value"}:
            raise AssertionError(f"aux came back as {type(aux).__name__}, not the dict f gave")
        if self._where == "plain":
            got = np.ravel(np.asarray(_numpy(aux["value"]), dtype=np.float64))
            err = relative_error(got, self.spec.ref.y)
            if not err <= self._tolerance():
                raise AssertionError(f"aux value error {err:.2e} (got {_show(got)})")

    def _weights(self) -> tuple:
        """Fixed weights ``u`` that reduce each output to a scalar for an outer pass."""
        rng = np.random.default_rng(zlib.crc32(f"{self.spec.name}/{self.op}".encode()))
        return tuple(rng.uniform(-1, 1, shape) for shape in self._shapes())

    def _shapes(self) -> tuple:
        xs, ys = self.spec.x.shape, np.shape(self.spec.ref.call(self.spec.x))
        one = part_shapes(xs, ys)
        return tuple(one[name] for name in outputs(self.op))

    def _run(self) -> MatrixResult:
        spec, op, where = self.spec, self.op, self._where
        tname = TANGENT.get(op)
        t_np = None if tname is None else getattr(spec.ref, tname)
        tol = self._tolerance()
        x = arrange(self.kind, self._framework, spec.x)  # a float x stays float64
        if where == "plain":
            t = None if t_np is None else self._arrange(t_np)
            outs = self._invoke(spec.s, x, t)
            return self._compare_outputs(outs, x, tol)
        us = self._weights()
        if where in ("di_outer", "fw_outer"):
            t = None if t_np is None else self._arrange(t_np)
            # s is the backend's own 0-d array, whatever the kind of x
            s0 = arrange("0d", self._framework, np.asarray(spec.s, dtype=self.dtype))
            # a Constant or FixedParams call is prepared outside, at the value of s
            closure = self._via in ("closure", "aux", "tree")  # f is made anew for each s
            prep = None if closure else self._prepare(s0, x, t)

            def outer(s):
                return _reduce(self._invoke(s, x, t, prep), us)

            got = self._outer(outer, s0)
            dexp = spec.dref.expected(op)
            want = np.array([sum(float(np.ravel(u) @ e) for u, e in zip(us, dexp, strict=True))])
        else:  # the tangent or cotangent is differentiated
            t0 = self._arrange(t_np)

            def outer(t):
                return _reduce(self._invoke(spec.s, x, t), us)

            got = self._outer(outer, t0)
            want = _tangent_reference(spec.ref, op, np.ravel(us[-1]))
        err = relative_error(got, want)
        if np.shape(got) != (() if where.endswith("outer") else np.shape(t_np)):
            return MatrixResult(False, f"the outer derivative has shape {np.shape(got)}", err, tol)
        if not err <= tol:
            msg = f"outer derivative error {err:.2e} > {tol:.0e} (got {_show(got)}, want {want})"
            return MatrixResult(False, msg, err, tol)
        return MatrixResult(True, "", err, tol)

    def _outer(self, fn: Callable, at: Any) -> Any:
        """d fn / d at, by diffiface (``di_*``) or by the framework's own reverse mode."""
        import diffiface as di

        if self._where.startswith("di_"):
            return di.gradient(fn, self.backend, at)
        return kit(self._framework).outer_gradient(fn, at, self.dtype)

    def _compare_outputs(self, outs: tuple, x: Any, tol: float) -> MatrixResult:
        expected = self.spec.ref.expected(self.op)
        if len(outs) != len(expected):
            return MatrixResult(False, f"{len(outs)} outputs, expected {len(expected)}")
        problems, worst = [], 0.0
        sparse = isinstance(self.backend, AutoSparse) and not self.backend.dense
        for i, (out, want, shape) in enumerate(zip(outs, expected, self._shapes(), strict=True)):
            name = outputs(self.op)[i]
            if sparse and name in ("jacobian", "hessian"):  # flattened: (f(x).size, x.size)
                shape = (int(np.size(want)) // max(1, self.spec.x.size), self.spec.x.size)
            if tuple(np.shape(out) if not hasattr(out, "shape") else out.shape) != shape:
                problems.append(f"{name} has shape {tuple(np.shape(out))}, not {shape}")
                continue
            if sparse and name in ("jacobian", "hessian"):
                kind = self._sparse_problem(out, want)
            else:
                kind = self._kind_problem(out, x, shape)
            if kind:
                problems.append(f"{name} {kind}")
            err = relative_error(out, want)
            worst = max(worst, err)
            if not err <= tol:
                got = _show(out)
                problems.append(f"{name} error {err:.2e} > {tol:.0e} (got {got}, want {want})")
        return MatrixResult(not problems, "; ".join(problems), worst, tol)

    def _kind_problem(self, out: Any, x: Any, shape: tuple) -> str:
        """Results come back in the kind of x: native, NumPy, or a float when 0-d."""
        x = x.v if isinstance(x, Point) else x
        if self.kind == "float" and shape == ():
            return "" if type(out) is float else f"is {type(out).__name__}, not float"
        if self.kind in ("float", "numpy", "numpy_F"):
            want = np.ndarray
        else:
            want = kit(self._framework).result_type(x)
        if not isinstance(out, want):
            return f"is {type(out).__name__}, not {want.__name__}"
        dtype = str(out.dtype).split(".")[-1]
        if dtype != self.dtype.name:
            return f"has dtype {dtype}, not {self.dtype.name}"
        return ""

    def _sparse_problem(self, out: Any, want: Any) -> str:
        """A sparse result is the sparse type of x's kind, with x's dtype, and exactly
        zero where the reference is."""
        from ._scenario import flat_result

        numpy = self.kind in ("float", "numpy", "numpy_F") or not kit(self._framework).native_sparse
        ok = hasattr(out, "tocsr") if numpy else is_sparse(out) and not hasattr(out, "tocsr")
        if not ok:
            return f"is {type(out).__name__}, not the sparse matrix of x's kind"
        dtype = str(out.dtype).split(".")[-1]
        if dtype != self.dtype.name:
            return f"has dtype {dtype}, not {self.dtype.name}"
        got, ref = flat_result(out), np.ravel(np.asarray(want, dtype=np.float64))
        if np.any(got[ref == 0] != 0):
            return "has a nonzero where the reference has an exact zero"
        return ""


# the operators that take x in a registered node (x-shaped results come back as one)
NODE_OPS = ("gradient", "jacobian", "jvp", "vjp", "hvp")


@optree.dataclasses.dataclass(namespace="")
class Point:
    """x in a pytree node registered with optree (globally): kind "node"."""

    v: Any


def _on_point(f: Callable) -> Callable:
    return lambda p, *args: f(p.v, *args)


def _from_point(out: Any, name: str) -> Any:
    """An x-shaped result: the Point it must come back as, opened."""
    if name in ("value", "jvp"):
        return out
    if not isinstance(out, Point):
        raise AssertionError(f"{name} came back as {type(out).__name__}, not x's node type")
    return out.v


def _with_value(y: Any) -> tuple:
    return y, {"value": y}


def _twice(y: Any) -> tuple:
    return y, 2 * y


def _first_of_twice(out: Any, name: str, traced: bool) -> Any:
    """The first leaf of a ``(r, 2 r)`` result of "+tree", the second checked against it
    (``traced``: under an outer pass, where the outer derivative checks it: reading the
    values of an MLX transform's result there would cut it from the outer pass)."""
    if type(out) is not tuple or len(out) != 2:
        raise AssertionError(f"{name} came back as {type(out).__name__}, not f's pair")
    if traced:
        return out[0]
    a, b = (np.asarray(_numpy(o), dtype=np.float64) for o in out)
    if a.shape != b.shape or not np.allclose(b, 2 * a, rtol=1e-6, atol=1e-9):
        raise AssertionError(f"{name}: the second leaf is not twice the first")
    return out[0]


def _numpy(a: Any) -> Any:
    return a.detach().cpu().numpy() if hasattr(a, "detach") else a


def _tangent_reference(ref: Scenario, op: str, u: np.ndarray) -> np.ndarray:
    """d/dt <u, op(f, b, x, t)> (the last output; a value does not depend on t)."""
    if FAMILY[op] == "jvp":
        return ref.jac.T @ u  # <u, J v>
    if FAMILY[op] == "vjp":
        return ref.jac @ u  # <u, wᵀ J>
    return ref.hess.T @ u  # <u, H v>


def like(c: np.ndarray, z: Any) -> Any:
    """A NumPy constant usable with ``z`` (a torch tensor needs a tensor)."""
    return kit(framework_of(z)).constant(c, z)


def _reduce(outs: tuple, us: tuple) -> Any:
    """sum_k <u_k, out_k>, in the framework of the outputs."""
    total = None
    for out, u in zip(outs, us, strict=True):
        term = (out * like(u, out)).sum() if hasattr(out, "shape") else out * float(u)
        total = term if total is None else total + term
    return total


def _show(a: Any) -> str:
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.array2string(np.ravel(np.asarray(a, dtype=np.float64)), precision=6, threshold=8)


def arrange(kind: str, framework: str, a: np.ndarray) -> Any:
    """``a`` (NumPy) as an array of ``kind`` for a backend of ``framework``.

    C / 0d: the backend's own array; F: column-major; T: a transposed view of a C
    array; strided: ``big[::2]`` of a twice larger array (these four by the
    framework's kit, ``ArrayKit.arrange``); float: a Python float when 0-d (NumPy
    otherwise); numpy / numpy_F: a NumPy array (C / Fortran order) for any backend.
    """
    a = np.asarray(a)
    if kind == "node":
        return Point(arrange("C", framework, a))
    if kind == "float":
        return float(a) if a.ndim == 0 else np.array(a)
    if (kind in ("F", "T", "numpy_F") and a.ndim < 2) or (kind == "strided" and a.ndim < 1):
        kind = {"numpy_F": "numpy"}.get(kind, "C")  # no order to give
    if kind == "numpy":
        return np.array(a)
    if kind == "numpy_F":
        return np.asfortranarray(a)
    return kit(framework).arrange(kind, a)
