"""Keras 3: diffiface's gradient, hvp and FixedParams on ``keras.ops`` functions and on
Keras models (loss with respect to the weights and to the inputs), under
``KERAS_BACKEND=jax`` and ``torch``, with ``di.AutoKeras()`` picking the backend.

Keras fixes its backend when it is imported, so each backend's checks run in a fresh
process (``python tests/package/test_keras.py <check>...`` with ``KERAS_BACKEND`` set,
one process per backend, its results read back as JSON). Every derivative is checked
against the framework's own transform (``jax.grad`` / ``jax.jvp``, ``torch.autograd``)
of the same Keras code, and the ``keras.ops`` function also against its closed form in
float64. Keras computes in float32 (the models' weights; on JAX even the ops of a float64
x: ``keras.backend.result_type`` maps 64-bit floats to 32-bit), hence the tolerances:
1e-5 against the framework's own transform (the same float32 operations, in another
order; 1e-4 for second order), 1e-5 against the closed form.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import traceback

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).parents[2]
BACKENDS = ("jax", "torch")
TOL = 1e-5

# ---- the checks: run in the child process, where keras is imported --------------------------


def _setup():
    """(keras, ops, diffiface, the backend, the framework's own transforms)."""
    if os.environ["KERAS_BACKEND"] == "jax":
        import jax

        jax.config.update("jax_enable_x64", True)  # (NumPy float64 in stays float64)
    import keras
    from keras import ops

    import diffiface as di

    return keras, ops, di, di.AutoKeras()


def _close(got, want, tol=TOL):
    got = [np.asarray(_numpy(a), dtype=np.float64) for a in _leaves(got)]
    want = [np.asarray(_numpy(a), dtype=np.float64) for a in _leaves(want)]
    assert len(got) == len(want), (len(got), len(want))
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape, (g.shape, w.shape)
        scale = max(1.0, float(np.abs(w).max(initial=0.0)))
        err = float(np.abs(g - w).max(initial=0.0)) / scale
        assert err <= tol, f"error {err:.2e} > {tol:.0e}: got {g.ravel()[:4]}, want {w.ravel()[:4]}"


def _leaves(tree):
    return list(tree) if isinstance(tree, list | tuple) else [tree]


def _numpy(a):
    return a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)


def _own_grad(fn, p):
    """d fn / d p by the framework itself (p: an array or a list of arrays)."""
    if os.environ["KERAS_BACKEND"] == "jax":
        import jax

        return jax.grad(fn)(p)
    import torch

    ps = [torch.as_tensor(_numpy(a)).requires_grad_(True) for a in _leaves(p)]
    out = torch.autograd.grad(fn(ps if isinstance(p, list) else ps[0]), ps)
    return list(out) if isinstance(p, list) else out[0]


def _own_hvp(fn, p, v):
    """The Hessian of fn at p along v, by the framework itself (reverse over reverse)."""
    if os.environ["KERAS_BACKEND"] == "jax":
        import jax

        return jax.jvp(jax.grad(fn), (p,), (v,))[1]
    import torch

    ps = [torch.as_tensor(_numpy(a)).requires_grad_(True) for a in _leaves(p)]
    vs = [torch.as_tensor(_numpy(a)) for a in _leaves(v)]
    g = torch.autograd.grad(fn(ps if isinstance(p, list) else ps[0]), ps, create_graph=True)
    out = torch.autograd.grad(g, ps, grad_outputs=vs)
    return list(out) if isinstance(p, list) else out[0]


def _model(keras, functional):
    """A small regression model (3 -> 4 tanh -> 1), Sequential or functional."""
    keras.utils.set_random_seed(0)
    if not functional:
        layers = [keras.Input((3,)), keras.layers.Dense(4, activation="tanh")]
        return keras.Sequential([*layers, keras.layers.Dense(1)])
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(4, activation="tanh")(inputs)
    return keras.Model(inputs, keras.layers.Dense(1)(hidden))


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(5, 3)).astype("float32"), rng.normal(size=(5, 1)).astype("float32")


def check_auto_keras():
    """AutoKeras() is the backend of keras's own backend."""
    keras, _, di, backend = _setup()
    want = {"jax": di.AutoJax(), "torch": di.AutoTorch()}[keras.backend.backend()]
    assert backend == want, (backend, want)
    assert di.AutoKeras(mode="reverse") == type(want)(mode="reverse")


def check_ops_function():
    """gradient and hvp of a keras.ops function of a float64 NumPy x: the framework's own
    transform, and the closed form."""
    _, ops, di, b = _setup()

    def f(x):
        return ops.sum(ops.sin(x) * x**2) + ops.log(ops.sum(ops.exp(x)))

    x = np.array([0.3, -1.2, 2.0, 0.7])
    v = np.array([1.0, -0.5, 0.25, 2.0])
    soft = np.exp(x) / np.exp(x).sum()
    grad = np.cos(x) * x**2 + 2 * x * np.sin(x) + soft
    hess = np.diag(-np.sin(x) * x**2 + 4 * x * np.cos(x) + 2 * np.sin(x) + soft)
    hess -= np.outer(soft, soft)
    g = di.gradient(f, b, x)
    assert isinstance(g, np.ndarray) and g.dtype == np.float64  # NumPy in, NumPy out
    _close(g, grad)
    _close(g, _own_grad(f, x))
    hv = di.hvp(f, b, x, v)
    _close(hv, hess @ v)
    _close(hv, _own_hvp(f, x, v))


def _weights_case(functional):
    keras, ops, di, b = _setup()
    model = _model(keras, functional)
    xs, ys = _data()
    # keras Variables -> arrays (detached from torch's graph: the docs' recipe)
    params = [ops.stop_gradient(w.value) for w in model.trainable_variables]
    others = [w.value for w in model.non_trainable_variables]

    def loss(p, x, y):
        out, _ = model.stateless_call(p, others, x)
        return ops.mean((out - y) ** 2)

    return keras, ops, di, b, model, params, loss, xs, ys


def _check_weights(functional):
    """The loss's gradient and hvp with respect to the weights (a list of arrays, the
    model's trainable_variables' values), and the gradient put back by the optimizer."""
    keras, ops, di, b, model, params, loss, xs, ys = _weights_case(functional)
    x, y = ops.convert_to_tensor(xs), ops.convert_to_tensor(ys)
    own = lambda p: loss(p, x, y)  # noqa: E731
    g = di.gradient(loss, b, params, di.Constant(xs), di.Constant(ys))
    assert isinstance(g, list) and len(g) == len(params)
    assert not any(getattr(gi, "requires_grad", False) for gi in g)  # no graph kept
    _close(g, _own_grad(own, params))
    rng = np.random.default_rng(1)
    v = [rng.normal(size=tuple(p.shape)).astype("float32") for p in params]
    v = [keras.ops.convert_to_tensor(a) for a in v]
    hv = di.hvp(loss, b, params, v, di.Constant(xs), di.Constant(ys))
    _close(hv, _own_hvp(own, params, v), 1e-4)
    before = [np.array(_numpy(p)) for p in params]  # (a copy: torch updates in place)
    keras.optimizers.SGD(learning_rate=0.1).apply(g, model.trainable_variables)
    after = [np.asarray(_numpy(w.value)) for w in model.trainable_variables]
    _close(after, [p - 0.1 * np.asarray(_numpy(gi)) for p, gi in zip(before, g, strict=True)])
    assert float(_numpy(own([w.value for w in model.trainable_variables]))) < float(
        _numpy(own([keras.ops.convert_to_tensor(p) for p in before]))
    )


def check_sequential_weights():
    _check_weights(functional=False)


def check_functional_weights():
    _check_weights(functional=True)


def check_dict_weights():
    """The weights as a dict keyed by the Variables' paths: a pytree like the list, the
    gradient keyed the same (the docs' alternative)."""
    _, ops, di, b, model, params, loss, xs, ys = _weights_case(functional=False)
    names = [w.path for w in model.trainable_variables]
    x, y = ops.convert_to_tensor(xs), ops.convert_to_tensor(ys)
    tree = dict(zip(names, params, strict=True))
    g = di.gradient(lambda p: loss(list(p.values()), x, y), b, tree)
    assert list(g) == names
    _close(list(g.values()), _own_grad(lambda p: loss(p, x, y), params))


def check_inputs():
    """The gradient with respect to the inputs of a functional model called directly."""
    keras, ops, di, b = _setup()
    model = _model(keras, functional=True)
    xs, _ = _data()

    def out(x):
        return ops.sum(model(x) ** 2)

    _close(di.gradient(out, b, xs), _own_grad(out, xs))


def check_fixed_params():
    """A gradient penalty: the inputs' gradient inside a loss, differentiated with respect
    to the weights (FixedParams), by diffiface and by the framework's own pass, against
    the framework's own nested transform."""
    _, ops, di, b, model, params, _, xs, _ = _weights_case(functional=False)

    def score(x, p):
        out, _ = model.stateless_call(p, [], x)
        return ops.sum(out)

    def penalty(p):
        dx = di.gradient(di.FixedParams(score, p), b, xs)
        return ops.sum(dx**2)

    if os.environ["KERAS_BACKEND"] == "jax":
        import jax

        want = jax.grad(lambda p: (jax.grad(score)(xs, p) ** 2).sum())(params)
    else:
        import torch

        ps = [torch.as_tensor(_numpy(p)).requires_grad_(True) for p in params]
        x = torch.as_tensor(xs).requires_grad_(True)
        (dx,) = torch.autograd.grad(score(x, ps), x, create_graph=True)
        # (the output bias does not reach dx: its gradient is zero)
        want = torch.autograd.grad((dx**2).sum(), ps, allow_unused=True, materialize_grads=True)
    _close(di.gradient(penalty, b, params), want, 1e-4)  # diffiface over diffiface
    _close(_own_grad(penalty, params), want, 1e-4)  # the framework's pass over diffiface


CHECKS = {
    name.removeprefix("check_"): fn for name, fn in list(globals().items()) if name[:6] == "check_"
}


def _main(names):
    """Run the named checks; print {name: "ok" or the traceback} as JSON."""
    results = {}
    for name in names:
        try:
            CHECKS[name]()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc()
    print(json.dumps(results))


# ---- the tests: one child process per Keras backend ----------------------------------------

_RUNS: dict = {}


def _run(backend):
    """The results of every check under ``KERAS_BACKEND=backend`` (one process, once)."""
    if backend not in _RUNS:
        env = dict(os.environ, KERAS_BACKEND=backend)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
        cmd = [sys.executable, __file__, *CHECKS]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        lines = done.stdout.strip().splitlines()
        assert done.returncode == 0 and lines, done.stderr[-3000:]
        _RUNS[backend] = json.loads(lines[-1])
    return _RUNS[backend]


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_keras(backend, check):
    if importlib.util.find_spec("keras") is None:
        pytest.skip("keras is not installed")
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed")
    result = _run(backend)[check]
    assert result == "ok", result


def test_auto_keras_names_the_fix_without_keras_or_on_another_backend(monkeypatch):
    """Before keras is imported its backend is unknown; a Keras backend diffiface cannot
    differentiate names KERAS_BACKEND (a stand-in module: keras is never imported here)."""
    import types

    import diffiface as di

    monkeypatch.delitem(sys.modules, "keras", raising=False)
    with pytest.raises(di.DiffifaceValueError, match=r"AutoKeras\(\): keras is not imported"):
        di.AutoKeras()
    for name in ("tensorflow", "numpy", "openvino"):
        fake = types.SimpleNamespace(backend=types.SimpleNamespace(backend=lambda n=name: n))
        monkeypatch.setitem(sys.modules, "keras", fake)
        fix = f"its '{name}' backend.*KERAS_BACKEND=jax"
        with pytest.raises(di.DiffifaceValueError, match=fix):
            di.AutoKeras()
    fake = types.SimpleNamespace(backend=types.SimpleNamespace(backend=lambda: "torch"))
    monkeypatch.setitem(sys.modules, "keras", fake)
    assert di.AutoKeras(mode="forward") == di.AutoTorch(mode="forward")

    class Mine(di.AutoTorch):  # a user's subclass: AutoKeras still gives AutoTorch itself
        pass

    assert type(di.AutoKeras()) is di.AutoTorch
    with pytest.raises(di.DiffifaceValueError, match="mode must be None"):
        di.AutoKeras(mode="sideways")


if __name__ == "__main__":
    _main(sys.argv[1:])
