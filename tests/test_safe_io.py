"""Bad input refused before work, writers that never destroy what they did not make, checked
loaders, and interrupted runs that leave nothing behind.

The table ``BAD`` drives one test: for each bad input across the API, the command line, sweep
specs and the loaders, the error type, that the message names the parameter or the file, and
that no work was done (counters on the HJB/FP sweeps, the particle solver, papermill, the
sweep executor and ``np.load`` all stay at zero).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import dead_temporaries, write_notebook

import mfgwork as mw
from mfgwork.__main__ import main as cli
from mfgwork.core import storage
from mfgwork.core.errors import BackendError, LoadError, ParameterError
from mfgwork.workflows import runs, sweeps

ROOT = Path(__file__).resolve().parents[1]
np_load = np.load  # for building bad files; calls under test are counted
#: Entries whose defect is in the array values, so the arrays must be read to find it.
READS_DATA = {"M NaN"}


# -- fixtures ------------------------------------------------------------------------------------
def make_notebook(path: Path, body: str) -> Path:
    """A notebook with parameters ``delay`` and ``out_dir`` and one ``body`` cell."""
    return write_notebook(path, 'delay = 0.0\nout_dir = ""', body)


SLOW = ("import pathlib, time\n"
        "pathlib.Path(out_dir, 'started').touch()\n"
        "time.sleep(delay)\n"
        "import mfgwork as mw\n"
        "mw.save_run(out_dir, parameters={'delay': delay})")


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """A result folder written by ``Result.save`` (Santa Fe on a 21 x 20 grid)."""
    res = mw.solve(mw.SantaFeBar(), nx=21, nt=20, progress=False)
    return res.save(tmp_path_factory.mktemp("saved") / "run")


@pytest.fixture(scope="module")
def saved_result(saved) -> mw.Result:
    return mw.load(saved)


@pytest.fixture
def env(tmp_path, saved, saved_result, monkeypatch) -> SimpleNamespace:
    """Paths for the table, and counters on every piece of heavy work."""
    import papermill

    from mfgwork.numerics.fdm.sweeps import FiniteDifferences

    work = {"hjb": 0, "fp": 0, "particles": 0, "papermill": 0, "sweep": 0, "np.load": 0}

    def counting(key, fn):
        def wrapper(*args, **kwargs):
            work[key] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(FiniteDifferences, "solve_hjb",
                        counting("hjb", FiniteDifferences.solve_hjb))
    monkeypatch.setattr(FiniteDifferences, "solve_fp", counting("fp", FiniteDifferences.solve_fp))
    monkeypatch.setattr(mw.ParticleFP, "solve_fp", counting("particles", mw.ParticleFP.solve_fp))
    monkeypatch.setattr(papermill, "execute_notebook",
                        counting("papermill", papermill.execute_notebook))
    monkeypatch.setattr(sweeps, "_execute", counting("sweep", sweeps._execute))
    monkeypatch.setattr(np, "load", counting("np.load", np.load))
    nbdir = tmp_path / "nb"
    nbdir.mkdir()
    notebook = make_notebook(nbdir / "slow.ipynb", SLOW)
    (nbdir / "neighbour.txt").write_text("keep me")
    unrelated = tmp_path / "unrelated"
    unrelated.mkdir()
    (unrelated / "thesis.tex").write_text("years of work")
    afile = tmp_path / "notes.txt"
    afile.write_text("notes")
    work_dir = tmp_path / "cwd"
    work_dir.mkdir()
    monkeypatch.chdir(work_dir)
    return SimpleNamespace(tmp=tmp_path, notebook=notebook, unrelated=unrelated, file=afile,
                           cwd=work_dir, saved=saved, result=saved_result, work=work)


def generic(**over):
    kw = {"x_min": -1.0, "x_max": 1.0, "T": 1.0, "sigma": 0.4,
          "m0": lambda x: 1.0 + 0.0 * x, "g": lambda x: 0.0 * x, "f": lambda t, x, m: m}
    return mw.MFGProblem(**(kw | over))


def solve_generic(**over):
    return lambda e: mw.solve(generic(**over), nx=21, nt=10, progress=False)


def solve_santa_fe(problem=None, **kwargs):
    return lambda e: mw.solve(problem or mw.SantaFeBar(), **({"progress": False} | kwargs))


def copy_saved(e, edit) -> Path:
    """A copy of the saved result folder, changed by ``edit(folder)``."""
    import shutil

    folder = e.tmp / "copy"
    shutil.copytree(e.saved, folder)
    edit(folder)
    return folder


def load_edited(edit):
    return lambda e: mw.load(copy_saved(e, edit))


def write_to(name, text: str | bytes):
    def edit(folder: Path) -> None:
        (folder / name).write_bytes(text.encode() if isinstance(text, str) else text)
    return edit


def edit_json(name, change):
    def edit(folder: Path) -> None:
        data = json.loads((folder / name).read_text())
        change(data)
        (folder / name).write_text(json.dumps(data))
    return edit


def edit_arrays(change):
    def edit(folder: Path) -> None:
        with np_load(folder / "arrays.npz") as data:
            arrays = {k: data[k] for k in data.files}
        change(arrays)
        np.savez_compressed(folder / "arrays.npz", **arrays)
    return edit


def truncate(name, keep=0.5):
    def edit(folder: Path) -> None:
        data = (folder / name).read_bytes()
        (folder / name).write_bytes(data[: int(len(data) * keep)])
    return edit


def cli_run(*args):
    def call(e):
        code = cli(["run", str(e.notebook), *[str(a(e)) if callable(a) else a for a in args]])
        assert code == 2   # bad input: nothing was run
        raise ParameterError("command line refused (see captured stderr)")
    return call


def cli_sweep(*args):
    def call(e):
        code = cli(["sweep", str(e.notebook), *[str(a(e)) if callable(a) else a for a in args]])
        assert code == 2
        raise ParameterError("command line refused (see captured stderr)")
    return call


def sweep_with(grid, out=lambda e: e.tmp / "sweep", **kwargs):
    return lambda e: mw.sweep(e.notebook, grid, out(e), workers=1, progress=False, **kwargs)


def sweep_folder(e) -> Path:
    """A sweep folder planned for ``delay: [0.0]`` (nothing run)."""
    folder = e.tmp / "planned"
    folder.mkdir()
    storage.write_marker(folder, "sweep")
    storage.write_json(folder / "sweep.json", {
        "notebook": str(e.notebook.resolve()), "spec": {"delay": [0.0]}, "fixed": {},
        "parameters": ["delay"], "runs": []})
    return folder


def bomb(folder: Path) -> None:
    """arrays.npz whose U decompresses to far more than the (lowered) limit."""
    with np_load(folder / "arrays.npz") as data:
        arrays = {k: data[k] for k in data.files}
    levels, nx = arrays["U"].shape[0], 100_000
    arrays |= {"x": np.linspace(-5.0, 5.0, nx), "U": np.zeros((levels, nx)),
               "M": np.zeros((levels, nx))}
    np.savez_compressed(folder / "arrays.npz", **arrays)


# (id, call, error type, words the message must contain)
BAD = [
    # mw.solve arguments
    ("nx=2", solve_santa_fe(nx=2), ParameterError, ["nx=2"]),
    ("nx=10.5", solve_santa_fe(nx=10.5), ParameterError, ["nx=10.5"]),
    ("nx='41'", solve_santa_fe(nx="41"), ParameterError, ["nx='41'"]),
    ("nt=0", solve_santa_fe(nt=0), ParameterError, ["nt=0"]),
    ("tol=0", solve_santa_fe(tol=0.0), ParameterError, ["tol=0.0"]),
    ("tol=nan", solve_santa_fe(tol=float("nan")), ParameterError, ["tol=nan"]),
    ("tol=str", solve_santa_fe(tol="1e-8"), ParameterError, ["tol='1e-8'"]),
    ("max_iter=0", solve_santa_fe(max_iter=0), ParameterError, ["max_iter=0"]),
    ("method", solve_santa_fe(method="spectral"), ParameterError, ["method='spectral'"]),
    ("backend", solve_santa_fe(backend="cupy"), BackendError, ["backend='cupy'"]),
    ("device", solve_santa_fe(device="tpu"), BackendError, ["device='tpu'"]),
    ("device=3", solve_santa_fe(device=3), BackendError, ["device=3"]),
    ("dtype=float16", solve_santa_fe(dtype="float16"), BackendError, ["dtype='float16'"]),
    ("dtype=int", solve_santa_fe(dtype=int), BackendError, ["dtype=<class 'int'>"]),
    ("dtype=comma", solve_santa_fe(dtype=","), BackendError, ["dtype=','"]),
    ("dtype=record", solve_santa_fe(dtype="f4,f8"), BackendError, ["dtype='f4,f8'"]),
    ("iteration", solve_santa_fe(iteration="newton"), ParameterError, ["iteration='newton'"]),
    ("problem=dict", lambda e: mw.solve({"threshold": 0.6}), ParameterError, ["problem="]),
    ("n_particles with fdm", solve_santa_fe(n_particles=10), ParameterError,
     ["n_particles=10", "method='fdm'"]),
    ("n_particles=0", solve_santa_fe(method="particles", n_particles=0), ParameterError,
     ["n_particles=0"]),
    ("seed=-1", solve_santa_fe(method="particles", seed=-1), ParameterError, ["seed=-1"]),
    ("initial shape", lambda e: mw.solve(mw.HopfColeProblem(), nx=31, nt=20, progress=False,
                                         initial=e.result),
     ParameterError, ["initial", "(21, 31)"]),
    ("max_memory text", solve_santa_fe(max_memory="lots"), ParameterError,
     ["max_memory='lots'"]),
    ("max_memory<0", solve_santa_fe(max_memory=-1), ParameterError, ["max_memory=-1"]),
    # size guard
    ("nt=1e8", solve_santa_fe(nx=101, nt=10**8), ParameterError, ["nt=100000000", "GiB"]),
    ("nx=1e7", solve_santa_fe(nx=10**7, nt=10**5), ParameterError, ["nx=10000000", "GiB"]),
    ("max_memory small", solve_santa_fe(nx=201, nt=201, max_memory="1 MiB"), ParameterError,
     ["max_memory", "1 MiB", "nx=201"]),
    ("particles count", solve_santa_fe(method="particles", n_particles=10**13, tol=0.1),
     ParameterError, ["n_particles=10000000000000"]),
    ("particles grid", lambda e: mw.ParticleFP(mw.Grid(-1.0, 1.0, 10**6, 1.0, 10**5), 0.5,
                                               mw.get_backend(), n_particles=10),
     ParameterError, ["nx=1000000, nt=100000"]),
    ("batch size", lambda e: mw.solve_batch([mw.SantaFeBar()] * 2, nx=2001, nt=10**7),
     ParameterError, ["nt=10000000"]),
    # derived quantities
    ("sigma=1e160", solve_santa_fe(mw.SantaFeBar(sigma=1e160)), ParameterError,
     ["sigma=1e+160", "nu"]),
    ("T=1e100", solve_santa_fe(mw.SantaFeBar(T=1e100)), ParameterError, ["T=1e+100"]),
    ("sigma=1e6", solve_santa_fe(mw.SantaFeBar(sigma=1e6)), ParameterError,
     ["sigma=1000000.0", "mass"]),
    ("sigma=1e-200", solve_santa_fe(mw.SantaFeBar(sigma=1e-200)), ParameterError,
     ["sigma=1e-200"]),
    ("x range overflow", solve_generic(x_min=-1e308, x_max=1e308), ParameterError,
     ["x_max=1e+308"]),
    # problem parameters
    ("sigma=0", lambda e: mw.SantaFeBar(sigma=0.0), ParameterError, ["sigma=0.0"]),
    ("T=inf", lambda e: mw.SantaFeBar(T=float("inf")), ParameterError, ["T=inf"]),
    ("threshold=1", lambda e: mw.SantaFeBar(threshold=1.0), ParameterError, ["threshold=1.0"]),
    ("threshold str", lambda e: mw.SantaFeBar(threshold="0.5"), ParameterError,
     ["threshold='0.5'"]),
    ("good<bad", lambda e: mw.SantaFeBar(good=-10.0), ParameterError, ["good=-10.0"]),
    ("eps<0", lambda e: mw.SantaFeBar(eps=-0.1), ParameterError, ["eps=-0.1"]),
    ("x_max<x_min", lambda e: generic(x_max=-2.0), ParameterError, ["x_max=-2.0"]),
    ("m0 not callable", lambda e: generic(m0=3.0), ParameterError, ["m0=3.0"]),
    # user callables
    ("m0 zero mass", solve_generic(m0=lambda x: 0.0 * x), ParameterError, ["m0", "mass"]),
    ("m0 negative", solve_generic(m0=lambda x: x), ParameterError, ["m0", "negative"]),
    ("m0 inf", solve_generic(m0=lambda x: np.inf + 0.0 * x), ParameterError,
     ["m0 returned non-finite", "x=-1"]),
    ("m0 complex", solve_generic(m0=lambda x: x + 1j), ParameterError, ["m0", "complex"]),
    ("m0 None", solve_generic(m0=lambda x: None), ParameterError, ["m0 returned None"]),
    ("m0 raises", solve_generic(m0=lambda x: 1 / 0), ParameterError,
     ["m0 raised ZeroDivisionError"]),
    ("g shape", solve_generic(g=lambda x: x[:-1]), ParameterError, ["g returned shape (20,)"]),
    ("g text", solve_generic(g=lambda x: "zero"), ParameterError, ["g returned 'zero'"]),
    ("g raises", solve_generic(g=lambda x: undefined), ParameterError,  # noqa: F821
     ["g raised NameError"]),
    ("f raises", solve_generic(f=lambda t, x, m: 1 / 0), ParameterError,
     ["f raised ZeroDivisionError at t=0.1"]),
    ("f complex", solve_generic(f=lambda t, x, m: m + 0j), ParameterError, ["f", "complex"]),
    ("f nan", solve_generic(f=lambda t, x, m: np.where(x > 0.55, np.nan, 0.0)), ParameterError,
     ["f returned non-finite", "t=0.1", "x=0.6"]),
    ("f shape", solve_generic(f=lambda t, x, m: m[:3]), ParameterError,
     ["f returned shape (3,)"]),
    ("f None", solve_generic(f=lambda t, x, m: None), ParameterError, ["f returned None"]),
    ("f beyond float32", lambda e: mw.solve(generic(f=lambda t, x, m: np.full(x.shape, 1e300)),
                                            nx=21,
                                            nt=10, dtype="float32", tol=3e-4,
                                            progress=False),
     ParameterError, ["f returned non-finite", "float32"]),
    # batches
    ("batch empty", lambda e: mw.solve_batch([]), ParameterError, ["problems=[]"]),
    ("batch item", lambda e: mw.solve_batch([mw.SantaFeBar(), 3]), ParameterError,
     ["problems[1]=3"]),
    ("batch T", lambda e: mw.solve_batch([mw.SantaFeBar(), mw.SantaFeBar(T=5.0)]),
     ParameterError, ["problems[1].T=5.0"]),
    # notebook runs (API)
    ("run missing notebook", lambda e: runs.run_notebook(e.tmp / "nope.ipynb", {}, "o"),
     ParameterError, ["nope.ipynb"]),
    ("run unknown parameter", lambda e: runs.run_notebook(e.notebook, {"speed": 1}, "o"),
     ParameterError, ["'speed' is unknown"]),
    ("run wrong type", lambda e: runs.run_notebook(e.notebook, {"delay": "slow"}, "o"),
     ParameterError, ["delay='slow'"]),
    ("run out_dir parameter", lambda e: runs.run_notebook(e.notebook, {"out_dir": "x"}, "o"),
     ParameterError, ["out_dir"]),
    ("run into unrelated folder", lambda e: runs.run_notebook(e.notebook, {}, e.unrelated),
     ParameterError, ["unrelated", "thesis.tex", "force"]),
    ("run into file", lambda e: runs.run_notebook(e.notebook, {}, e.file), ParameterError,
     ["notes.txt", "file"]),
    ("run into cwd", lambda e: runs.run_notebook(e.notebook, {}, "."), ParameterError,
     ["'.'", "current directory"]),
    ("run into notebook folder", lambda e: runs.run_notebook(e.notebook, {}, e.notebook.parent),
     ParameterError, ["nb'", "the folder of the notebook slow.ipynb"]),
    ("run into ancestor", lambda e: runs.run_notebook(e.notebook, {}, e.tmp), ParameterError,
     ["ancestor"]),
    # command line
    ("cli -o file", cli_run("-o", lambda e: e.file), ParameterError, ["notes.txt", "file"]),
    ("cli -o .", cli_run("-o", "."), ParameterError, ["current directory"]),
    ("cli -p wrong type", cli_run("-p", "delay", "slow", "-o", "x"), ParameterError,
     ["delay='slow'"]),
    ("cli -o notebook", cli_run("-o", lambda e: e.notebook), ParameterError,
     ["slow.ipynb", "file"]),
    # save_run / Result.save
    ("save_run unrelated", lambda e: mw.save_run(e.unrelated, parameters={"a": 1}),
     ParameterError, ["unrelated", "thesis.tex"]),
    ("save_run file", lambda e: mw.save_run(e.file, parameters={"a": 1}), ParameterError,
     ["notes.txt"]),
    ("Result.save cwd", lambda e: e.result.save("."), ParameterError,
     ["current directory"]),
    ("figures into unrelated", lambda e: mw.plots.write_figures({}, e.unrelated), ParameterError,
     ["folder=", "thesis.tex"]),
    ("figures into cwd", lambda e: mw.plots.save_figures(e.result, "."), ParameterError,
     ["current directory"]),
    # sweeps
    ("sweep unknown parameter", sweep_with({"speed": [1, 2]}), ParameterError, ["speed"]),
    ("sweep too many runs", sweep_with({"delay": {"linspace": [0, 1, 20001]}}),
     ParameterError, ["20001 runs", "max_runs"]),
    ("sweep 1e12 runs", sweep_with({"delay": {"linspace": [0, 1, 10**12]}}), ParameterError,
     ["1000000000000 runs"]),
    ("sweep max_runs", sweep_with({"delay": [0.0, 0.1]}, max_runs=1), ParameterError,
     ["2 runs", "max_runs=1"]),
    ("sweep workers=0", lambda e: mw.sweep(e.notebook, {"delay": [0.0]}, e.tmp / "s",
                                           workers=0), ParameterError, ["workers=0"]),
    ("sweep into unrelated", sweep_with({"delay": [0.0]}, out=lambda e: e.unrelated),
     ParameterError, ["unrelated", "thesis.tex"]),
    ("sweep into file", sweep_with({"delay": [0.0]}, out=lambda e: e.file), ParameterError,
     ["notes.txt"]),
    ("sweep into run folder", sweep_with({"delay": [0.0]}, out=lambda e: e.saved),
     ParameterError, ["a run folder, not a sweep folder"]),
    ("sweep another spec", sweep_with({"delay": [0.5]}, out=sweep_folder), ParameterError,
     ["another spec", "replan"]),
    ("cli sweep bad spec", cli_sweep("--grid", "speed: [1]", "-o", lambda e: e.tmp / "s"),
     ParameterError, ["speed"]),
    ("cli sweep max runs", cli_sweep("--grid", "delay: [0.0, 0.1]", "--max-runs", "1", "-o",
                                     lambda e: e.tmp / "s"), ParameterError, ["max_runs=1"]),
    ("cli sweep replan", cli_sweep("--grid", "delay: [0.3]", "-o", sweep_folder),
     ParameterError, ["another spec", "--replan"]),
    # loaders
    ("load missing", lambda e: mw.load(e.tmp / "missing"), LoadError, ["missing"]),
    ("load a file", lambda e: mw.load(e.file), LoadError, ["notes.txt"]),
    ("metrics truncated", load_edited(truncate("metrics.json")), LoadError,
     ["metrics.json", "not valid JSON"]),
    ("metrics missing", load_edited(lambda f: (f / "metrics.json").unlink()), LoadError,
     ["metrics.json", "does not exist"]),
    ("metrics no converged", load_edited(edit_json("metrics.json",
                                                   lambda d: d.pop("converged"))),
     LoadError, ["metrics.json", "'converged'"]),
    ("converged='no'", load_edited(edit_json("metrics.json",
                                             lambda d: d.update(converged="no"))),
     LoadError, ["metrics.json", "converged='no'"]),
    ("history a list", load_edited(edit_json("metrics.json", lambda d: d.update(history=[]))),
     LoadError, ["metrics.json", "history"]),
    ("parameters a list", load_edited(write_to("parameters.json", "[1, 2]")), LoadError,
     ["parameters.json"]),
    ("arrays truncated", load_edited(truncate("arrays.npz")), LoadError,
     ["arrays.npz", "not a readable NPZ"]),
    ("arrays garbage", load_edited(write_to("arrays.npz", os.urandom(2000))), LoadError,
     ["arrays.npz"]),
    ("arrays missing", load_edited(lambda f: (f / "arrays.npz").unlink()), LoadError,
     ["arrays.npz", "does not exist"]),
    ("M wrong shape", load_edited(edit_arrays(lambda a: a.update(M=a["M"][:, :-1]))),
     LoadError, ["arrays.npz", "'M'"]),
    ("U missing", load_edited(edit_arrays(lambda a: a.pop("U"))), LoadError,
     ["arrays.npz", "'U'"]),
    ("U complex", load_edited(edit_arrays(lambda a: a.update(U=a["U"] + 0j))), LoadError,
     ["arrays.npz", "'U'", "complex"]),
    ("M NaN", load_edited(edit_arrays(lambda a: a["M"].__setitem__((0, 0), np.nan))),
     LoadError, ["arrays.npz", "'M'", "NaN"]),
    ("observable wrong shape", load_edited(edit_arrays(
        lambda a: a.update(attendance=a["attendance"][:-2]))), LoadError,
     ["arrays.npz", "'attendance'"]),
    ("object array", load_edited(edit_arrays(
        lambda a: a.update(extra=np.array([{"a": 1}], dtype=object)))), LoadError,
     ["arrays.npz", "objects"]),
    ("load_sweep no plan", lambda e: mw.load_sweep(e.unrelated), LoadError, ["unrelated"]),
    ("load_sweep corrupt plan", lambda e: mw.load_sweep(
        copy_saved(e, write_to("sweep.json", "{\"runs\": ["))), LoadError, ["sweep.json"]),
    ("load_sweep run name", lambda e: mw.load_sweep(copy_saved(e, write_to(
        "sweep.json", json.dumps({"notebook": "n", "spec": {}, "fixed": {}, "parameters": [],
                                  "runs": [{"name": "../../etc", "parameters": {}}]})))),
     LoadError, ["sweep.json", "runs[0]"]),
    ("load_table not rows", lambda e: storage.load_table(
        copy_saved(e, write_to("t.json", "{}")) / "t.json"), LoadError, ["t.json"]),
]


@pytest.mark.parametrize(("case", "call", "error", "words"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_refused_before_any_work(env, case, call, error, words, capsys):
    before = {p: p.read_bytes() for p in (env.unrelated / "thesis.tex", env.file,
                                          env.notebook.parent / "neighbour.txt")}
    with np.errstate(all="ignore"), pytest.raises(error) as err:
        call(env)
    message = str(err.value) + capsys.readouterr().err
    for w in words:
        assert w in message, f"{w!r} not in {message!r}"
    if case in READS_DATA:
        env.work["np.load"] = 0
    assert env.work == dict.fromkeys(env.work, 0), env.work
    assert {p: p.read_bytes() for p in before} == before, "a refused write changed a file"
    assert sorted(p.name for p in env.unrelated.iterdir()) == ["thesis.tex"]


def test_table_is_large_and_varied():
    assert len(BAD) >= 60 and len({b[0] for b in BAD}) == len(BAD)
    kinds = {b[2] for b in BAD}
    assert kinds == {ParameterError, BackendError, LoadError}


def test_cli_errors_are_one_line(env, capsys):
    for target in (env.file, ".", env.notebook, env.unrelated):
        assert cli(["run", str(env.notebook), "-o", str(target)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: out_dir=") and "refused" in err[0]
    assert env.work["papermill"] == 0


def test_decompression_bomb_is_refused_before_reading(env, monkeypatch):
    folder = copy_saved(env, bomb)
    assert (folder / "arrays.npz").stat().st_size < 2**20  # about 34 MB decompressed
    monkeypatch.setattr(storage, "MAX_NPZ_BYTES", 10 * 2**20)
    with pytest.raises(LoadError, match=r"arrays.npz: decompresses to more than 10485760"):
        mw.load(folder)
    assert env.work["np.load"] == 0
    with pytest.raises(LoadError, match="differs from the SHA-256"):  # read, then checked
        mw.load(folder, max_bytes=2**30)
    assert env.work["np.load"] == 1


# -- writers -------------------------------------------------------------------------------------
def test_writers_replace_only_their_own_kind(env):
    """A run folder is replaced by a run; an empty folder is used; force keeps others aside
    (and a run with files of the user's added since it was written)."""
    res = env.result
    out = res.save(env.tmp / "mine")
    res.save(out)
    assert (out / storage.MARKER).is_file()
    time.sleep(0.05)   # (past the clock tick of the save)
    (out / "scratch.txt").write_text("in a run folder: never deleted")
    with pytest.raises(ParameterError, match="scratch.txt was added or changed"):
        res.save(out)
    empty = env.tmp / "empty"
    empty.mkdir()
    assert mw.load(mw.save_run(empty, res)).M.shape == res.M.shape
    with pytest.warns(UserWarning, match="kept as"):
        forced = mw.save_run(env.unrelated, res, force=True)
    assert not (forced / "thesis.tex").exists()
    [aside] = env.tmp.glob(f"{env.unrelated.name}.replaced-*")
    assert (aside / "thesis.tex").exists() and (out / "scratch.txt").exists()
    with pytest.raises(ParameterError, match="current directory"):
        mw.save_run(".", res, force=True)
    assert [p.name for p in env.tmp.iterdir() if p.name.startswith(".")] == []


def test_a_file_named_like_a_partial_notebook_is_left_alone(env):
    notebook = make_notebook(env.tmp / "fails.ipynb", "raise ValueError('boom')")
    mine = env.tmp / "out.failed.ipynb"  # a notebook of the user's that papermill executed
    mine.write_text(json.dumps({"cells": [], "metadata": {"papermill": {}}, "nbformat": 4,
                                "nbformat_minor": 5}))
    before = mine.read_text()
    with pytest.raises(runs.NotebookError) as err:
        runs.run_notebook(notebook, {}, env.tmp / "out")
    assert mine.read_text() == before
    kept = err.value.failed_notebook
    assert kept == env.tmp / "out.failed-2.ipynb" and "boom" in kept.read_text()
    assert json.loads(kept.read_text())["metadata"][runs.PARTIAL_KEY] == str(env.tmp / "out")


def test_failed_write_leaves_nothing_and_stale_temporaries_go(env):
    target = env.tmp / "run"
    stale, = dead_temporaries((target, "tmp", True, ""))
    mine = storage.temporary_sibling(target, "tmp")   # this process is alive: kept

    class Broken:
        def savefig(self, *args, **kwargs):
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        mw.save_run(target, parameters={"a": 1}, figures={"f": Broken()})
    assert not target.exists() and not stale.exists() and mine.is_dir()
    assert sorted(p.name for p in env.tmp.iterdir() if p.name.startswith(".run.")) == \
        sorted([mine.name, mine.name + ".mfgwork-owner"])


def test_sweep_index_is_appended_per_run(env):
    index = sweeps.SweepIndex(env.tmp, [{"run": f"r{i}", "status": "pending", "error": None,
                                         "a": i} for i in range(3)], ["a"])
    path = index.write_csv()
    inode, head = path.stat().st_ino, path.read_text()
    index.rows[1].update(status="done", iterations=7)
    index.append_csv(1)
    assert path.stat().st_ino == inode and path.read_text().startswith(head)
    last = path.read_text().splitlines()[-1].split(",")
    assert last[:2] == ["r1", "done"] and "7" in last


def test_replan_keeps_earlier_runs_listed(env):
    out = env.tmp / "sweep"
    first = mw.sweep(env.notebook, {"delay": [0.0]}, out, workers=1, progress=False)
    assert first.counts()["done"] == 1
    with pytest.raises(ParameterError, match="another spec"):
        mw.sweep(env.notebook, {"delay": [0.01]}, out, workers=1, progress=False)
    second = mw.sweep(env.notebook, {"delay": [0.01]}, out, workers=1, progress=False,
                      replan=True)
    assert [r["delay"] for r in second] == [0.01, 0.0]
    assert second.counts() == {"done": 2, "failed": 0, "pending": 0}
    plan = json.loads((out / "sweep.json").read_text())
    assert plan["earlier_plans"][0]["spec"] == {"delay": [0.0]}


def test_corrupt_sweep_entries_are_reported_and_the_rest_loads(env):
    folder = env.tmp / "sweep"
    (folder / "runs" / "a").mkdir(parents=True)
    (folder / "runs" / "b").mkdir()
    (folder / "failed").mkdir()
    storage.write_json(folder / "runs" / "a" / "metrics.json", {"iterations": 3,
                                                               "converged": True})
    (folder / "runs" / "b" / "metrics.json").write_text('{"iterations": ')
    (folder / "failed" / "c.json").write_bytes(b"\x00\xff")
    storage.write_json(folder / "sweep.json", {
        "notebook": "n.ipynb", "spec": {}, "fixed": {}, "parameters": ["k"],
        "runs": [{"name": n, "parameters": {"k": i}} for i, n in enumerate("abcd")]})
    with pytest.warns(UserWarning, match="2 entries of the sweep"):
        index = mw.load_sweep(folder)
    rows = {r["run"]: r for r in index}
    assert rows["a"]["status"] == "done" and rows["a"]["iterations"] == 3
    assert "metrics.json" in rows["b"]["error"] and "c.json" in rows["c"]["error"]
    assert rows["d"]["status"] == "pending" and len(index.problems) == 2


# -- interrupted runs ----------------------------------------------------------------------------
def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _started(parent: Path) -> bool:
    return any(parent.glob(".run.tmp-*/started"))


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_interrupted_run_then_rerun_leaves_nothing_behind(tmp_path, sig):
    import psutil

    notebook = make_notebook(tmp_path / "slow.ipynb", SLOW)
    out, runtime = tmp_path / "out", tmp_path / "runtime"
    runtime.mkdir()
    env = os.environ | {"JUPYTER_RUNTIME_DIR": str(runtime), "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "mfgwork", "run", str(notebook), "-o", str(out / "run")]
    proc = subprocess.Popen([*cmd, "-p", "delay", "600"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        _wait(lambda: _started(out) or proc.poll() is not None, 180, "the kernel to start")
        assert proc.poll() is None, proc.stderr.read().decode()
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children and list(out.glob(".run.kernel-*/kernel.json"))
        os.kill(proc.pid, sig)
        code = proc.wait(timeout=120)
        assert code == (128 + sig if sig == signal.SIGTERM else -sig)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    _, alive = psutil.wait_procs(children, timeout=60)
    assert not alive, f"kernels outlived the run: {alive}"
    if sig == signal.SIGTERM:
        assert sorted(p.name for p in out.iterdir()) == []
    rerun = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert sorted(p.name for p in out.iterdir()) == ["run"]
    assert json.loads((out / "run" / "parameters.json").read_text()) == {"delay": 0.0}
    assert list(runtime.glob("kernel-*.json")) == []


# -- callables and dtypes give the answers of float64 --------------------------------------------
@pytest.mark.parametrize("kind", ["int", "bool", "float32", "list", "scalar"])
def test_callable_outputs_are_cast_to_the_working_dtype(kind):
    def as_kind(a):
        return {"int": a.astype(int), "bool": a.astype(bool), "float32": a.astype(np.float32),
                "list": list(a.astype(float)), "scalar": 1}[kind]

    def step(x):
        return np.ones_like(x) if kind == "scalar" else (np.abs(x) > 0.5).astype(float)

    base = {"x_min": -1.0, "x_max": 1.0, "T": 1.0, "sigma": 0.4,
            "m0": lambda x: np.exp(-(x**2))}
    ref = mw.solve(mw.MFGProblem(**base, g=lambda x: step(x),
                                 f=lambda t, x, m: step(x)), nx=41, nt=20, progress=False)
    res = mw.solve(mw.MFGProblem(**base, g=lambda x: as_kind(step(x)),
                                 f=lambda t, x, m: as_kind(step(x))), nx=41, nt=20,
                   progress=False)
    assert res.converged and res.M.dtype == np.float64
    assert np.array_equal(res.M, ref.M) and np.array_equal(res.U, ref.U)
    assert res.mass_error < 1e-12


def test_dtype_names_follow_numpy():
    assert mw.get_backend(dtype="float").dtype == "float64"
    assert mw.get_backend(dtype=float).dtype == "float64"
    assert mw.get_backend(dtype="single").dtype == "float32"
    assert mw.get_backend(dtype=np.float32).dtype == "float32"
