"""``python -m mfgwork lab`` (what ``make lab`` runs): the token it prints is in force even
where the user's own Jupyter configuration disables the token, and a server that answers
without it is stopped. Servers listen on 127.0.0.1 only, on a free port."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("jupyter_server")
from mfgwork.apps.lab import LabError, check_options, lab, status  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
#: What a user's config may hold to switch the token off (jupyter_server 2.x and its
#: deprecated 1.x name), in both formats Jupyter reads; and a base URL of its own.
NO_TOKEN_PY = ("c.ServerApp.token = ''\nc.IdentityProvider.token = ''\n"
               "c.ServerApp.base_url = '/u/'\n")
NO_TOKEN_JSON = '{"ServerApp": {"token": ""}, "IdentityProvider": {"token": ""}}'


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def jupyter_env(home: Path) -> dict[str, str]:
    """An environment whose Jupyter folders are under ``home``, its config disabling the
    token."""
    config = home / "config"
    config.mkdir(parents=True)
    (config / "jupyter_server_config.py").write_text(NO_TOKEN_PY)
    (config / "jupyter_server_config.json").write_text(NO_TOKEN_JSON)
    return os.environ | {"JUPYTER_CONFIG_DIR": str(config),
                         "JUPYTER_DATA_DIR": str(home / "data"),
                         "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
                         "JUPYTER_PLATFORM_DIRS": "1", "PYTHONPATH": str(ROOT)}


@pytest.mark.slow
def test_the_token_is_in_force_where_the_users_config_disables_it(tmp_path):
    pytest.importorskip("jupyterlab")
    port, root = free_port(), tmp_path / "notebooks"
    root.mkdir()
    cmd = [sys.executable, "-m", "mfgwork", "lab", "--root", str(root), "--port", str(port),
           *(["--allow-root"] if os.geteuid() == 0 else [])]
    proc = subprocess.Popen(cmd, env=jupyter_env(tmp_path / "jupyter"), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        line = proc.stdout.readline()     # printed once the token was checked, or nothing
        assert line.startswith(f"JupyterLab: http://127.0.0.1:{port}/lab?token="), line
        token = line.split("token=")[1].split()[0]
        base = f"http://127.0.0.1:{port}"
        assert status(f"{base}/api/contents") == 403
        assert status(f"{base}/api/contents", token) == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert status(f"{base}/api/status") is None          # the server went with the launcher


FAKE_SERVER = """\
import http.server, sys

class Open(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"{}")

http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Open).serve_forever()
"""


def test_a_server_that_answers_without_the_token_is_stopped(tmp_path):
    """A stand-in server that answers everyone: the launcher refuses, stops it, prints no
    URL."""
    port = free_port()
    server = tmp_path / "open_server.py"
    server.write_text(textwrap.dedent(FAKE_SERVER))
    started = time.monotonic()
    with pytest.raises(LabError, match="answered a request without the token"):
        lab(tmp_path, port=port, command=[sys.executable, str(server), str(port)])
    assert status(f"http://127.0.0.1:{port}/api/status") is None
    assert time.monotonic() - started < 30


@pytest.mark.parametrize("option", [
    "--IdentityProvider.token=", "--ServerApp.token=abc", "--ServerApp.ip=0.0.0.0", "--ip=::",
    "--PasswordIdentityProvider.hashed_password=", "--ServerApp.identity_provider_class=x",
    "--ServerApp.login_handler_class=x"])
def test_options_that_set_the_address_or_the_authentication_are_refused(option):
    with pytest.raises(LabError, match="is refused"):
        check_options("127.0.0.1", free_port(), ["--ServerApp.open_browser=False", option])


def test_a_port_in_use_is_refused_before_a_server_starts():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(LabError, match="cannot be used"):
            check_options("127.0.0.1", busy.getsockname()[1], [])
    with pytest.raises(LabError, match="port=0 is invalid"):
        check_options("127.0.0.1", 0, [])


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_lab_runs_the_launcher(tmp_path):
    """make lab starts python -m mfgwork lab with its address, port and extra options."""
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\necho "ARGV: $*"\n')
    fake.chmod(0o755)
    venv = tmp_path / "venv"
    venv.mkdir()
    (venv / ".installed-all").touch()
    out = subprocess.run(["make", "-s", "-C", str(ROOT), "lab", f"PY={fake}", f"VENV={venv}",
                          "LAB_PORT=9999", "LAB_ARGS=--LabApp.news_url=None"],
                         capture_output=True, text=True, timeout=60,
                         env=os.environ | {"LAB_TOKEN": "s3cret-token"})
    assert out.returncode == 0, out.stderr
    assert "s3cret-token" not in out.stdout  # the token stays in the environment
    argv = next(x for x in out.stdout.splitlines() if x.startswith("ARGV: ")).split()[1:]
    assert argv[:3] == ["-m", "mfgwork", "lab"]
    assert argv[argv.index("--ip") + 1] == "127.0.0.1" and "9999" in argv
    assert argv[argv.index("--") + 1:] == ["--LabApp.news_url=None"]
