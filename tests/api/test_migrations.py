"""Catalog migrations: upgrade from empty, downgrade to base, the models agree with the migrations, and the
app and CLI refuse a database that is not at head — on SQLite, and on a real PostgreSQL when one can start."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from api import db
from api.app import create_app
from api.catalog import Base, DatasetState, open_catalog
from api.cli import main
from exact.errors import Conflict

CATALOG_TABLES = {"datasets", "index_versions", "build_jobs", "tokens", "query_log", "watches"}


def sqlite_url(path: Path) -> str:
    return f"sqlite:///{path.as_posix()}"


def tables(engine) -> set[str]:  # noqa: ANN001
    return set(inspect(engine).get_table_names()) - {"alembic_version"}


def test_upgrade_from_empty_creates_every_table_at_head(tmp_path: Path) -> None:
    engine = db.make_engine(sqlite_url(tmp_path / "c.db"))
    assert db.is_empty(engine) and db.current_revision(engine) is None
    assert db.upgrade(engine) == db.head_revision()
    assert tables(engine) == CATALOG_TABLES
    db.check_at_head(engine)  # does not raise


def test_models_match_the_migrations(tmp_path: Path) -> None:
    """A model change without a migration (or the reverse) shows up as an autogenerate difference."""
    engine = db.make_engine(sqlite_url(tmp_path / "c.db"))
    db.upgrade(engine)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_downgrade_to_base_removes_everything_and_upgrade_restores(tmp_path: Path) -> None:
    engine = db.make_engine(sqlite_url(tmp_path / "c.db"))
    db.upgrade(engine)
    assert db.downgrade(engine, "0001") == "0001"
    assert tables(engine) == {"datasets", "index_versions", "tokens"}
    assert db.downgrade(engine, "base") is None
    assert tables(engine) == set()
    assert db.upgrade(engine) == db.head_revision()
    assert tables(engine) == CATALOG_TABLES


def test_data_survives_a_downgrade_and_upgrade_of_the_later_revision(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "c.db")
    catalog = open_catalog(url)
    catalog.upsert_dataset("kept", state=DatasetState.READY, events=42)
    db.downgrade(catalog.engine, "0001")
    db.upgrade(catalog.engine)
    assert catalog.get_dataset("kept")["events"] == 42


def test_watch_cursors_of_the_first_event_form_become_moments_and_back(tmp_path: Path) -> None:
    """0007: a watch made when cursors named first events keeps its place (a moment and the old cursor as a
    floor, which the stream parses to the same position), and a downgrade gives the old cursor back."""
    from sketch.answer.standing import Cursor

    engine = db.make_engine(sqlite_url(tmp_path / "c.db"))
    db.upgrade(engine, "0006")
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO watches (id, dataset, query, mode, cursor, created, delivered) VALUES "
                          "('w1', 'd', 'q', 'verified', '12:3', '2026-01-01', '15:0'), "
                          "('w2', 'd', 'q', 'verified', '7:0', '2026-01-01', NULL)"))
    db.upgrade(engine)
    with engine.connect() as conn:
        rows = dict((r[0], (r[1], r[2])) for r in conn.execute(text("SELECT id, cursor, delivered FROM watches")))
    assert rows == {"w1": ("@12:0/12:3", "@15:0/15:0"), "w2": ("@7:0/7:0", None)}
    assert Cursor.parse(rows["w1"][0]) == Cursor.parse("12:3")
    with engine.begin() as conn:
        conn.execute(text("UPDATE watches SET delivered = '@40~99:2' WHERE id = 'w2'"))
    db.downgrade(engine, "0006")
    with engine.connect() as conn:
        rows = dict((r[0], (r[1], r[2])) for r in conn.execute(text("SELECT id, cursor, delivered FROM watches")))
    assert rows == {"w1": ("12:3", "15:0"), "w2": ("7:0", "40:0")}


def test_a_datasets_retention_is_recorded_from_0008_and_datasets_before_keep_everything(tmp_path: Path) -> None:
    """0008: datasets made before it read as keeping all their history; one recorded with a policy after
    it shows it, and a downgrade drops the column with the rest of the row intact."""
    url = sqlite_url(tmp_path / "c.db")
    engine = db.make_engine(url)
    db.upgrade(engine, "0007")
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO datasets (name, state, events, created, updated) VALUES "
                          "('old', 'ready', 5, '2026-01-01', '2026-01-01')"))
    db.upgrade(engine)
    catalog = open_catalog(url)
    assert catalog.get_dataset("old")["retention"] is None and catalog.get_dataset("old")["events"] == 5
    catalog.upsert_dataset("kept", state=DatasetState.READY, events=9, retention="90 days")
    assert catalog.get_dataset("kept")["retention"] == "90 days"
    db.downgrade(engine, "0007")
    with engine.connect() as conn:
        rows = dict(conn.execute(text("SELECT name, events FROM datasets")).all())
        assert "retention" not in {c["name"] for c in inspect(conn).get_columns("datasets")}
    assert rows == {"old": 5, "kept": 9}


def test_a_datasets_location_is_recorded_from_0009_and_datasets_before_live_on_disk(tmp_path: Path) -> None:
    """0009: datasets made before it read as on a server's disk (no location); one recorded on object storage
    after it names its place; a downgrade drops the column and keeps the rows."""
    url = sqlite_url(tmp_path / "c.db")
    engine = db.make_engine(url)
    db.upgrade(engine, "0008")
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO datasets (name, state, events, created, updated) VALUES "
                          "('old', 'ready', 5, '2026-01-01', '2026-01-01')"))
    db.upgrade(engine)
    catalog = open_catalog(url)
    assert catalog.get_dataset("old")["location"] is None
    catalog.upsert_dataset("far", state=DatasetState.READY, events=3, location="s3://b/p/far/1a2b")
    catalog.upsert_dataset("far", state=DatasetState.READY, events=4)  # (a later update keeps it)
    assert catalog.get_dataset("far")["location"] == "s3://b/p/far/1a2b"
    catalog.dispose()
    db.downgrade(engine, "0008")
    with engine.connect() as conn:
        assert "location" not in {c["name"] for c in inspect(conn).get_columns("datasets")}
        assert dict(conn.execute(text("SELECT name, events FROM datasets")).all()) == {"old": 5, "far": 4}


def test_app_refuses_a_database_behind_head(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "c.db")
    engine = db.make_engine(url)
    db.upgrade(engine, "0001")
    behind = rf"revision 0001, behind the head {db.head_revision()}.*seqsketch db upgrade"
    with pytest.raises(db.CatalogOutOfDate, match=behind):
        create_app({"SEQSKETCH_HOME": str(tmp_path), "DATABASE_URL": url})
    # nothing was migrated behind the operator's back
    assert db.current_revision(engine) == "0001"


def test_app_refuses_an_unknown_newer_revision(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "c.db")
    engine = db.make_engine(url)
    db.upgrade(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffff'"))
    with pytest.raises(db.CatalogOutOfDate, match="does not know"):
        create_app({"SEQSKETCH_HOME": str(tmp_path), "DATABASE_URL": url})


def test_app_initialises_an_empty_sqlite_catalog_but_not_when_told_not_to(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "fresh.db")
    with pytest.raises(db.CatalogOutOfDate, match="no seqsketch schema"):
        create_app({"SEQSKETCH_HOME": str(tmp_path), "DATABASE_URL": url, "INIT_EMPTY_SQLITE": False})
    app = create_app({"SEQSKETCH_HOME": str(tmp_path), "DATABASE_URL": url})
    assert app.test_client().get("/v1/health").json["catalog_revision"] == db.head_revision()


def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], home: Path,
            *args: str) -> tuple[int, str, str]:
    """``seqsketch ARGS`` in-process (the console script runs the same ``main``): exit code, out, err."""
    monkeypatch.setenv("SEQSKETCH_HOME", str(home))
    monkeypatch.delenv("SEQSKETCH_DATABASE_URL", raising=False)
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_db_commands_and_refusal_behind_head(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    def cli(*args: str) -> tuple[int, str, str]:
        return run_cli(monkeypatch, capsys, tmp_path, *args)

    assert cli("db", "upgrade", "--revision", "0001")[0] == 0
    code, out, _ = cli("db", "current", "--json")
    assert code == 0 and json.loads(out)["current"] == "0001" and json.loads(out)["at_head"] is False
    # a command that needs the catalog refuses it: one clear line, nothing migrated
    code, _, err = cli("token", "create", "ci", "--scope", "read")
    assert code == 1
    assert err.count("\n") == 1 and "behind the head" in err and "seqsketch db upgrade" in err
    assert json.loads(cli("db", "current", "--json")[1])["current"] == "0001"
    assert cli("db", "upgrade")[0] == 0
    assert cli("token", "create", "ci", "--scope", "read")[0] == 0
    code, out, _ = cli("db", "downgrade", "base", "--json")
    assert code == 0 and json.loads(out)["current"] is None


def test_an_installed_package_carries_its_migrations(tmp_path: Path) -> None:
    """The wheel holds the top-level migrations and the web console's files, and the package installed from it
    in a fresh virtual environment — run outside the checkout — migrates a new catalog to head with
    ``seqsketch db upgrade``."""
    import sys
    import sysconfig
    import zipfile

    repo = Path(__file__).resolve().parents[2]
    source = tmp_path / "source"  # built from a copy: a build writes into its source tree
    shutil.copytree(repo, source, ignore=shutil.ignore_patterns(".git", ".venv", "build", "*.egg-info",
                                                                 ".hypothesis", "__pycache__", "bench"))
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--quiet", "-w",
                            str(wheels)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = wheels.glob("seqsketch-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    versions = [f"migrations/versions/{p.name}" for p in (repo / "migrations/versions").glob("0*.py")]
    assert versions
    console = [f"api/console/static/{p.name}" for p in (repo / "api/console/static").iterdir()]
    for path in ("migrations/env.py", "migrations/script.py.mako", *versions, *console):
        assert path in names, f"{path} is not in the wheel"
    # a fresh venv whose only seqsketch is the wheel; its dependencies are borrowed from this environment's
    # site-packages by a path entry (whose own .pth files, the editable install among them, are not run)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    fresh_python = venv / "bin" / "python"
    fresh_site = Path(subprocess.run([str(fresh_python), "-c", "import sysconfig; "
                                      "print(sysconfig.get_paths()['purelib'])"],
                                     capture_output=True, text=True, check=True).stdout.strip())
    (fresh_site / "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target",
                    str(fresh_site), str(wheel)], check=True, capture_output=True, timeout=300)
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["SEQSKETCH_HOME"] = str(home)
    where = subprocess.run([str(fresh_python), "-c", "import api, migrations; print(api.__file__); "
                            "print(migrations.__file__)"], env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
    assert where.returncode == 0, where.stderr[-2000:]
    assert all(line.startswith(str(fresh_site)) for line in where.stdout.split()), where.stdout
    script = "import sys; from api.cli import main; sys.exit(main(['db', 'upgrade', '--json']))"
    done = subprocess.run([str(fresh_python), "-c", script], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["at_head"] is True
    assert tables(db.make_engine(sqlite_url(home / "catalog.db"))) == CATALOG_TABLES


def test_postgresql_upgrade_downgrade_and_refusal(postgres_url: str, tmp_path: Path) -> None:
    engine = db.make_engine(postgres_url)
    try:
        assert db.upgrade(engine) == db.head_revision()
        assert tables(engine) == CATALOG_TABLES
        with engine.connect() as conn:
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
        catalog = open_catalog(postgres_url)
        row = catalog.upsert_dataset("pg", state=DatasetState.READY, events=7)
        assert row["created"].endswith("+00:00")
        version = catalog.record_index_version("pg", number=1, events=7, files=["v1.idx"], digest="ab" * 32,
                                               config={"m": 1024, "k": 7})
        assert version["config"] == {"m": 1024, "k": 7}
        job = catalog.create_job("pg", ["x.xes"], {"engine": "local"})
        assert catalog.get_job(job["id"])["state"] == "queued"
        with pytest.raises(Conflict):  # the partial unique index: one active build per dataset
            catalog.create_job("pg", ["y.xes"], {})
        other = catalog.create_job("pg2", ["y.xes"], {})
        claimed = [catalog.claim_job("r1"), catalog.claim_job("r2"), catalog.claim_job("r3")]
        assert [c and c["id"] for c in claimed] == [job["id"], other["id"], None]  # oldest first, once each
        assert catalog.fail_jobs([job["id"]], "gone") == [job["id"]]
        assert catalog.create_job("pg", ["z.xes"], {})["state"] == "queued"
        catalog.dispose()
        db.downgrade(engine, "0001")
        with pytest.raises(db.CatalogOutOfDate, match="behind the head"):
            create_app({"SEQSKETCH_HOME": str(tmp_path), "DATABASE_URL": postgres_url})
        # an empty PostgreSQL database is never initialised implicitly
        db.downgrade(engine, "base")
        assert tables(engine) == set()
        with pytest.raises(db.CatalogOutOfDate, match="no seqsketch schema"):
            open_catalog(postgres_url)
    finally:
        engine.dispose()
