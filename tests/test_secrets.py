"""Secrets stay secret (issue 50): credentials in a tracking URI (``user:password@``, a token in the
query) work as MLflow's client sends them and are masked in every line dlcomm prints, every param,
tag and run name it records, and the run's config.yaml."""

from __future__ import annotations

import base64
import http.server
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import quote, unquote_plus

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dlcomm import secrets
from dlcomm.tracking.store import _probe_server

PASSWORD = "s3cretPW"
J = ["dataset=synthetic", "model=mlp", "nodes=2", "train.max_steps=2", "launcher=threads"]


@pytest.mark.parametrize(
    "text,masked",
    [
        (f"http://alice:{PASSWORD}@127.0.0.1:5000/x", "http://alice:***@127.0.0.1:5000/x"),
        ("https://h/api?token=abc123&x=1", "https://h/api?token=***&x=1"),
        ("see https://h/p?a=1&SIG=zz9&key=k1 and more", "see https://h/p?a=1&SIG=***&key=*** and more"),
        ("http://alice@h:1/ (no password)", "http://alice@h:1/ (no password)"),
        ("sqlite:////tmp/a b.db", "sqlite:////tmp/a b.db"),
        # issue 57 item 2: encoded values, a '+', a fragment after the value, a secret in the fragment
        ("https://a.blob/c?sv=1&sig=ab%2Bcd%3D", "https://a.blob/c?sv=1&sig=***"),
        ("https://s3/b?X-Amz-Credential=AKIAXX%2F2026%2Fus&y=2", "https://s3/b?X-Amz-Credential=***&y=2"),
        ("https://h/?token=a+b&y=1", "https://h/?token=***&y=1"),
        ("https://h/?token=abc123#frag", "https://h/?token=***#frag"),
        ("https://h/cb#access_token=zz99&state=1", "https://h/cb#access_token=***&state=1"),
        ("https://h/?%73ig=v4lue", "https://h/?%73ig=***"),
    ],
)
def test_credentials_in_a_uri_are_masked_and_nothing_else(text: str, masked: str) -> None:
    assert secrets.mask(text) == masked


# what a value may hold as written in a query or fragment (RFC 3986's unreserved, sub-delims but '&',
# ':', '@', '/', '?', '=' and percent-escapes); '&' ends a parameter, '#' the query
_URL_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$()*+,;=:@/?"


@given(
    value=st.one_of(
        st.text(alphabet=_URL_CHARS, min_size=6, max_size=30),
        st.text(min_size=6, max_size=20).map(lambda text: quote(text, safe="")),  # percent-encoded, any text
    ),
    name=st.sampled_from(sorted(secrets.SECRET_PARAMETERS)).map(lambda name: name.upper() if len(name) % 2 else name),
    where=st.sampled_from(["query first", "query middle", "query last", "fragment"]),
)
@settings(max_examples=300, deadline=None)
def test_every_secret_parameter_is_masked_whatever_its_encoding_and_place(value: str, name: str, where: str) -> None:
    templates = {
        "query first": "https://store.example/api?{p}&other=1",
        "query middle": "https://store.example/api?a=1&{p}&b=2#frag",
        "query last": "https://store.example/api?a=1&{p}",
        "fragment": "https://store.example/cb?a=1#state=2&{p}",
    }
    text = "failed: " + templates[where].format(p=f"{name}={value}") + " (retrying)"
    assume(value not in templates[where].format(p=f"{name}="))  # the value is not also some other part of it
    masked = secrets.mask(text)
    assert value not in masked and f"{name}={secrets.MASK}" in masked
    assert masked.endswith(" (retrying)") and masked.startswith("failed: https://store.example/")
    decoded = unquote_plus(value)
    assert value in secrets.credentials(text) and decoded in secrets.credentials(text)


def test_a_remembered_secret_is_masked_outside_its_uri_too(monkeypatch) -> None:
    monkeypatch.setattr(secrets, "_remembered", set())
    secrets.remember(f"tracking.uri=http://alice:{PASSWORD}@h:1 tracking.uri=http://bob:ab@h:1")
    assert secrets.mask(f"401 for user alice with password {PASSWORD}") == "401 for user alice with password ***"
    assert secrets.mask("a cab") == "a cab"  # a secret of under 4 characters only inside URIs


class _BasicAuthMlflow(http.server.BaseHTTPRequestHandler):
    """Answers MLflow's experiments search only with alice's password, 401 otherwise."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        expected = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
        ok = self.headers.get("Authorization") == expected
        body = b'{"experiments": []}' if ok else b""
        self.send_response(200 if ok else 401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def auth_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _BasicAuthMlflow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_the_store_check_sends_a_uri_s_credentials_as_basic_authentication(auth_server) -> None:
    """Before: urllib took ``alice:s3cretPW@127.0.0.1`` for a host name (``Name or service not known``)."""
    _probe_server(f"http://alice:{PASSWORD}@127.0.0.1:{auth_server}", timeout_s=5)


@pytest.mark.slow  # a real dlcomm process: its status lines go through the masking streams
def test_no_printed_line_holds_the_password(tmp_path) -> None:
    """A server that answers as no MLflow does: refused in one line, the password in no line."""
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        uri = f"http://alice:{PASSWORD}@127.0.0.1:{server.server_address[1]}"
        result = subprocess.run(
            [
                str(Path(sys.executable).parent / "dlcomm"),
                "train",
                *J,
                f"tracking.uri={uri}",
                "tracking.connect_timeout_s=2",
            ],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**__import__("os").environ, "DLCOMM_HOME": str(tmp_path)},
            timeout=120,
        )
        server.shutdown()
    assert result.returncode == 2, result.stderr
    assert PASSWORD not in result.stdout + result.stderr
    assert "alice:***@127.0.0.1" in result.stderr.splitlines()[-1]


@pytest.mark.slow  # one short training (threads, in this process)
def test_no_record_or_file_of_a_run_holds_a_secret(tmp_path, cli_here) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"http://bob:{PASSWORD}@host/x?token=tok3n&sig=ab%2Bcd%3D#access_token=fr4gm3nt"
    result = cli_here(tmp_path, "train", *J, f'tracking.run_name="see {uri}"')
    assert result.returncode == 0, result.stderr
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/results/mlflow.db")
    [run] = client.search_runs([client.get_experiment_by_name("dlcomm").experiment_id])
    recorded = " ".join([run.info.run_name, *run.data.params.values(), *run.data.tags.values()])
    written = " ".join(path.read_text(errors="replace") for path in (tmp_path / "results").rglob("*.yaml"))
    for secret in (PASSWORD, "tok3n", "ab%2Bcd%3D", "ab+cd=", "fr4gm3nt"):
        assert secret not in recorded + written  # the printed lines: the test above (a process's streams)
    assert "bob:***@host" in run.info.run_name and "token=***" in run.data.params["tracking.run_name"]


@pytest.mark.parametrize("text", ["tracking.uri=http://[::1", 'tracking.uri="http://[::1]"', "http://h:notaport/x"])
def test_a_uri_urlsplit_cannot_read_is_left_as_it_is(text: str) -> None:
    assert secrets.credentials(text) == [] and secrets.mask(text) == text


def _readable_by_others(path: Path, root: Path) -> bool:
    """Whether a user other than the owner (group or others) can read ``path``: its own read bit,
    and the search bit of every folder from ``root`` down to it."""
    folders = [folder for folder in path.parents if folder.is_relative_to(root)]
    for bits_read, bits_search in ((0o040, 0o010), (0o004, 0o001)):  # group, others
        if path.stat().st_mode & bits_read and all(folder.stat().st_mode & bits_search for folder in folders):
            return True
    return False


@pytest.mark.parametrize("sweep", [False, True], ids=["run", "sweep"])
def test_no_file_a_slurm_submission_writes_lets_others_read_a_secret(tmp_path, cli_here, monkeypatch, sweep) -> None:
    """Issue 57 item 7: the submission pickle under results/runs/<id>/slurm/ held the run's
    configuration as given (a tracking.uri's password, a token in a run name) with mode 0644.
    sbatch and sinfo are stand-ins here (the submission's files are dlcomm's and submitit's)."""
    import os
    import stat

    tools = tmp_path / "bin"
    tools.mkdir()
    for name, text in {"sbatch": "echo Submitted batch job 4242", "sinfo": "true", "squeue": "true"}.items():
        (tools / name).write_text(f"#!/bin/sh\n{text}\n")
        (tools / name).chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    home = tmp_path / "home"
    home.mkdir()
    secret_uri = f"http://bob:{PASSWORD}@host/x?token=tok3n"
    previous = os.umask(0o022)  # a usual umask: files 0644, folders 0755
    try:
        sweep_args = ["-m", "seed=1,2"] if sweep else []
        result = cli_here(
            home, "train", *sweep_args, *J[:-1], "launcher=slurm", f'tracking.run_name="see {secret_uri}"'
        )
    finally:
        os.umask(previous)
    assert result.returncode == 0, result.stderr
    assert "submitted SLURM job" in result.stdout
    written = [path for path in (home / "results").rglob("*") if path.is_file()]
    assert any(path.suffix == ".pkl" for path in written)
    holding = [path for path in written if PASSWORD.encode() in path.read_bytes() or b"tok3n" in path.read_bytes()]
    assert holding  # the job needs the run as given: it stays in the pickle, for its owner alone
    assert not [path for path in holding if _readable_by_others(path, home / "results")]


def test_sweep_export_refuses_a_credential_in_one_line(tmp_path, cli_here) -> None:
    """Issue 57 item 7: it printed ``tracking.uri=http\\://alice\\:***@...`` lines, masked and so
    useless when run (and unmasked they would sit in the job's lines file)."""
    uri = f"http://alice:{PASSWORD}@127.0.0.1:5000"
    result = cli_here(tmp_path, "sweep", "export", "-m", "dataset=synthetic", f"tracking.uri={uri}", "seed=1,2")
    assert result.returncode == 2 and result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("dlcomm: error: sweep export: tracking.uri holds a credential") and PASSWORD not in line
    assert "MLFLOW_TRACKING_PASSWORD" in line
    plain = cli_here(
        tmp_path, "sweep", "export", "-m", "dataset=synthetic", "tracking.uri=http://alice@h:5000", "seed=1,2"
    )
    assert plain.returncode == 0 and len(plain.stdout.splitlines()) == 2
