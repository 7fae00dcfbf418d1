"""The ``diffiface`` command: check, bench, info."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import sys

from ._arrays import named, registered
from .core.registry import FRAMEWORKS

# command-line name -> (backend type, framework or None)
BACKENDS = {(module or "fd"): (backend, module) for backend, module in FRAMEWORKS.items()}


def main(argv: list | None = None) -> int:
    """Entry point of ``diffiface`` and ``python -m diffiface``; returns the exit code."""
    parser = argparse.ArgumentParser(
        prog="diffiface", description="One differentiation API over several frameworks."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="run the consistency matrix on every backend")
    check.add_argument("--backends", help=f"comma-separated: {','.join(BACKENDS)}")
    check.add_argument("--operators", help="comma-separated operator names")
    check.add_argument("--dtypes", default="float64,float32", help="default: float64,float32")
    check.add_argument("--prepared", action="store_true", help="call prepare_<op> first")
    check.add_argument("--json", metavar="PATH", help="also write the rows as JSON ('-': stdout)")
    check.add_argument(
        "--no-x64", action="store_true", help="leave JAX's x64 off (float64 skipped on JAX)"
    )
    bench = sub.add_parser("bench", help="time the operators on every backend")
    bench.add_argument("--backends", help=f"comma-separated: {','.join(BACKENDS)}")
    bench.add_argument("--operators", default="gradient,jacobian,jvp,vjp,hvp,hessian")
    bench.add_argument("--repeat", type=int, default=20)
    bench.add_argument(
        "--out", default=".", help="folder for bench.json and bench.png (default: .)"
    )
    bench.add_argument(
        "--force", action="store_true", help="overwrite bench.json and bench.png in --out"
    )
    info = sub.add_parser("info", help="versions, available backends, JAX's x64 setting")
    info.add_argument("--support", action="store_true", help="print the support matrix (markdown)")
    args = parser.parse_args(argv)
    return {"check": _check, "bench": _bench, "info": _info}[args.command](args)


def _backends(spec: str | None) -> list:
    from .testing import available_backends

    if not spec:
        return available_backends()
    out = []
    for name in spec.split(","):
        name = name.strip()
        if name not in BACKENDS:
            raise SystemExit(f"diffiface: unknown backend {name!r}; use {', '.join(BACKENDS)}.")
        backend, module = BACKENDS[name]
        if module and importlib.util.find_spec(module) is None:
            raise SystemExit(f'diffiface: {name} is not installed: pip install "diffiface[{name}]"')
        out.append(backend())
    return out


def _check(args) -> int:
    from .testing import OPERATORS, check, default_scenarios

    backends = _backends(args.backends)
    if not args.no_x64:
        for b in backends:
            framework = named(b.framework)
            if framework is not None:
                framework.use_float64()  # this command's process only (JAX's x64)
    ops = tuple(o.strip() for o in args.operators.split(",")) if args.operators else OPERATORS
    unknown = [o for o in ops if o not in OPERATORS]
    if unknown:
        raise SystemExit(f"diffiface: unknown operator(s) {unknown}; known: {', '.join(OPERATORS)}")
    dtypes = tuple(d.strip() for d in args.dtypes.split(",") if d.strip())
    if not dtypes or any(d not in ("float32", "float64") for d in dtypes):
        raise SystemExit(f"diffiface: --dtypes takes float32 and/or float64, got {args.dtypes!r}")
    with _Progress() as progress:
        report = check(
            backends, default_scenarios(dtypes), ops, prepared=args.prepared, progress=progress
        )
    out = sys.stderr if args.json == "-" else sys.stdout  # keep stdout for the JSON
    print(report, file=out)
    if args.json == "-":
        print(report.to_json())
    elif args.json:
        with open(args.json, "w") as fh:
            fh.write(report.to_json())
    for r in report.failures():
        print(f"{r.status.upper()}: {r.backend} {r.scenario} {r.operator}: {r.reason}", file=out)
    if not any(r.status != "skip" for r in report.results):
        print(
            "diffiface: nothing ran: every run was skipped (see the reasons with --json)", file=out
        )
        return 1
    return 0 if report.ok else 1


def _bench(args) -> int:
    from .testing import benchmark, default_scenarios

    backends = _backends(args.backends)
    ops = tuple(o.strip() for o in args.operators.split(","))
    out_json, png = _bench_paths(args.out, args.force)  # before the minutes of timing
    rows = benchmark(backends, default_scenarios(("float32",)), ops, repeat=args.repeat)
    print(f"{'scenario':<28} {'operator':<12} {'backend':<18} {'µs':>10} {'ratio':>7}")
    for r in rows:
        print(
            f"{r['scenario']:<28} {r['operator']:<12} {r['backend']:<18} "
            f"{r['seconds'] * 1e6:>10.1f} {r['ratio']:>7.2f}"
        )
    os.makedirs(args.out, exist_ok=True)
    with open(out_json, "w") as fh:
        json.dump(rows, fh, indent=1)
    if _chart(rows, png):
        print(f"wrote {out_json} and {png}")
    else:
        print(f"wrote {out_json} (pip install matplotlib for the chart)")
    return 0


def _bench_paths(out: str, force: bool) -> tuple[str, str]:
    """The paths of bench.json and bench.png in ``out``; an error (exit status 1) when
    ``out`` is a file, or when either file exists and ``force`` is off."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise SystemExit(f"diffiface bench: --out {out} is a file; pass a folder.")
    paths = os.path.join(out, "bench.json"), os.path.join(out, "bench.png")
    existing = [p for p in paths if os.path.exists(p)]
    if existing and not force:
        raise SystemExit(
            f"diffiface bench: {' and '.join(existing)} already "
            f"{'exist' if len(existing) > 1 else 'exists'}; pass --force to overwrite, or "
            "--out DIR to write elsewhere."
        )
    return paths


def _chart(rows: list, path: str) -> bool:
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['scenario']} {r['operator']} {r['backend']}" for r in rows]
    fig, ax = plt.subplots(figsize=(9, 0.25 * len(rows) + 1))
    ax.barh(labels, [r["ratio"] for r in rows])
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.invert_yaxis()
    ax.set_xlabel("time / fastest backend's time")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _info(args) -> int:
    if args.support:
        from ._gaps import gaps_table
        from ._support import nested_table, support_table

        print(support_table() + "\n\n" + nested_table() + "\n\n" + gaps_table())
        return 0
    print(f"diffiface {_version('diffiface')}")
    print(f"python {sys.version.split()[0]}")
    for name, (_, module) in BACKENDS.items():
        if module is None:
            print(f"{name:<9} available (NumPy {_version('numpy')})")
            continue
        found = importlib.util.find_spec(module) is not None
        state = f"available ({module} {_version(module)})" if found else "not installed"
        print(f"{name:<9} {state}")
    for framework in registered():
        line = framework.settings()
        if line is not None:
            print(line)
    return 0


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class _Progress:
    """A rich progress bar on a terminal (plain lines on stderr otherwise)."""

    def __enter__(self):
        self._bar = None
        if sys.stderr.isatty():
            try:
                from rich.progress import Progress
            except ImportError:
                return self
            self._bar = Progress(transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task("checking", total=None)
        return self

    def __call__(self, done: int, total: int, label: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=total, description=label[:50])
        elif done == total or done % 200 == 0:
            print(f"checked {done}/{total}", file=sys.stderr)

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.__exit__(*exc)
        return False
