"""Every option naming where dlcomm writes (issue 57): ``profile --out`` and ``calibrate --out`` take
a regular file or a new path, ``report out=`` a folder; anything else there (a FIFO, a folder, a
device) is one line before any work, and the thing stays as it was. No device node is touched: a
FIFO in tmp_path stands for one (an atomic rename replaced it as it replaced /dev/null)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from dlcomm.errors import UserError

PROFILE = ["profile", "dataset=synthetic", "model=mlp"]


@pytest.fixture
def no_work(monkeypatch):
    """Measuring is the work a refusal must come before: it fails the test here."""
    import dlcomm.calibrate
    import dlcomm.train.profile

    def measured(*args, **kwargs):
        raise AssertionError("measured before the --out path was checked")

    monkeypatch.setattr(dlcomm.train.profile, "cached_profile", measured)
    monkeypatch.setattr(dlcomm.calibrate, "run_local", measured)


def _shape(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"a{kind}"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    return path


@pytest.mark.parametrize("kind, words", [("fifo", "a FIFO"), ("folder", "a folder")])
@pytest.mark.parametrize("command", [PROFILE, ["calibrate", "--force"]], ids=["profile", "calibrate"])
def test_out_over_what_is_not_a_plain_file_is_refused_before_any_work(
    tmp_path, cli_here, no_work, command, kind, words
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    path = _shape(tmp_path, kind)
    result = cli_here(home, *command, "--out", str(path))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert f"--out {path} cannot be written: {path} is {words}, not a regular file; pass --out" in lines[0]
    mode = path.lstat().st_mode
    assert stat.S_ISFIFO(mode) if kind == "fifo" else stat.S_ISDIR(mode)  # not replaced by a regular file
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["home", path.name])  # no .<name>.<pid> partial
    if kind == "folder":
        assert not any(path.iterdir())


class _Profile:
    """What ``dlcomm profile`` prints and writes of a measured profile."""

    def provenance(self) -> str:
        return "mlp b64 fp32: measured now"

    def describe(self) -> str:
        return "forward 1 ms"

    def to_json(self, with_origin: bool) -> str:
        return '{"fake": true}\n'


def test_profile_out_replaces_a_regular_file_and_writes_through_a_link(tmp_path, cli_here, monkeypatch) -> None:
    import dlcomm.train.profile

    monkeypatch.setattr(dlcomm.train.profile, "cached_profile", lambda *args, **kwargs: _Profile())
    home = tmp_path / "home"
    home.mkdir()
    real = tmp_path / "real.json"
    real.write_text("old\n")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    result = cli_here(home, *PROFILE, "--out", str(link))
    assert result.returncode == 0, result.stderr
    assert f"written to {link}" in result.stdout
    assert link.is_symlink() and real.read_text() == '{"fake": true}\n'  # the file it leads to, the link kept
    fresh = tmp_path / "new" / "p.json"  # a new path; its folder made
    assert cli_here(home, *PROFILE, "--out", str(fresh)).returncode == 0
    assert fresh.read_text() == '{"fake": true}\n'


@pytest.mark.parametrize("kind, words", [("fifo", "a FIFO"), ("file", "a regular file")])
def test_report_out_is_a_folder_or_nothing(tmp_path, cli_here, kind, words) -> None:
    home = tmp_path / "home"
    home.mkdir()
    path = tmp_path / "out"
    os.mkfifo(path) if kind == "fifo" else path.write_text("mine\n")
    result = cli_here(home, "report", "experiment=x", f"out={path}")
    assert result.returncode == 2, result.stderr
    assert f"dlcomm: error: out={path} cannot be written: {path} is {words}, not a folder;" in result.stderr
    assert stat.S_ISFIFO(path.lstat().st_mode) if kind == "fifo" else path.read_text() == "mine\n"


def test_one_check_for_every_file_option(tmp_path) -> None:
    """The shared check itself: what it accepts (and returns: the path to write, links resolved) and
    what it refuses."""
    from dlcomm.paths import check_output_file

    real = tmp_path / "real"
    real.write_text("x")
    link = tmp_path / "link"
    link.symlink_to(real)
    assert check_output_file(real, "--out", "fix") == real.resolve()
    assert check_output_file(link, "--out", "fix") == real.resolve()
    assert check_output_file(tmp_path / "new", "--out", "fix") == (tmp_path / "new").resolve()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    pointer = tmp_path / "to-fifo"
    pointer.symlink_to(fifo)
    for refused in (fifo, pointer, tmp_path):
        with pytest.raises(
            UserError, match=r"^--out cannot be written: .* is a (FIFO|folder), not a regular file; fix$"
        ):
            check_output_file(refused, "--out", "fix")


def test_an_atomic_write_that_fails_leaves_no_partial_file(tmp_path) -> None:
    """``.afolder.<pid>`` was left beside a folder the rename could not replace."""
    from dlcomm.train.profile import write_atomically

    folder = tmp_path / "afolder"
    folder.mkdir()
    with pytest.raises(IsADirectoryError):
        write_atomically(folder, "{}")
    assert [p.name for p in tmp_path.iterdir()] == ["afolder"]
