"""Every file a command writes follows one rule (`tuner.spec.outputs`, issue 33): a new file is
written; an existing regular file only with `--force`; never, even with `--force`, the study
file, its database, or what is not a regular file (a device, a folder, a pipe, a link to one).
A refusal is one line on stderr, exit 2, and nothing written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from results_fixtures import build_study

from tuner.errors import UserError
from tuner.spec.outputs import check_output_file, write_output_file
from tuner_testing import tuner


def _refused(result, *words: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_the_rule_on_each_kind_of_path(tmp_path: Path) -> None:
    new = tmp_path / "new.txt"
    write_output_file(new, "one", "-o")
    assert new.read_text() == "one"
    with pytest.raises(UserError, match=r"exists.*--force"):
        write_output_file(new, "two", "-o")
    assert new.read_text() == "one"
    write_output_file(new, "two", "-o", force=True)
    assert new.read_text() == "two"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "to-fifo").symlink_to(fifo)
    (tmp_path / "to-nothing").symlink_to(tmp_path / "missing")
    (tmp_path / "to-dir").symlink_to(tmp_path)
    for path in (fifo, tmp_path / "to-fifo", Path("/dev/null")):
        with pytest.raises(UserError, match="not a regular file"):
            write_output_file(path, "x", "-o", force=True)  # and never blocks on the pipe
    with pytest.raises(UserError, match="a link to nothing"):
        write_output_file(tmp_path / "to-nothing", "x", "-o", force=True)
    assert not (tmp_path / "missing").exists()
    for path in (tmp_path, tmp_path / "to-dir"):
        with pytest.raises(UserError, match="is a directory"):
            check_output_file(path, "-o", force=True)
    kept = tmp_path / "kept.db"
    kept.write_text("data")
    (tmp_path / "to-kept").symlink_to(kept)
    for path in (kept, tmp_path / "to-kept"):
        with pytest.raises(UserError, match="is the database: never"):
            write_output_file(path, "x", "-o", force=True, keep=[(kept, "the database")])
    assert kept.read_text() == "data"
    linked = tmp_path / "link-to-file"
    linked.symlink_to(new)  # a link to a regular file: replaced with --force, like the file
    write_output_file(linked, "three", "-o", force=True)
    assert new.read_text() == "three"


@pytest.fixture
def stored(tmp_path: Path) -> tuple[Path, Path]:
    study_file, url = build_study(tmp_path)
    return study_file, Path(url.removeprefix("sqlite:///"))


@pytest.mark.parametrize("command", ["export", "report", "calibrate"])
def test_the_study_file_and_database_are_never_replaced(stored, command: str) -> None:
    study_file, db = stored
    before = {p: p.read_bytes() for p in (study_file, db)}
    for target, name in ((db, "the study's database"), (study_file, "the study file")):
        for force in ([], ["--force"]):
            result = tuner(command, str(study_file), "-o", str(target), *force, cwd=db.parent)
            _refused(result, name, "never")
    # relative to the working directory, as the default storage is
    rel = tuner(command, study_file.name, "-o", db.name, "--force", cwd=db.parent)
    _refused(rel, "database")
    assert {p: p.read_bytes() for p in before} == before


def test_export_and_report_need_force_for_an_existing_file(stored) -> None:
    study_file, db = stored
    for command, name in (("export", "best.sh"), ("report", "report.html")):
        out = db.parent / name
        out.write_text("mine")
        _refused(tuner(command, str(study_file), "-o", str(out), cwd=db.parent), "--force")
        assert out.read_text() == "mine"
        done = tuner(command, str(study_file), "-o", str(out), "--force", cwd=db.parent)
        assert done.returncode == 0, done.stderr
        assert out.read_text() != "mine"
    png = db.parent / "front.png"
    png.write_text("mine")
    report = tuner("report", str(study_file), "-o", "r2.html", "--png", str(png), cwd=db.parent)
    _refused(report, "--png", "--force")
    assert png.read_text() == "mine" and not (db.parent / "r2.html").exists()


def test_devices_and_pipes_are_never_written_even_with_force(stored) -> None:
    study_file, db = stored
    fifo = db.parent / "fifo"
    os.mkfifo(fifo)
    cases = [
        ("export", str(study_file), "-o", "/dev/null", "--force"),
        ("report", str(study_file), "-o", str(fifo), "--force"),
        ("init", "--engine", "sim", "--gpu", "a6000", "--model", "tiny-qwen2", "-o", "/dev/null"),
        ("init", "--engine", "sim", "--gpu", "a6000", "--model", "tiny-qwen2", "-o", str(fifo)),
        ("sim", "profile", "a6000", "-o", str(fifo), "--force"),
    ]
    for args in cases:
        for force in ([], ["--force"]):
            _refused(tuner(*args, *force, cwd=db.parent), "not a regular file")
    assert Path("/dev/null").is_char_device() and fifo.is_fifo()


def test_profile_and_bench_result_need_force(tmp_path: Path) -> None:
    out = tmp_path / "profile.yaml"
    out.write_text("mine")
    _refused(tuner("sim", "profile", "a6000", "-o", str(out), cwd=tmp_path), "--force")
    assert out.read_text() == "mine"
    assert tuner("sim", "profile", "a6000", "-o", str(out), "--force", cwd=tmp_path).returncode == 0
    assert "a6000" in out.read_text()
    result = tmp_path / "result.json"
    result.write_text("mine")
    bench = tuner("bench", "--save-result", str(result), "--port", "9", cwd=tmp_path)
    _refused(bench, "--save-result", "--force")
    assert result.read_text() == "mine"


def test_init_writes_a_file_readable_as_any_other(tmp_path: Path) -> None:
    """Its mode is the umask's, as any file written in place (not mkstemp's 0600); its "next"
    commands, said and written in its comments, are shell commands a space or a quote in the
    path cannot split (issue 50, the fourth round's leftovers)."""
    import shlex

    name = "it's a study.yaml"
    made = tuner(
        "init", "--no-preview", "--engine", "sim", "--gpu", "a6000", "--model", "tiny-qwen2",
        "-o", name, cwd=tmp_path,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    mask = os.umask(0o022)
    os.umask(mask)
    assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~mask
    said = made.stdout.splitlines()[-1].split("; next: ")[1].split(", ")
    written = (tmp_path / name).read_text().split("# Next:\n")[1].splitlines()[:3]
    for commands in (said, [line.removeprefix("#   ") for line in written]):
        assert [shlex.split(c) for c in commands] == [
            ["tuner", verb, name] for verb in ("check", "run", "best")
        ]


def test_a_database_is_never_replaced_even_one_of_another_study(tmp_path: Path) -> None:
    """`tuner init -o tuner.db --force` would replace the default storage with YAML."""
    from tuner.store.storage import Store

    Store(f"sqlite:///{tmp_path / 'tuner.db'}").close()
    before = (tmp_path / "tuner.db").read_bytes()
    made = tuner(
        "init", "--no-preview", "--engine", "sim", "--gpu", "a6000", "--model", "tiny-qwen2",
        "-o", "tuner.db", "--force", cwd=tmp_path,
    )  # fmt: skip
    _refused(made, "SQLite database", "never")
    assert (tmp_path / "tuner.db").read_bytes() == before
