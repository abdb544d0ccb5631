"""Which attributes a dataset serves in place for conditions: all within the default budget, or those
``build --index-attrs`` names, or none (``--no-index-attrs``); appends keep the choice, ``info`` reports it,
a name no event has is refused, and answers do not depend on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from api.cli import main
from api.service import run_query

CSV = "ts,type,amount,resource,note\n" + "".join(
    f"2024-01-01T00:{i // 60:02d}:{i % 60:02d}Z,{'AB'[i % 2]},{i * 10},r{i % 3},{'x' * (i % 5)}\n"
    for i in range(120))
QUERY = "PATTERN SEQ(A a, B b) WHERE a.amount >= 300 AND b.resource = 'r1' WITHIN 1 min RETURN count"


def info(capsys: pytest.CaptureFixture[str], name: str) -> dict:
    capsys.readouterr()
    assert main(["info", name, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture()
def events(tmp_path: Path) -> Path:
    path = tmp_path / "events.csv"
    path.write_text(CSV)
    return path


def test_the_default_serves_every_cheap_attribute(home: Path, events: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "d", str(events), "--engine", "local"]) == 0
    section = info(capsys, "d")["attr_index"]
    assert section["chosen"] is None
    assert sorted(section["attributes"]) == ["amount", "note", "resource"] and section["unserved"] == []
    assert all(e["parts"] == section["parts"] and e["bytes"] > 0 for e in section["attributes"].values())
    capsys.readouterr()
    assert main(["info", "d"]) == 0
    assert "in place    amount (" in capsys.readouterr().out


def test_named_attributes_only_and_appends_keep_them(home: Path, events: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "d", str(events), "--engine", "local", "--index-attrs", "amount"]) == 0
    assert main(["build", "all", str(events), "--engine", "local"]) == 0
    section = info(capsys, "d")["attr_index"]
    assert section["chosen"] == ["amount"]
    assert list(section["attributes"]) == ["amount"] and section["unserved"] == ["note", "resource"]
    later = tmp_path / "later.csv"
    later.write_text("ts,type,amount,resource\n2024-01-02T00:00:00Z,A,5000,r1\n2024-01-02T00:00:30Z,B,1,r1\n")
    assert main(["append", "d", str(later), "--engine", "local"]) == 0
    assert main(["append", "all", str(later), "--engine", "local"]) == 0
    section = info(capsys, "d")["attr_index"]
    assert section["parts"] == 2 and section["attributes"]["amount"]["parts"] == 2
    assert list(section["attributes"]) == ["amount"]
    # the answers are the same whatever is served in place
    for mode in ("exact", "verified"):
        assert run_query(home, "d", QUERY, mode=mode)["count"] == run_query(home, "all", QUERY, mode=mode)["count"]
    assert run_query(home, "d", QUERY, mode="exact")["count"] > 0


def test_none_served(home: Path, events: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", "d", str(events), "--engine", "local", "--no-index-attrs"]) == 0
    section = info(capsys, "d")["attr_index"]
    assert section["chosen"] == [] and section["attributes"] == {}
    assert section["unserved"] == ["amount", "note", "resource"]
    assert run_query(home, "d", QUERY, mode="verified")["count"] == run_query(home, "d", QUERY, mode="exact")["count"]


def test_an_attribute_no_event_has_is_refused(home: Path, events: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["build", "d", str(events), "--engine", "local", "--index-attrs", "amount,amout"]) != 0
    err = capsys.readouterr().err
    assert "--index-attrs" in err and "'amout'" in err and "amount, note, resource" in err
    assert not (home / "datasets" / "d").exists()
    with pytest.raises(SystemExit):  # argparse's usage error
        main(["build", "d", str(events), "--index-attrs", "amount,,x"])
    assert "a comma-separated list of attribute names" in capsys.readouterr().err


def test_a_build_job_takes_the_option(home: Path, events: Path) -> None:
    """The body of ``POST /v1/datasets/{name}/builds`` names the attributes as a list (the schema checks it)."""
    from api.schemas import BUILD_REQUEST
    from api.service import build_dataset, dataset_info

    assert not BUILD_REQUEST.errors({"inputs": ["x"], "index_attrs": ["resource"]})
    assert BUILD_REQUEST.errors({"inputs": ["x"], "index_attrs": "resource"})
    build_dataset(home, "j", [events], {"index_attrs": ["resource"]})
    assert list(dataset_info(home, "j")["attr_index"]["attributes"]) == ["resource"]
