"""JupyterLab with a token that is in force: ``python -m mfgwork lab`` (what ``make lab`` runs).

The token reaches the server through the environment (``JUPYTER_TOKEN``), never the command
line, which every local user can read. Jupyter takes that variable only as the *default* of
``IdentityProvider.token``: a user's own configuration (``c.IdentityProvider.token = ''`` or
``c.ServerApp.token = ''`` in ``jupyter_server_config.py`` or ``.json``, in any folder of
``jupyter --paths``) overrides it, and the server then answers everyone while the printed URL
still shows a token. So the server is started with :class:`PinnedTokenIdentityProvider`
(named on the command line, which outranks every configuration file), whose token is
``JUPYTER_TOKEN`` and which no configuration can change; and once it listens, the launcher
checks that a request without the token is refused and one with it accepted, and stops the
server otherwise. The URL is printed only after that check.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from jupyter_server.auth.identity import PasswordIdentityProvider
from traitlets import TraitError, Unicode, default, validate

#: Seconds the server may take to answer its first request.
START_S = 120.0
#: Answers that refuse a request without the token (jupyter_server: 403 on the API, a
#: redirect to the login page elsewhere).
REFUSED = (302, 401, 403)


class PinnedTokenIdentityProvider(PasswordIdentityProvider):
    """Jupyter's default identity provider, with the token of ``JUPYTER_TOKEN`` whatever a
    configuration file says (``token`` is not configurable here, and an assignment keeps it):
    a token that is empty or missing stops the server at its start."""

    token = Unicode(help="The token of JUPYTER_TOKEN; configuration cannot change it.")

    @default("token")
    def _pinned_default(self) -> str:
        self.token_generated = False
        return _environment_token()

    @validate("token")
    def _pinned(self, proposal: dict) -> str:
        return _environment_token()


def _environment_token() -> str:
    token = os.environ.get("JUPYTER_TOKEN", "")
    if not token:
        raise TraitError("JUPYTER_TOKEN is empty: mfgwork's JupyterLab needs a token")
    return token


class LabError(RuntimeError):
    """The server does not enforce the token it was given (it has been stopped)."""


def server_command(root: str | os.PathLike, ip: str, port: int,
                   extra: Sequence[str] = (), allow_root: bool = False) -> list[str]:
    """The ``jupyter lab`` command line (no secret in it): the address, the port, the base URL
    and the identity provider given here outrank any configuration file."""
    return [sys.executable, "-m", "jupyter", "lab", "--no-browser",
            *(["--allow-root"] if allow_root else []), *extra,
            f"--ServerApp.ip={ip}", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={root}", "--ServerApp.answer_yes=True",
            "--ServerApp.base_url=/",   # where the launcher checks it (a config may move it)
            f"--ServerApp.identity_provider_class={__name__}.PinnedTokenIdentityProvider"]


#: Extra server options that would set the address or how users log in.
_REFUSED_OPTION = re.compile(r"token|password|identity|login|authoriz|(^|[.-])ip(=|$)", re.I)


def check_options(ip: str, port: int, extra: Sequence[str]) -> None:
    """Refuse extra server options that set the address or the authentication, a port out of
    range, and a port something already listens on (its answers would be taken for ours)."""
    for arg in extra:
        if _REFUSED_OPTION.search(arg):
            raise LabError(f"extra server option {arg!r} is refused: the address and the "
                           "authentication are the launcher's (--ip / LAB_IP, LAB_TOKEN)")
    if not 1 <= port <= 65535:
        raise LabError(f"port={port} is invalid: must be 1 to 65535")
    family = socket.AF_INET6 if ":" in ip else socket.AF_INET
    with socket.socket(family) as probe:
        try:
            probe.bind((ip, port))
        except OSError as exc:
            raise LabError(f"port={port} on {ip or 'every address'} cannot be used: "
                           f"{exc.strerror}") from None


def local_url(ip: str, port: int) -> str:
    """The base URL to reach a server listening on ``ip`` from this machine."""
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "*": "127.0.0.1", "::": "::1"}.get(ip, ip)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def status(url: str, token: str | None = None) -> int | None:
    """The HTTP status of a GET of ``url`` (with the token in the Authorization header, or
    none), without following redirects; None when nothing answers."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):  # noqa: ANN002, ANN003
            return None

    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"token {token}")
    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def wait_until_up(base: str, token: str, proc: subprocess.Popen, timeout: float = START_S
                  ) -> None:
    """Wait until the server answers ``/api/status`` (any answer); LabError if it exits or
    does not answer within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise LabError(f"JupyterLab exited with status {proc.returncode} before answering "
                           f"on {base} (its messages are above)")
        if status(f"{base}/api/status", token) is not None:
            return
        time.sleep(0.25)
    raise LabError(f"JupyterLab did not answer on {base} within {timeout:g} s")


def check_token_in_force(base: str, token: str) -> None:
    """LabError unless the server refuses a request without the token and accepts one with
    it (``/api/contents``: the notebooks themselves)."""
    anonymous = status(f"{base}/api/contents")
    if anonymous not in REFUSED:
        raise LabError(
            f"JupyterLab answered a request without the token ({base}/api/contents: HTTP "
            f"{anonymous}): something in your Jupyter configuration disables authentication "
            "(see `jupyter --paths` for the folders searched, e.g. a jupyter_server_config.py "
            "or .json setting c.ServerApp.token = '' or c.IdentityProvider.token = ''); the "
            "server has been stopped")
    accepted = status(f"{base}/api/contents", token)
    if accepted != 200:
        raise LabError(f"JupyterLab refused the token it was started with ({base}/api/contents:"
                       f" HTTP {accepted}): your Jupyter configuration changes how users log "
                       "in; the server has been stopped")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server (it shuts its kernels down), SIGKILL if it hangs."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def lab(root: str | os.PathLike = "notebooks", ip: str = "127.0.0.1", port: int = 8888,
        token: str | None = None, extra: Sequence[str] = (), allow_root: bool = False,
        command: Sequence[str] | None = None) -> int:
    """Run JupyterLab in ``root`` on ``ip``:``port`` with ``token`` (default: ``LAB_TOKEN``,
    else a fresh one) in force, until it exits or Ctrl-C; returns its exit status.
    ``command``: the server's command line (default :func:`server_command`)."""
    token = token or os.environ.get("LAB_TOKEN") or secrets.token_hex(24)
    check_options(ip, port, extra)
    if not Path(root).is_dir():
        raise LabError(f"root={str(root)!r} is not a folder")
    argv = list(command) if command is not None else \
        server_command(root, ip, port, extra, allow_root)
    proc = subprocess.Popen(argv, env=os.environ | {"JUPYTER_TOKEN": token})
    base = local_url(ip, port)
    try:
        wait_until_up(base, token, proc)
        check_token_in_force(base, token)
        print(f"JupyterLab: {base}/lab?token={token}  (Ctrl-C stops it)", flush=True)
        return proc.wait()
    except KeyboardInterrupt:   # the server had the Ctrl-C too (answer_yes: it stops)
        return proc.wait()
    finally:
        stop(proc)


def main(root: str, ip: str, port: int, extra: Sequence[str], allow_root: bool) -> int:
    """The command line: 2 (nothing left running) when the token is not in force. SIGTERM
    stops the server too."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        return lab(root, ip, port, extra=extra, allow_root=allow_root)
    except LabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
