"""New SQLite stores are copies of a cached empty store (dlcomm.tracking.store): the copy is the
store MLflow's migrations build, with its own folder in the default experiment; no cache, or one
that cannot be written, only means building every time."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from dlcomm.tracking import store


def _schema(database: Path) -> tuple[list, list, list]:
    connection = sqlite3.connect(database)
    try:
        tables = sorted(connection.execute("SELECT type, name, sql FROM sqlite_master").fetchall(), key=str)
        revision = connection.execute("SELECT version_num FROM alembic_version").fetchall()
        experiments = connection.execute("SELECT experiment_id, name, artifact_location FROM experiments").fetchall()
    finally:
        connection.close()
    return tables, revision, experiments


def _create(folder: Path) -> Path:
    folder.mkdir(parents=True)
    database = folder / "mlflow.db"
    store.create_sqlite_store(f"sqlite:///{database}", database)
    return database


def test_a_store_copied_from_the_template_is_the_store_the_migrations_build(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DLCOMM_CACHE", str(tmp_path / "cache"))
    built = _create(tmp_path / "first")
    assert len(list((tmp_path / "cache").glob("mlflow-*-store.db"))) == 1

    import mlflow.store.tracking.sqlalchemy_store as sqlalchemy_store

    def no_migrations(*args, **kwargs):
        raise AssertionError("the second store was built, not copied")

    monkeypatch.setattr(sqlalchemy_store, "SqlAlchemyStore", no_migrations)
    copied = _create(tmp_path / "second")
    monkeypatch.undo()
    tables, revision, experiments = _schema(copied)
    assert (tables, revision) == _schema(built)[:2]
    assert experiments == [(0, "Default", (tmp_path / "second").resolve().as_uri() + "/0")]
    assert _schema(built)[2] == [(0, "Default", (tmp_path / "first").resolve().as_uri() + "/0")]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{copied}")
    run = client.create_run(client.create_experiment("mine"))
    client.log_metric(run.info.run_id, "acc", 0.5)
    assert client.get_run(run.info.run_id).data.metrics == {"acc": 0.5}


@pytest.mark.parametrize("cache", ["off", "/proc/no-cache-here"], ids=["off", "unwritable"])
def test_without_a_usable_cache_every_store_is_built(tmp_path, monkeypatch, cache: str) -> None:
    monkeypatch.setenv("DLCOMM_CACHE", cache)
    database = _create(tmp_path / "results")
    assert store._check_sqlite_store(f"sqlite:///{database}", database, 5.0)
    if cache == "off":
        assert store._template_path() is None
    else:
        assert not Path(cache).exists()


def _damaged(template: Path) -> None:
    template.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4096)  # a header, then nothing SQLite can read


def _holding_a_run(template: Path) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{template}")
    client.create_run(client.create_experiment("someone's"))


def _other_schema(template: Path) -> None:
    connection = sqlite3.connect(template)
    with connection:
        connection.execute("UPDATE alembic_version SET version_num = 'abc123'")
    connection.close()


@pytest.mark.parametrize(
    "spoil", [_damaged, _holding_a_run, _other_schema], ids=["damaged", "holds a run", "other schema"]
)
def test_a_template_that_is_not_an_empty_store_is_rebuilt_not_copied(tmp_path, monkeypatch, spoil) -> None:
    """Before: a damaged template broke every new store ("free space there"); one holding a run
    copied that run into every new store."""
    monkeypatch.setenv("DLCOMM_CACHE", str(tmp_path / "cache"))
    built = _create(tmp_path / "first")
    [template] = (tmp_path / "cache").glob("mlflow-*-store.db")
    spoil(template)
    fresh = _create(tmp_path / "second")
    names = [[row[:2] for row in _schema(database)[0]] for database in (fresh, built)]
    assert names[0] == names[1] and _schema(fresh)[1] == _schema(built)[1]  # (two migrations order a CHECK list apart)
    assert _schema(fresh)[2] == [(0, "Default", (tmp_path / "second").resolve().as_uri() + "/0")]
    connection = sqlite3.connect(fresh)
    assert connection.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    connection.close()
    assert store._empty_store(template, store._schema_revisions()[0])  # the template was made again
