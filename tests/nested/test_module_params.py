"""``di.FixedParams(model)`` for a torch ``nn.Module``: every operator on AutoTorch inside
an outer torch pass, with every strategy, against the same derivatives written natively
(``torch.autograd.grad(..., create_graph=True)``) in float64 (1e-10): a model with
buffers (BatchNorm in eval mode) and a frozen parameter, explicit parameters as
``torch.func`` users pass them, parameters read afresh at each call, a PINN residual
and a WGAN-GP gradient penalty trained by ``loss.backward()``."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import diffiface as di  # noqa: E402

B = di.AutoTorch()
F64 = torch.float64
TOL = {"rtol": 1e-10, "atol": 1e-10}
STRATEGIES = ("auto", "reverse_over_reverse", "forward_over_reverse")


# ---- the models --------------------------------------------------------------------------------
class MLP(nn.Module):
    """2 -> 8 -> 2, pointwise; ``norm``: a BatchNorm in eval mode (buffers) and a frozen
    first-layer bias."""

    def __init__(self, norm: bool = False) -> None:
        super().__init__()
        self.inp, self.out = nn.Linear(2, 8), nn.Linear(8, 2)
        self.norm = nn.BatchNorm1d(8) if norm else nn.Identity()
        if norm:
            with torch.no_grad():
                self.norm.running_mean.uniform_(-0.5, 0.5)
                self.norm.running_var.uniform_(0.5, 2.0)
                self.norm.weight.uniform_(0.5, 1.5)
            self.inp.bias.requires_grad_(False)

    def forward(self, x):
        return self.out(torch.tanh(self.norm(self.inp(x))))


class Energy(nn.Module):
    """A scalar of x: ``sum(mlp(x)**2) * scale``."""

    def __init__(self, norm: bool = False) -> None:
        super().__init__()
        self.mlp = MLP(norm)

    def forward(self, x, scale=1.0):
        return (self.mlp(x) ** 2).sum() * scale


def build(cls, norm=False, seed=0):
    torch.manual_seed(seed)
    return cls(norm).double().eval()


def trainable(m):
    return [p for p in m.parameters() if p.requires_grad]


def weights(t):
    """A fixed cotangent shaped like ``t``."""
    return torch.cos(0.7 * torch.arange(t.numel(), dtype=F64) + 0.3).reshape(t.shape)


X0 = torch.linspace(-1, 1, 8, dtype=F64).reshape(4, 2)
V0 = torch.tensor([[1.0, -1.0], [-1.0, 1.0], [1.0, 1.0], [-1.0, -1.0]], dtype=F64)


# ---- each operator, by diffiface and natively --------------------------------------------------
def _rows(y, x):
    """The Jacobian of y with respect to x, row by row (create_graph=True)."""
    rows = [torch.autograd.grad(yi, x, create_graph=True)[0] for yi in y.reshape(-1)]
    return torch.stack(rows).reshape(*y.shape, *x.shape)


def _grad(m, x):
    return torch.autograd.grad(m(x), x, create_graph=True)[0]


def _jvp(m, x, v):  # the double-vjp trick: d/du <vjp(u), v>
    y = m(x)
    u = torch.zeros_like(y, requires_grad=True)
    g = torch.autograd.grad(y, x, u, create_graph=True)[0]
    return torch.autograd.grad(g, u, v, create_graph=True)[0]


def _batched(m, x):  # pointwise model: column j of every per-sample Jacobian at once
    y = m(x)
    cols = [torch.autograd.grad(y[:, j].sum(), x, create_graph=True)[0] for j in range(2)]
    return torch.stack(cols, dim=1)


OPS = {  # name -> (model class, diffiface's inner call, the native one)
    "gradient": (Energy, lambda fp, x: di.gradient(fp, B, x), _grad),
    "value_and_gradient": (
        Energy,
        lambda fp, x: di.value_and_gradient(fp, B, x),
        lambda m, x: (m(x), _grad(m, x)),
    ),
    "hvp": (
        Energy,
        lambda fp, x: di.hvp(fp, B, x, V0),
        lambda m, x: torch.autograd.grad((_grad(m, x) * V0).sum(), x, create_graph=True)[0],
    ),
    "hessian": (Energy, lambda fp, x: di.hessian(fp, B, x), lambda m, x: _rows(_grad(m, x), x)),
    "jacobian": (MLP, lambda fp, x: di.jacobian(fp, B, x), lambda m, x: _rows(m(x), x)),
    "jvp": (MLP, lambda fp, x: di.jvp(fp, B, x, V0), lambda m, x: _jvp(m, x, V0)),
    "vjp": (
        MLP,
        lambda fp, x: di.vjp(fp, B, x, V0),
        lambda m, x: torch.autograd.grad(m(x), x, V0, create_graph=True)[0],
    ),
    "batched_jacobian": (MLP, lambda fp, x: di.batched_jacobian(fp, B, x), _batched),
}
RULES = {"gradient", "value_and_gradient", "hvp", "vjp"}  # forward_over_reverse on torch


def outer(inner, m, params):
    """(d loss / dx, d loss / d params) of ``loss = <inner(m, x), weights>`` by an outer
    torch.autograd.grad (the derivative of a Jacobian with respect to an output bias is
    zero: no graph reaches it)."""
    x = X0.clone().requires_grad_()
    out = inner(m, x)
    loss = sum((o * weights(o)).sum() for o in as_tuple(out))
    return torch.autograd.grad(loss, [x, *params], allow_unused=True, materialize_grads=True)


def as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def assert_close(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, **TOL)


@pytest.mark.parametrize("norm", [False, True], ids=["plain", "buffers+frozen"])
@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("op", OPS)
def test_every_operator_inside_an_outer_pass(op, strategy, norm):
    cls, inner, native = OPS[op]
    m = build(cls, norm)
    fp = di.FixedParams(m, strategy=strategy)
    if strategy == "forward_over_reverse" and op not in RULES | {"jvp"}:
        with pytest.raises(di.DiffifaceValueError, match="has no rule for"):
            outer(inner, fp, trainable(m))
        return
    di.nested_rule_counts(reset=True)
    got = outer(inner, fp, trainable(m))
    path = "native" if op == "jvp" else strategy.replace("auto", "reverse_over_reverse")
    assert {key[2] for key in di.nested_rule_counts()} == {path}
    assert_close(got, outer(native, m, trainable(m)))
    # the inner results alone, with no outer pass
    with torch.no_grad():
        plain = inner(fp, X0)
    want = native(m, X0.clone().requires_grad_())
    assert_close(as_tuple(plain), as_tuple(want))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_backward_fills_the_parameters_grad(strategy):
    """``loss.backward()`` accumulates into ``.grad``; frozen parameters and buffers get
    none, and the buffers are left as they were."""
    m = build(Energy, norm=True)
    buffers = {k: b.clone() for k, b in m.named_buffers()}
    x = X0.clone().requires_grad_()
    (di.gradient(di.FixedParams(m, strategy=strategy), B, x) ** 2).sum().backward()
    got = [x.grad, *(p.grad for p in trainable(m))]
    x.grad = None
    m.zero_grad()
    (_grad(m, x) ** 2).sum().backward()
    assert_close(got, [x.grad, *(p.grad for p in trainable(m))])
    assert m.mlp.inp.bias.grad is None
    for k, b in m.named_buffers():
        assert torch.equal(b, buffers[k]) and not b.requires_grad, k


def test_contexts_follow_x():
    """``model(x, *contexts)``: a Constant reaches forward after x."""
    m = build(Energy)
    scale = torch.tensor(0.5, dtype=F64, requires_grad=True)
    x = X0.clone().requires_grad_()
    got = torch.autograd.grad(
        (di.gradient(di.FixedParams(m), B, x, di.Constant(scale)) ** 2).sum(),
        [x, scale, *m.parameters()],
    )
    g = torch.autograd.grad(m(x, scale), x, create_graph=True)[0]
    assert_close(got, torch.autograd.grad((g**2).sum(), [x, scale, *m.parameters()]))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_explicit_params_like_torch_func(strategy):
    """``FixedParams(model, params)``: functional_call with the given dict; the module's
    own parameters are not used, and an outer torch.func.grad works too."""
    m = build(Energy, norm=True)
    params = {k: (p.detach() * 1.1).requires_grad_() for k, p in m.named_parameters()}
    x = X0.clone().requires_grad_()
    fp = di.FixedParams(m, params, strategy=strategy)
    got = torch.autograd.grad((di.gradient(fp, B, x) ** 2).sum(), [x, *params.values()])
    assert all(p.grad is None for p in m.parameters())

    def native(x, params):
        g = torch.func.grad(lambda x: torch.func.functional_call(m, params, (x,)))(x)
        return (g**2).sum()

    assert_close(got, torch.autograd.grad(native(x, params), [x, *params.values()]))

    def loss(params):  # torch.func outside: the framework's own nesting runs
        return (di.gradient(di.FixedParams(m, params, strategy=strategy), B, X0) ** 2).sum()

    want = torch.func.grad(native, argnums=1)(X0, params)
    assert_close(list(torch.func.grad(loss)(params).values()), list(want.values()))


def test_parameters_are_read_at_each_call():
    """An in-place update, a replaced Parameter, load_state_dict and a prepared call all
    see the module's current parameters."""
    m = build(Energy)
    fp = di.FixedParams(m)
    prep = di.prepare_gradient(fp, B, X0)

    def check():
        want = torch.func.grad(m)(X0)
        torch.testing.assert_close(di.gradient(fp, B, X0), want, **TOL)
        torch.testing.assert_close(di.gradient(fp, B, X0, prep=prep), want, **TOL)
        torch.testing.assert_close(fp(X0), m(X0), **TOL)

    check()
    again = di.FixedParams(m)  # another FixedParams of the same module matches the prep
    torch.testing.assert_close(di.gradient(again, B, X0, prep=prep), di.gradient(fp, B, X0))
    with torch.no_grad():
        m.mlp.inp.weight.mul_(2.0)
    check()
    m.mlp.out.weight = nn.Parameter(torch.ones(2, 8, dtype=F64))
    assert fp.params["mlp.out.weight"] is m.mlp.out.weight
    check()
    m.load_state_dict(build(Energy, seed=1).state_dict())
    check()


def test_errors_name_the_fix():
    with pytest.raises(TypeError, match=r"FixedParams\(f, params\)"):
        di.FixedParams(lambda x, p: x)
    with pytest.raises(TypeError, match="dict of parameter names"):
        di.FixedParams(build(MLP), [torch.ones(2)])
    x = X0.numpy()
    for backend in (di.AutoFiniteDifferences(), di.AutoAutograd()):  # run f on their arrays
        with pytest.raises(di.DiffifaceTypeError, match=r"runs on torch tensors.*AutoTorch\(\)"):
            di.gradient(di.FixedParams(build(Energy)), backend, x)


def test_unknown_or_misshaped_params_are_errors():
    """torch.func.functional_call ignores an unknown name (the module's own tensor was
    used, silently) and a wrong shape raised torch's raw size mismatch. A buffer given
    by its name is used."""
    m = build(Energy, norm=True)
    w = m.mlp.inp.weight
    msg = r"key 'mlp.inp.Weight', .* parameters: 'mlp.inp.weight', .* buffers: 'mlp.norm.running"
    with pytest.raises(di.DiffifaceValueError, match=msg):
        di.FixedParams(m, {"mlp.inp.Weight": w.detach() * 2})
    with pytest.raises(di.DiffifaceValueError, match=r"key 'running_mean'.*neither"):
        di.FixedParams(m, {"running_mean": torch.zeros(8, dtype=F64)})
    shape = r"params\['mlp.inp.weight'\] has shape \(2, 8\), and the parameter .* \(8, 2\)"
    with pytest.raises(di.DiffifaceValueError, match=shape):
        di.FixedParams(m, {"mlp.inp.weight": w.detach().T})
    with pytest.raises(di.DiffifaceValueError, match=r"buffer 'mlp.norm.running_var'.*\(8,\)"):
        di.FixedParams(m, {"mlp.norm.running_var": torch.ones(4, dtype=F64)})
    mean = {"mlp.norm.running_mean": torch.full((8,), 0.25, dtype=F64)}
    want = torch.func.grad(lambda x: torch.func.functional_call(m, mean, (x,)))(X0)
    torch.testing.assert_close(di.gradient(di.FixedParams(m, mean), B, X0), want, **TOL)


# ---- a PINN and a WGAN-GP gradient penalty, trained by loss.backward() -------------------------
class U(nn.Module):
    """u(x) for a batch of points x (N,): a scalar per point."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh())
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        return self.head(self.net(x[:, None]))[:, 0]


def pinn_loss_native(u, x):
    """The residual of u'' = -sin(x) and the boundary u(±1) = sin(±1), by create_graph."""
    du = torch.autograd.grad(u(x).sum(), x, create_graph=True)[0]
    d2u = torch.autograd.grad(du.sum(), x, create_graph=True)[0]
    edges = torch.tensor([-1.0, 1.0], dtype=F64)
    return ((d2u + torch.sin(x)) ** 2).mean() + ((u(edges) - torch.sin(edges)) ** 2).mean()


class Summed(nn.Module):
    """The sum of u over the points: the points are independent, so its Hessian is
    diagonal, with u''(x_i) on the diagonal."""

    def __init__(self, u: nn.Module) -> None:
        super().__init__()
        self.u = u

    def forward(self, x):
        return self.u(x).sum()


@pytest.mark.parametrize("strategy", ["auto", "forward_over_reverse"])
def test_pinn_residual(strategy):
    torch.manual_seed(0)
    u = U().double()
    x = torch.linspace(-1, 1, 12, dtype=F64)
    edges = torch.tensor([-1.0, 1.0], dtype=F64)
    fp = di.FixedParams(Summed(u), strategy=strategy)

    def loss(x):
        d2u = di.hvp(fp, B, x, torch.ones_like(x))  # H 1 = u''(x) at every point
        if strategy == "auto":  # no forward_over_reverse rule for hessian on torch
            torch.testing.assert_close(torch.diagonal(di.hessian(fp, B, x)), d2u, **TOL)
        return ((d2u + torch.sin(x)) ** 2).mean() + ((u(edges) - torch.sin(edges)) ** 2).mean()

    loss(x.clone().requires_grad_()).backward()
    got = [p.grad.clone() for p in u.parameters()]
    u.zero_grad()
    pinn_loss_native(u, x.clone().requires_grad_()).backward()
    assert_close(got, [p.grad for p in u.parameters()])


class Critic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))

    def forward(self, x):
        return self.net(x).sum()  # sum over the batch: its gradient is every sample's


@pytest.mark.parametrize("strategy", ["auto", "forward_over_reverse"])
def test_wgan_gradient_penalty(strategy):
    torch.manual_seed(0)
    D = Critic().double()
    real, fake = torch.randn(6, 3, dtype=F64), torch.randn(6, 3, dtype=F64)
    eps = torch.rand(6, 1, dtype=F64)
    xhat = (eps * real + (1 - eps) * fake).requires_grad_()

    g = di.gradient(di.FixedParams(D, strategy=strategy), B, xhat)
    penalty = ((g.norm(dim=1) - 1) ** 2).mean()
    (D(fake) - D(real) + 10 * penalty).backward()
    got = [xhat.grad, *(p.grad.clone() for p in D.parameters())]

    xhat.grad = None
    D.zero_grad()
    (g,) = torch.autograd.grad(D(xhat), xhat, create_graph=True)
    (D(fake) - D(real) + 10 * ((g.norm(dim=1) - 1) ** 2).mean()).backward()
    assert_close(got, [xhat.grad, *(p.grad for p in D.parameters())])
