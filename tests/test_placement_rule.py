"""One placement rule and one memory figure: every solver and the scan run where
mfgwork.placement.resolve says (table-driven, accelerators mocked, no solve on a device);
no other module decides placement; a device batch is checked by the bytes the batched Newton
declares, the figure a scan sizes its blocks by."""

from __future__ import annotations

import ast
import importlib
import sys
import warnings
from pathlib import Path

import pytest

import mfgwork as mw
from mfgwork.core import memory
from mfgwork.core.backend import Backend
from mfgwork.numerics.batch_newton import DEVICE_GRID_ARRAYS, device_bytes
from mfgwork.placement import resolve

PACKAGE = Path(mw.__file__).resolve().parent
SMALL = {"nx": 21, "nt": 20, "tol": 1e-5, "progress": False}


class Placed(Exception):
    """Raised where a solver would start work on an accelerator (mocked: none is here)."""


def _bars(n: int) -> list[mw.SantaFeBar]:
    return [mw.SantaFeBar(threshold=0.4 + 0.2 * i / max(n - 1, 1)) for i in range(n)]


def _populations() -> mw.SantaFePopulations:
    return mw.SantaFePopulations([mw.Population("a", 0.5, mw.SantaFeBar(threshold=0.5)),
                                  mw.Population("b", 0.5, mw.SantaFeBar(threshold=0.7))])


#: kind -> (the module whose get_backend the solve calls first, the solve, the problems
#: resolve is asked about, its keywords there, the backend a solver takes by default)
KINDS = {
    "1-D single": ("mfgwork.fdm1d", lambda kw: mw.solve(mw.SantaFeBar(), **SMALL, **kw),
                   mw.SantaFeBar(), {}, "numpy"),
    "1-D list": ("mfgwork.fdm1d", lambda kw: mw.solve(_bars(2), **SMALL, **kw), _bars(2),
                 {"numpy_on_cpu": True}, "numpy"),
    "2-D": ("mfgwork.solve2d",
            lambda kw: mw.solve(mw.TwoBars(T=2.0), nx=9, nt=6, tol=1e-6, progress=False, **kw),
            mw.TwoBars(T=2.0), {}, "numpy"),
    "populations": ("mfgwork.populations",
                    lambda kw: mw.solve(_populations(), **SMALL, **kw),
                    list(_populations().models), {}, "numpy"),
    "scan block": ("mfgwork.workflows.scan_solve",
                   lambda kw: mw.scan(mw.SantaFeBar, {"threshold": [0.5, 0.6]}, **SMALL, **kw),
                   mw.SantaFeBar(), {"batch_size": 2}, None),
}
CASES = [(kind, device, cuda, backend)
         for kind in KINDS for device in ("auto", "cpu") for cuda in (0, 1)
         for backend in (None, "torch") if backend is None or (cuda and device == "auto")]


@pytest.mark.parametrize(("kind", "device", "cuda", "backend"), CASES,
                         ids=[f"{k}-{d}-cuda{c}-{b or 'default'}" for k, d, c, b in CASES])
def test_every_solver_runs_where_the_rule_says(monkeypatch, mock_accelerators, kind, device,
                                                cuda, backend):
    module_name, run, problems, keywords, default = KINDS[kind]
    mock_accelerators(cuda=cuda, mps=False)
    module = importlib.import_module(module_name)
    original, asked = module.get_backend, []

    def spy(name="numpy", where="cpu", dtype=None):
        if not asked:   # the first call: where the solve runs
            asked.append((name, where))
            if where != "cpu":
                raise Placed
        return original(name, where, dtype)

    monkeypatch.setattr(module, "get_backend", spy)
    given = {"device": device} | ({} if backend is None else {"backend": backend})
    expected = resolve(problems, backend=backend or default, device=device, nx=21, nt=20,
                       **keywords)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = run(given)
        except Placed:
            assert expected.device != "cpu"
            assert asked == [(expected.backend, expected.device)]
            return
    assert asked == [(expected.backend, expected.device)]
    if kind == "scan block":
        assert out.attrs["backend"] == expected.backend
        assert set(out["device"].values.ravel()) == {"cpu"}
        assert out.attrs.get("placement") == (str(expected) if expected.chosen else None)
        return
    for res in out if isinstance(out, list) else [out]:
        assert (res.backend, res.device) == (expected.backend, expected.device)
        if kind == "2-D" or not expected.chosen:   # (2-D results record no placement)
            assert "placement" not in res.params
        else:
            assert res.params["placement"] == expected.record()["placement"]


def test_the_rule_itself(mock_accelerators):
    mock_accelerators(cuda=1)
    assert resolve(mw.SantaFeBar(), backend="torch", device="auto").backend == "torch"
    batch = resolve(_bars(2), backend="torch", device="auto", numpy_on_cpu=True)
    assert (batch.backend, batch.device) == ("numpy", "cpu")
    assert "compiled NumPy loops" in batch.reason
    big = resolve(_bars(2), backend="torch", device="auto", batch_size=64, numpy_on_cpu=True)
    assert (big.backend, big.device) == ("torch", "cuda")
    room = resolve(mw.Room(), backend="torch", device="auto")
    assert (room.backend, room.device) == ("torch", "cuda") and room.row is None
    explicit = resolve(mw.SantaFeBar(), device="cuda:1")
    assert (explicit.backend, explicit.chosen, explicit.record()) == ("torch", False, {})
    assert resolve(mw.SantaFeBar(), device="cpu").backend == "numpy"
    passed = resolve(mw.SantaFeBar(), backend="jax", device="auto")
    assert (passed.backend, passed.device, passed.chosen) == ("jax", "auto", False)


# -- no module but placement.py decides -----------------------------------------------------
#: what the package's modules may take from mfgwork.placement: the rule and its answer (also
#: as a solve's backend, device and record: place_solve)
PUBLIC_RULE = {"Placement", "resolve", "device_backend", "place_solve"}
#: core/backend.py resolves the device name "auto" of a backend already given (CUDA, else
#: MPS, else the CPU: get_backend's documented meaning); it chooses no backend
RESOLVES_DEVICE_NAMES = {PACKAGE / "core" / "backend.py"}


def _mentions_device(node: ast.AST) -> bool:
    if isinstance(node, ast.Name):
        return "device" in node.id
    if isinstance(node, ast.Attribute):
        return "device" in node.attr
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and "device" in str(node.slice.value)
    if isinstance(node, ast.Call):   # options.get("device")
        return any(isinstance(a, ast.Constant) and "device" in str(a.value) for a in node.args)
    return False


def _is_auto(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value == "auto"
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_is_auto(e) for e in node.elts)
    return False


def auto_device_comparisons(source: str) -> list[int]:
    """Lines of ``source`` that compare a device with "auto" (==, !=, in, not in)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_auto(s) for s in sides) and any(_mentions_device(s) for s in sides):
                found.append(node.lineno)
    return found


def placement_imports(path: Path, source: str | None = None) -> set[str]:
    """The names the module at ``path`` (its ``source``, read if None) imports from
    mfgwork.placement (``import mfgwork.placement``: "<module>")."""
    package = path.relative_to(PACKAGE).parts[:-1]
    names = set()
    for node in ast.walk(ast.parse(path.read_text() if source is None else source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *(node.module.split(".") if node.module else [])])
            elif (node.module or "").startswith("mfgwork"):
                module = node.module.removeprefix("mfgwork").removeprefix(".")
            else:
                continue
            if module == "placement":
                names |= {a.name for a in node.names}
            elif module == "":
                names |= {a.name for a in node.names if a.name == "placement"}
        elif isinstance(node, ast.Import):
            names |= {"<module>" for a in node.names if a.name == "mfgwork.placement"}
    return names


#: the scan's placement before the rule moved to mfgwork.placement: what the check refuses
BEFORE = '''
def placement(device, backend, dtype, problem=None, points=1, nx=201, nt=201):
    if device == "auto" and isinstance(problem, MFGProblem2D):
        be = get_backend(backend or "numpy", "cpu" if backend in (None, "numpy") else "auto",
                         dtype)
        return be, Placement("fdm", points, be.name, be.device, "2-D", None)
    if device == "auto" and problem is not None and backend in (None, *BACKENDS):
        chosen = place(problem, "fdm", nx=nx, nt=nt, backend=backend, batch_size=points)
        return get_backend(chosen.backend, chosen.device, dtype), chosen
    if backend is None:
        backend = "numpy" if device == "cpu" else "torch"
    return get_backend(backend, device, dtype), None
'''


def test_the_checks_find_a_placement_decided_elsewhere():
    assert auto_device_comparisons(BEFORE) == [3, 7]
    assert auto_device_comparisons("if not isinstance(device, str) or device != 'auto': pass")
    assert auto_device_comparisons("x = options.get('device') in ('cpu', 'auto')")
    assert not auto_device_comparisons("if mode == 'auto' or compile_steps != 'auto': pass")
    scan_solve = PACKAGE / "workflows" / "scan_solve.py"
    assert placement_imports(scan_solve, "from ..placement import Placement\n"
                             "from ..placement import placement as place\n") == {
        "Placement", "placement"}
    assert placement_imports(scan_solve, "from .. import placement\n") == {"placement"}
    assert placement_imports(scan_solve, "from mfgwork.placement import _decide\n") == {
        "_decide"}


def test_no_module_but_placement_decides_where_to_run():
    modules = [p for p in sorted(PACKAGE.rglob("*.py"))
               if p.name != "__init__.py" or p.parent != PACKAGE]
    assert PACKAGE / "workflows" / "scan_solve.py" in modules
    deciding = {str(p.relative_to(PACKAGE)): lines for p in modules
                if p != PACKAGE / "placement.py" and p not in RESOLVES_DEVICE_NAMES
                and (lines := auto_device_comparisons(p.read_text()))}
    assert deciding == {}, f"device compared with 'auto' outside placement.py: {deciding}"
    beyond = {str(p.relative_to(PACKAGE)): names - PUBLIC_RULE for p in modules
              if p != PACKAGE / "placement.py" and (names := placement_imports(p)) - PUBLIC_RULE}
    assert beyond == {}, f"placement internals used outside placement.py: {beyond}"
    assert placement_imports(PACKAGE / "workflows" / "scan_solve.py") >= {"resolve"}


# -- one memory figure for device batches ---------------------------------------------------
def _fake_gpu(monkeypatch, mock_accelerators, free: int) -> Backend:
    """A CUDA device (mocked) with ``free`` bytes, as the memory check and the scan see it."""
    from mfgwork.workflows import scan_solve

    mock_accelerators(cuda=1)
    monkeypatch.setattr(memory, "available_bytes", lambda backend: free)
    monkeypatch.setattr(scan_solve, "device_info",
                        lambda device: {"memory_total": free, "memory_reserved": 0})
    monkeypatch.setattr(scan_solve, "_host_available", lambda: 10**15)
    return Backend("torch", "cuda", "float32")


def test_the_check_of_a_device_batch_and_the_scan_block_share_one_figure(monkeypatch,
                                                                          mock_accelerators):
    from mfgwork.fdm1d import _newton_bytes
    from mfgwork.workflows import scan_solve

    free = 3 * 2**30
    gpu = _fake_gpu(monkeypatch, mock_accelerators, free)
    nx, nt = 201, 201
    grid = mw.SantaFeBar().grid(nx, nt)
    per_point = _newton_bytes(_bars(2), None, grid, gpu)
    assert per_point == device_bytes(nx, nt, 4) == DEVICE_GRID_ARRAYS * (nt + 1) * nx * 4
    block = scan_solve.points_per_block(gpu, nx, nt, 2, 10**6)
    assert block == memory.batch_that_fits(free * memory.BLOCK_FRACTION, per_point) > 100
    # the largest batch the check accepts under the block's share of the memory is the block
    share = int(free * memory.BLOCK_FRACTION)
    memory.check_fdm(nx, nt, gpu, [nt], 5, share, batch=block, per_problem=per_point)
    with pytest.raises(mw.ParameterError, match=r"^nx, nt or the batch size too large"):
        memory.check_fdm(nx, nt, gpu, [nt], 5, share, batch=block + 1, per_problem=per_point)
    # the figure is the batched Newton's on devices alone: the CPU's Newton is matrix-free,
    # and another iteration is counted by check_fdm's own estimate
    assert _newton_bytes(_bars(2), None, grid, mw.get_backend("numpy")) == 0
    assert _newton_bytes(_bars(2), "anderson", grid, gpu) == 0
    assert _newton_bytes(_bars(2), None, grid, mw.mps_emulation()) == per_point
    congested = [mw.SantaFeBar(hamiltonian=mw.Congestion(1.0))]
    assert _newton_bytes(congested, None, grid, gpu) == 0


def test_a_device_batch_beyond_memory_is_refused_before_any_allocation(monkeypatch,
                                                                       mock_accelerators):
    nx, nt, batch = 201, 201, 64
    per_point = device_bytes(nx, nt, 4)
    free = batch * per_point - 1   # the old estimate, 6 arrays a problem, fits 5 times over
    assert 5 * batch * memory.FDM_GRID_ARRAYS * (nt + 1) * nx * 4 < free
    _fake_gpu(monkeypatch, mock_accelerators, free)
    solve = sys.modules["mfgwork.fdm1d"]
    for name in ("initial_state", "member_arrays", "FiniteDifferences", "_coupling_groups"):
        monkeypatch.setattr(solve, name, _never)
    with pytest.raises(mw.ParameterError, match=rf"^nx, nt or the batch size too large: a batch "
                                                rf"of {batch} solves on an nx={nx} x nt={nt}"):
        mw.solve(_bars(batch), nx=nx, nt=nt, device="cuda", dtype="float32")
    with pytest.raises(mw.ParameterError, match=r"^nx, nt or the batch size too large"):
        mw.solve(_bars(batch), nx=nx, nt=nt, backend="torch", device="auto", dtype="float32")


def _never(*args, **kwargs):
    raise AssertionError("work started before the memory check")
