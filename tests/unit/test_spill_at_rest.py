"""Spilled rows at rest: a private root, private session directories and files, no
writing through planted links, removal on close and a sweep of ended sessions."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from hybrid_shuffle import spill_dirs
from hybrid_shuffle.errors import ConfigError
from hybrid_shuffle.shuffle.spill_file import SpillFile
from hybrid_shuffle.spill_dirs import (
    OWNER_MARKER,
    check_spill_root,
    create_session_dir,
    default_spill_dir,
    is_session_id,
    make_private_dirs,
    new_session_id,
    read_owner,
    remove_session_dir,
    spill_files,
    sweep_stale_sessions,
)

TABLE = pa.table({"k": [1, 2, 3], "v": ["a", "b", "c"]})
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def mode(path: str | Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    """Umask 0: whatever is created is as open as its creator asks for."""
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


# -- the root -------------------------------------------------------------------------------


def test_spill_dir_that_is_a_file_is_rejected_naming_the_key(tmp_path: Path) -> None:
    file = tmp_path / "spill"
    file.write_text("not a directory")
    with pytest.raises(ConfigError) as err:
        check_spill_root(str(file))
    assert str(err.value) == (
        f"shuffle.spill_dir: '{file}' is a file, not a directory; set it to a directory only "
        "you can write"
    )


def test_spill_dir_below_a_file_is_rejected_naming_the_key(tmp_path: Path) -> None:
    file = tmp_path / "spill"
    file.write_text("")
    with pytest.raises(ConfigError, match=r"^shuffle\.spill_dir: cannot create '.*spill/sub'"):
        check_spill_root(str(file / "sub"))
    with pytest.raises(ConfigError, match=r"^shuffle\.spill_dir: cannot create .* is a file"):
        check_spill_root(str(file / "sub"), create=False)


def test_unwritable_spill_dir_is_rejected_naming_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    real_access = os.access

    def access(path: str, how: int, **kwargs: object) -> bool:  # root may write anywhere
        if str(path).startswith(str(locked)) and how & os.W_OK:
            return False
        return real_access(path, how)

    monkeypatch.setattr(os, "access", access)
    try:
        with pytest.raises(ConfigError) as err:
            check_spill_root(str(locked))
        assert str(err.value) == (
            f"shuffle.spill_dir: '{locked}' is not writable by this user; set it to a "
            "directory only you can write"
        )
        with pytest.raises(ConfigError, match=r"^shuffle\.spill_dir: .* not writable"):
            check_spill_root(str(locked / "below"), create=False)
        if not IS_ROOT:
            with pytest.raises(ConfigError, match=r"^shuffle\.spill_dir: cannot create"):
                check_spill_root(str(locked / "below"))
    finally:
        locked.chmod(0o700)


def test_missing_spill_dir_is_created_private_parents_included(
    tmp_path: Path, permissive_umask: None
) -> None:
    root = tmp_path / "a" / "b" / "spill"
    assert check_spill_root(str(root)) == str(root)
    assert [mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", root)] == [0o700] * 3


def test_spill_dir_is_returned_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert check_spill_root("relative") == str(tmp_path / "relative")


def test_validating_a_spill_dir_creates_nothing(tmp_path: Path) -> None:
    root = tmp_path / "not" / "yet"
    assert check_spill_root(str(root), create=False) == str(root)
    assert not (tmp_path / "not").exists()


def test_spill_dir_writable_by_everyone_needs_the_sticky_bit(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(ConfigError, match=r"^shuffle\.spill_dir: .* writable by every user and"):
        check_spill_root(str(shared))
    shared.chmod(0o1777)  # as /tmp: others cannot remove or rename what is ours
    assert check_spill_root(str(shared)) == str(shared)
    shared.chmod(0o770)  # group-writable: accepted (user-private groups, umask 002)
    assert check_spill_root(str(shared)) == str(shared)


def test_default_spill_dir_is_per_user() -> None:
    assert os.path.basename(default_spill_dir()) == f"hybrid-shuffle-{os.getuid()}"


def test_default_spill_dir_of_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    squatted = tmp_path / "hybrid-shuffle-default"
    squatted.mkdir(mode=0o700)
    monkeypatch.setattr(spill_dirs, "default_spill_dir", lambda: str(squatted))
    me = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: me + 1)
    with pytest.raises(ConfigError, match=r"^shuffle\.spill_dir: the default .* another user"):
        check_spill_root(str(squatted))


def test_default_spill_dir_must_not_be_a_symlink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    link = tmp_path / "hybrid-shuffle-default"
    link.symlink_to(elsewhere)
    monkeypatch.setattr(spill_dirs, "default_spill_dir", lambda: str(link))
    with pytest.raises(ConfigError, match=r"is a symbolic link, not a directory"):
        check_spill_root(str(link))
    # a root the user chose may be a link (e.g. /tmp -> /private/tmp)
    chosen = tmp_path / "chosen-link"
    chosen.symlink_to(elsewhere)
    assert check_spill_root(str(chosen)) == str(chosen)


def test_make_private_dirs_keeps_existing_parents(tmp_path: Path, permissive_umask: None) -> None:
    (tmp_path / "kept").mkdir(mode=0o755)
    make_private_dirs(str(tmp_path / "kept" / "new" / "leaf"))
    make_private_dirs(str(tmp_path / "kept" / "new" / "leaf"))  # already there: fine
    assert mode(tmp_path / "kept") == 0o755
    assert mode(tmp_path / "kept" / "new") == mode(tmp_path / "kept" / "new" / "leaf") == 0o700


# -- session directories ----------------------------------------------------------------------


def test_session_dir_is_private_and_names_its_owner(tmp_path: Path, permissive_umask: None) -> None:
    sid = new_session_id()
    path = create_session_dir(str(tmp_path), sid, "host:123")
    assert path == str(tmp_path / sid)
    assert mode(path) == 0o700
    assert mode(os.path.join(path, OWNER_MARKER)) == 0o600
    assert read_owner(path) == "host:123"
    assert spill_files(path) == []


def test_session_ids_have_one_recognisable_form() -> None:
    assert is_session_id(new_session_id())
    assert not is_session_id("data") and not is_session_id("s12") and not is_session_id("..")
    with pytest.raises(ValueError, match="new_session_id"):
        create_session_dir("/tmp", "../escape", "host:1")


def test_session_dir_is_never_shared(tmp_path: Path) -> None:
    sid = new_session_id()
    create_session_dir(str(tmp_path), sid, "host:1")
    with pytest.raises(FileExistsError):
        create_session_dir(str(tmp_path), sid, "host:2")
    assert read_owner(str(tmp_path / sid)) == "host:1"


def test_spill_files_lists_data_but_not_the_owner_marker(tmp_path: Path) -> None:
    path = create_session_dir(str(tmp_path), new_session_id(), "host:1")
    os.mkdir(os.path.join(path, "executor-0"))
    SpillFile(os.path.join(path, "executor-0", "p.arrows")).append(TABLE)
    assert spill_files(path) == [os.path.join(path, "executor-0", "p.arrows")]


def test_closing_removes_the_session_dir_with_everything_in_it(tmp_path: Path) -> None:
    path = create_session_dir(str(tmp_path), new_session_id(), "host:1")
    make_private_dirs(os.path.join(path, "executor-0"))
    SpillFile(os.path.join(path, "executor-0", "left.arrows")).append(TABLE)
    remove_session_dir(path)
    assert not os.path.lexists(path)
    remove_session_dir(path)  # again: nothing to do
    assert os.listdir(tmp_path) == []


def test_removing_refuses_a_path_that_is_not_a_session_dir(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a session directory"):
        remove_session_dir(str(tmp_path))
    assert tmp_path.exists()


def test_removing_a_linked_session_dir_removes_the_link_only(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("x")
    link = tmp_path / new_session_id()
    link.symlink_to(victim)
    remove_session_dir(str(link))
    assert not os.path.lexists(link)
    assert (victim / "keep.txt").exists()


# -- the sweep --------------------------------------------------------------------------------


def test_sweep_removes_only_our_directories_of_ended_sessions(tmp_path: Path) -> None:
    root = str(tmp_path)
    dead = create_session_dir(root, new_session_id(), "host:dead")
    alive = create_session_dir(root, new_session_id(), "host:alive")
    unsure = create_session_dir(root, new_session_id(), "host:unsure")
    SpillFile(os.path.join(dead, "rows.arrows")).append(TABLE)
    unmarked = tmp_path / new_session_id()  # looks like a session id, but has no marker
    unmarked.mkdir()
    forged = tmp_path / new_session_id()  # a marker that is not ours
    forged.mkdir()
    (forged / OWNER_MARKER).write_text("host:dead\n")
    other = tmp_path / "photos"  # not named like a session
    other.mkdir()
    (other / OWNER_MARKER).write_text("hybrid-shuffle session directory\nhost:dead\n")
    target = tmp_path / "target"
    target.mkdir()
    linked = tmp_path / new_session_id()  # a link to one of ours is not a directory of ours
    linked.symlink_to(dead)

    def is_alive(owner: str) -> bool:
        if owner == "host:unsure":
            raise RuntimeError("cannot tell")
        return owner == "host:alive"

    assert sweep_stale_sessions(root, is_alive) == [dead]
    assert not os.path.lexists(dead)
    for kept in (alive, unsure, unmarked, forged, other, target, linked):
        assert os.path.lexists(kept), kept


def test_sweep_of_a_missing_root_removes_nothing(tmp_path: Path) -> None:
    assert sweep_stale_sessions(str(tmp_path / "absent"), lambda owner: False) == []


# -- spill files ------------------------------------------------------------------------------


def test_spill_files_are_private_to_the_user(tmp_path: Path, permissive_umask: None) -> None:
    spill = SpillFile(str(tmp_path / "p.arrows"))
    segment = spill.append(TABLE)
    assert mode(spill.path) == 0o600
    assert spill.read(segment).equals(TABLE)
    spill.delete()


def test_spill_file_creation_does_not_follow_symlinks(tmp_path: Path) -> None:
    target = tmp_path / "victim.txt"
    target.write_text("precious")
    planted = tmp_path / "p.arrows"
    planted.symlink_to(target)
    with pytest.raises(FileExistsError, match=r"spill file '.*p\.arrows' already exists"):
        SpillFile(str(planted))
    assert target.read_text() == "precious"
    dangling = tmp_path / "q.arrows"
    dangling.symlink_to(tmp_path / "would-be-created")
    with pytest.raises(FileExistsError):
        SpillFile(str(dangling))
    assert not (tmp_path / "would-be-created").exists()


def test_spill_file_never_reuses_an_existing_file(tmp_path: Path) -> None:
    existing = tmp_path / "p.arrows"
    existing.write_bytes(b"someone else's bytes")
    with pytest.raises(FileExistsError, match="refusing to reuse it"):
        SpillFile(str(existing))
    assert existing.read_bytes() == b"someone else's bytes"


def test_deleted_spill_file_is_gone_and_a_second_delete_spares_a_new_file(tmp_path: Path) -> None:
    path = str(tmp_path / "p.arrows")
    first = SpillFile(path)
    first.append(TABLE)
    first.delete()
    assert not os.path.lexists(path)
    second = SpillFile(path)  # the same path, a new partition
    first.delete()
    assert os.path.exists(path)
    second.delete()
    assert os.listdir(tmp_path) == []


def test_spill_files_are_not_inherited_by_child_processes(tmp_path: Path) -> None:
    spill = SpillFile(str(tmp_path / "p.arrows"))
    assert not os.get_inheritable(spill._file.fileno())
    spill.delete()
