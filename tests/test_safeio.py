"""ralph.safeio: the loop's file IO under the project never goes through a path the agent controls."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from ralph import safeio
from ralph.errors import RalphError
from ralph.safeio import UnsafePath


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """(project, outside): a project with ``ralph/tasks.json``, and a host directory with a canary."""
    project, outside = tmp_path / "project", tmp_path / "outside"
    (project / "ralph").mkdir(parents=True)
    (project / "ralph" / "tasks.json").write_text("{}\n")
    outside.mkdir()
    (outside / "canary").write_text("host file\n")
    return project, outside


def test_regular_files_read_write_append(tree: tuple[Path, Path]) -> None:
    project, _ = tree
    path = project / "ralph" / "tasks.json"
    assert safeio.read_text(path, project) == "{}\n"
    safeio.write_text(path, project, '{"a": 1}\n')
    safeio.append_text(path, project, "more\n")
    assert path.read_text() == '{"a": 1}\nmore\n'
    safeio.append_text(project / "ralph" / "new.txt", project, "made\n")
    assert (project / "ralph" / "new.txt").read_text() == "made\n"
    safeio.write_text(project / "a" / "b" / "c.txt", project, "deep", parents=True)
    assert (project / "a" / "b" / "c.txt").read_text() == "deep"
    assert sorted(p.name for p in (project / "ralph").iterdir()) == ["new.txt", "tasks.json"]  # no temp left
    assert safeio.kind(path, project) == "file" and safeio.problem(path, project) is None
    with pytest.raises(FileNotFoundError):
        safeio.read_bytes(project / "ralph" / "missing", project)
    with pytest.raises(ValueError):
        safeio.read_bytes(project / ".." / "outside" / "canary", project)


def test_a_symlinked_file_is_never_read_or_written_through(tree: tuple[Path, Path]) -> None:
    project, outside = tree
    canary = outside / "canary"
    link = project / "ralph" / "progress.txt"
    link.symlink_to(canary)
    with pytest.raises(UnsafePath) as refused:
        safeio.read_text(link, project)
    assert isinstance(refused.value, OSError) and isinstance(refused.value, RalphError)  # unreadable; a clear stop
    assert "ralph/progress.txt is a symlink" in str(refused.value)
    with pytest.raises(UnsafePath):
        safeio.append_text(link, project, "echo pwned\n")
    assert safeio.kind(link, project) == "symlink" and "symlink" in (safeio.problem(link, project) or "")
    safeio.write_text(link, project, "the loop's text\n")  # replaces the link itself
    assert not link.is_symlink() and link.read_text() == "the loop's text\n"
    assert canary.read_text() == "host file\n"


def test_a_dangling_symlink_is_not_created_through(tree: tuple[Path, Path]) -> None:
    project, outside = tree
    link = project / ".ralph-active"
    link.symlink_to(outside / "made-by-the-loop")
    with pytest.raises(UnsafePath):
        safeio.append_text(link, project, "x")
    safeio.write_text(link, project, "{}\n")
    assert not (outside / "made-by-the-loop").exists() and link.read_text() == "{}\n"


def test_a_symlink_in_a_middle_component_is_refused_for_every_operation(tree: tuple[Path, Path]) -> None:
    project, outside = tree
    real = project / "ralph"
    real.rename(project / "ralph-real")
    (project / "ralph").symlink_to(outside)
    path = project / "ralph" / "canary"
    for call in (
        lambda: safeio.read_bytes(path, project),
        lambda: safeio.write_text(path, project, "pwned"),
        lambda: safeio.write_text(project / "ralph" / "new", project, "pwned"),
        lambda: safeio.append_text(path, project, "pwned"),
        lambda: safeio.remove(path, project),
        lambda: safeio.make_dirs(project / "ralph" / "sub", project),
        lambda: safeio.move(project / "ralph-real" / "tasks.json", project / "ralph" / "tasks.json", project),
    ):
        with pytest.raises(UnsafePath, match="ralph is a symlink"):
            call()
    assert sorted(p.name for p in outside.iterdir()) == ["canary"]
    assert (outside / "canary").read_text() == "host file\n"
    assert safeio.kind(path, project) == "unsafe"
    # the same refusal when a component is a symlink to a directory inside the project
    (project / "inner").symlink_to(project / "ralph-real")
    with pytest.raises(UnsafePath, match="inner is a symlink"):
        safeio.read_bytes(project / "inner" / "tasks.json", project)


def test_a_component_swapped_for_a_symlink_after_the_walk_opened_it_changes_nothing(
    tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race a path-based check loses: check ralph/, then an agent swaps it for a link, then write."""
    project, outside = tree
    real_open = os.open
    swapped = []

    def swap_then_open(name, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not swapped and str(name).startswith(".tasks.json.") and "dir_fd" in kwargs:
            # ralph/ is open (the walk holds its descriptor): now the attacker moves it away and links it out
            (project / "ralph").rename(project / "ralph-moved")
            (project / "ralph").symlink_to(outside)
            swapped.append(True)
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swap_then_open)
    safeio.write_text(project / "ralph" / "tasks.json", project, "the loop's list\n")
    monkeypatch.undo()
    assert swapped
    assert (project / "ralph-moved" / "tasks.json").read_text() == "the loop's list\n"  # where the walk was
    assert sorted(p.name for p in outside.iterdir()) == ["canary"]
    # the control: a path-based write after the same swap lands outside the project
    (project / "ralph" / "tasks.json").write_text("path-based\n")
    assert (outside / "tasks.json").read_text() == "path-based\n"


def test_a_file_swapped_for_a_symlink_between_stat_and_open_is_refused(
    tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    project, outside = tree
    path = project / "ralph" / "tasks.json"
    real_open = os.open

    def swap_then_open(name, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name == "tasks.json" and "dir_fd" in kwargs:
            path.unlink()
            path.symlink_to(outside / "canary")
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swap_then_open)
    with pytest.raises(UnsafePath):
        safeio.read_bytes(path, project)
    with pytest.raises(UnsafePath):
        safeio.append_text(path, project, "pwned\n")
    monkeypatch.undo()
    assert (outside / "canary").read_text() == "host file\n"


def test_fifo_and_device_are_never_opened(tree: tuple[Path, Path]) -> None:
    project, _ = tree
    fifo = project / "ralph" / "progress.txt"
    os.mkfifo(fifo)
    with pytest.raises(UnsafePath, match="is a fifo"):  # would block forever if it were opened for reading
        safeio.read_bytes(fifo, project)
    with pytest.raises(UnsafePath, match="is a fifo"):
        safeio.append_text(fifo, project, "x")
    assert safeio.kind(fifo, project) == "other"
    safeio.write_text(fifo, project, "regular again\n")
    assert stat.S_ISREG(fifo.lstat().st_mode)
    device = project / "ralph" / "device"
    try:
        os.mknod(device, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD (the fifo case above ran)")
    with pytest.raises(UnsafePath, match="is a device"):
        safeio.read_bytes(device, project)


def test_hard_links_are_neither_read_nor_appended_to_and_writes_break_the_link(tree: tuple[Path, Path]) -> None:
    """Policy: the loop reads and appends only to files with a single link (a hard link shares the host file's
    inode, so an append would write into it); an atomic write replaces the name and leaves the other name alone."""
    project, outside = tree
    canary = outside / "canary"
    link = project / "ralph" / "progress.txt"
    os.link(canary, link)
    with pytest.raises(UnsafePath, match="2 hard links"):
        safeio.read_bytes(link, project)
    with pytest.raises(UnsafePath, match="2 hard links"):
        safeio.append_text(link, project, "echo pwned\n")
    assert safeio.kind(link, project) == "hardlink"
    safeio.write_text(link, project, "the loop's log\n")
    assert canary.read_text() == "host file\n" and canary.stat().st_nlink == 1
    assert link.read_text() == "the loop's log\n"


def test_a_directory_in_place_of_a_file(tree: tuple[Path, Path]) -> None:
    project, outside = tree
    path = project / "ralph" / "tasks.json"
    path.unlink()
    path.mkdir()
    (path / "escape").symlink_to(outside)
    with pytest.raises(UnsafePath, match="is a directory"):
        safeio.read_bytes(path, project)
    with pytest.raises(IsADirectoryError):
        safeio.write_text(path, project, "{}")
    safeio.write_text(path, project, "{}", replace_dir=True)
    assert path.read_text() == "{}" and (outside / "canary").exists()


def test_remove_and_move_act_on_names_not_targets(tree: tuple[Path, Path]) -> None:
    project, outside = tree
    link = project / "ralph" / "link"
    link.symlink_to(outside)
    assert safeio.remove(link, project) and not os.path.lexists(link)
    assert (outside / "canary").exists()
    assert safeio.remove(link, project) is False
    folder = project / "ralph" / "folder"
    folder.mkdir()
    (folder / "out").symlink_to(outside)
    assert safeio.remove(folder, project) and (outside / "canary").exists()
    link.symlink_to(outside / "canary")
    safeio.move(link, project / "archive" / "link", project, parents=True)
    assert (project / "archive" / "link").is_symlink() and (outside / "canary").read_text() == "host file\n"
    with pytest.raises(FileExistsError):
        safeio.move(project / "ralph" / "tasks.json", project / "archive" / "link", project)


def test_read_files_reads_only_small_plain_files_and_never_follows_a_link(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "refs" / "sub").mkdir(parents=True)
    (root / "refs" / "a").write_text("one\n")
    (root / "refs" / "sub" / "b").write_text("two\n")
    (root / "refs" / "big").write_bytes(b"x" * 100)
    secret = tmp_path / "secret"
    secret.write_text("the person's key\n")
    (tmp_path / "secret-dir").mkdir()
    (tmp_path / "secret-dir" / "c").write_text("inside\n")
    (root / "refs" / "link").symlink_to(secret)
    (root / "refs" / "dirlink").symlink_to(tmp_path / "secret-dir")
    os.mkfifo(root / "refs" / "fifo")  # opened, it would block
    (root / "refs" / "hard").hardlink_to(secret)
    deep = root / "refs" / "/".join(["d"] * (safeio.MAX_DEPTH + 2))
    deep.mkdir(parents=True)
    (deep / "e").write_text("deep\n")
    found = safeio.read_files(root / "refs", root, max_bytes=10)
    assert found["a"] == b"one\n" and found["sub/b"] == b"two\n"
    assert {name for name, data in found.items() if data is None} == {
        "big", "link", "dirlink", "fifo", "hard", "/".join(["d"] * safeio.MAX_DEPTH)}
    assert not any("secret" in name or name.endswith("/e") for name in found)
    with pytest.raises(UnsafePath):
        safeio.read_files(root / "refs" / "dirlink", root, max_bytes=10)
    with pytest.raises(FileNotFoundError):
        safeio.read_files(root / "none", root, max_bytes=10)


def test_read_bytes_refuses_a_file_larger_than_asked(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 11)
    assert safeio.read_bytes(tmp_path / "f", tmp_path, max_bytes=11) == b"x" * 11
    with pytest.raises(UnsafePath):
        safeio.read_bytes(tmp_path / "f", tmp_path, max_bytes=10)
