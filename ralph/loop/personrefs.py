"""The person's branches are safe (Trust boundary rule 8): the run stays on its branch, and every
other ref keeps what it points to, objects included.

When the run starts, the loop copies the repository's objects into a mirror outside the project
(``<project state dir>/refs-mirror.git``, a bare repository only the loop touches: the object files
copied as they are, :mod:`ralph.loop.objectcopy`; before every iteration the new ones follow, which
keeps the run's own history too) with the protected refs named there, and writes those refs into the
run directory (``refs.json``).  The values it compares with live in this process; a restore fetches
the objects back from the mirror by id.

After every agent session (:meth:`RefGuard.check`) and after the gates' sessions:

- a protected ref the agent moved or deleted is put back from the mirror (so a commit only reachable
  from a rewound branch survives ``git reflog expire`` + ``git gc --prune=now``); where the agent
  had moved it to is kept in the mirror (``refs/ralph-kept/...``) and named in the event;
- HEAD goes back to the run's branch (the work tree as the run's branch has it; a copy of the
  agent's tree saved in the run directory first);
- the run's branch must still contain the iteration's checkpoint: deleted, it is put back; rewritten,
  the agent's tree is committed on top of the checkpoint (nothing of the agent's work is lost, no
  history the loop accepted is dropped).

Protected: every ref but the run's branch, remote-tracking refs (a copy of the remote: a fetch of
the person's during a run is not undone) and the branches of ralph's own worktrees (another loop's
run branch, ``ralph run --parallel``); also the refs only another worktree of the person's has (its
HEAD, ``refs/bisect/``, ``refs/worktree/``, ``refs/rewritten/``: :mod:`ralph.loop.worktreerefs`, for the
worktrees there were when the run started), named as git names them from here
(``worktrees/<id>/HEAD``).  A branch checked out in another worktree of the person's, and such a
worktree's detached HEAD, may move forward (the person may commit there during the run); rewound,
rewritten or deleted, it is put back like the others.  Each is an ``error`` violation the next
iteration is told about, with a ``refs_restored`` / ``head_restored`` event.  A worktree of the
person's whose git directory was removed cannot have its refs put back: the run stops, naming it.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ralph.contracts import Violation
from ralph.errors import UsageError
from ralph.gitutil import git

if TYPE_CHECKING:
    from ralph.loop.objectcopy import ObjectCopy
    from ralph.loop.records import IterationRecord
    from ralph.loop.worktreerefs import OtherWorktree

MIRROR_NAME = "refs-mirror.git"
MIRRORED = "refs/project/"
"""Where the mirror keeps the project's refs (``refs/heads/main`` as ``refs/project/heads/main``)."""
KEPT = "refs/ralph-kept/"
"""Where the mirror keeps what the agent had moved a ref to."""
RESTORE = "refs/ralph-restore/"
"""Temporary refs in the project while a restore fetches objects back."""
UNPROTECTED = ("refs/remotes/", RESTORE)
RALPH_WORKTREES = "ralph-worktrees"
"""Where ralph's own worktrees are, in the common git directory (``ralph run --parallel``)."""
CHECK = "person-refs"
HEAD_CHECK = "run-branch"


@dataclass(frozen=True)
class Ref:
    """A ref's value: the object it names, or the ref a symbolic ref points to."""

    sha: str
    symref: str = ""


def read_refs(project_dir: Path) -> dict[str, Ref]:
    """Every ref of the repository (HEAD aside) as ``for-each-ref`` lists it; a ref whose object is gone
    from the object store (deleted by hand) has the ``sha`` ``""``."""
    fields = "--format=%(refname)%00%(objectname)%00%(symref)"
    checked = git(project_dir, "for-each-ref", fields + "%00%(objecttype)", check=False)  # fails on a missing tip
    out = checked.stdout if checked.returncode == 0 else git(project_dir, "for-each-ref", fields, check=False).stdout
    refs = {}
    for line in out.splitlines():
        name, sha, symref = (line.split("\0") + ["", ""])[:3]
        if name:
            refs[name] = Ref(sha, symref)
    if checked.returncode != 0:
        missing = _missing(project_dir, {ref.sha for ref in refs.values() if not ref.symref})
        refs = {name: Ref("", ref.symref) if ref.sha in missing else ref for name, ref in refs.items()}
    return refs


def _missing(project_dir: Path, shas: set[str]) -> set[str]:
    """The objects of ``shas`` the repository does not have."""
    if not shas:
        return set()
    out = git(project_dir, "cat-file", "--batch-check", input="\n".join(sorted(shas)) + "\n", check=False).stdout
    return {line.split()[0] for line in out.splitlines() if line.endswith(" missing")}


def head_ref(project_dir: Path) -> str | None:
    """The branch HEAD is on (``refs/heads/...``), None when detached."""
    result = git(project_dir, "symbolic-ref", "-q", "HEAD", check=False)
    return result.stdout.strip() or None


class RefGuard:
    """Keeps the run on its branch and the person's other refs where they were, for one run."""

    def __init__(self, project_dir: Path, mirror: Path, emit: Callable[..., None]) -> None:
        self.project_dir = project_dir
        self.mirror = mirror
        self.emit = emit
        self.branch: str | None = None
        """The run's branch (``refs/heads/...``); None when the run started on a detached HEAD."""
        self.protected: dict[str, Ref] = {}
        """The refs kept for the person, with the values they must have."""
        self.forward_only: set[str] = set()
        """Protected branches checked out in another worktree of the person's, and such a worktree's detached
        HEAD: they may move forward."""
        self.run_dir: Path | None = None
        self._synced: dict[str, Ref] | None = None
        self.objects: ObjectCopy | None = None
        """The mirror's copy of the object store (made by :meth:`start`)."""
        self._git_dir: Path | None = None
        self._common: Path | None = None
        self._loops: set[str] = set()
        self._persons: set[str] = set()
        self._adopt = True
        """The next :meth:`refresh` takes every ref as it is as the person's (the run's start, or after a wait:
        the person's time); otherwise the protected refs keep the values the loop holds and only new refs join."""
        self._read: dict[str, Ref] | None = None
        """The refs as the last check found and left them (it put nothing back): the next refresh starts from
        them instead of reading them again, unless :meth:`read_again` was called in between."""
        self._known: tuple[object, dict[str, Ref]] | None = None
        """The refs git listed last and the stat key of everything that answer came from
        (:mod:`ralph.loop.refkey`), taken before git read them: while the key is the same, so is the answer."""
        self._tips: set[str] = set()
        """The tips of the refs git listed last (the objects the next key covers)."""
        self._keyed = True
        """False once the refs were too many to key (:class:`ralph.loop.refkey.TooMany`): for the rest of the run."""
        self.others: list[OtherWorktree] = []
        """The person's other worktrees when the run started, whose own refs (HEAD, ``refs/bisect/`` ...) are
        read from their files (:mod:`ralph.loop.worktreerefs`) and protected like the others."""

    # -- taking the copy --------------------------------------------------------------------------

    def start(self, run_dir: Path) -> None:
        """Note the run's branch, copy the objects and refs into the mirror, list the protected refs in ``refs.json``."""
        from ralph.gitutil import common_dir, git_dir
        from ralph.loop import worktreerefs
        from ralph.loop.objectcopy import ObjectCopy

        self.run_dir = run_dir
        self.branch = head_ref(self.project_dir)
        self._loops, self._persons = self._checked_out_elsewhere()  # decided once: the agent can add worktrees
        if not (self.mirror / "HEAD").is_file():
            self.mirror.mkdir(parents=True, exist_ok=True)
            git(self.mirror, "init", "-q", "--bare", ".")
        # its objects are copied as files, without refs for the run's branch: restores ask for them by id
        git(self.mirror, "config", "uploadpack.allowAnySHA1InWant", "true")
        self._common = common_dir(self.project_dir)  # kept: a stop may need them when git can no longer run
        self._git_dir = git_dir(self.project_dir)
        self.others = worktreerefs.find(self._common, self._git_dir, self._common / RALPH_WORKTREES)
        source = self._common / "objects"
        self._alternates(source)
        self.objects = ObjectCopy(source, self.mirror / "objects")
        self.refresh()

    def refresh(self) -> None:
        """Before an iteration: the protected refs as they are now (the loop's own new refs join them), and
        the objects written since the last refresh copied into the mirror (files: no git process).

        Right after a check that put nothing back, "now" is what that check read (one git call less per
        iteration); a ref moved since is then found by the next check like any move during the iteration.

        A protected ref keeps the value the loop holds for it, whatever it is now: only the run's start and
        a wait (:meth:`read_again`, the person's time) take the refs as they are.  Code the loop runs between
        checks (the final check's gates run the project's tests, the agent's code) cannot get a move adopted:
        the next check puts it back."""
        refs, self._read = (self._read if self._read is not None else self._refs_now()), None
        loops, persons = self._loops, self._persons
        now = {
            name: ref for name, ref in refs.items()
            if name != self.branch and name not in loops and not name.startswith(UNPROTECTED)
        }
        if self._adopt:
            self.protected, self._adopt = now, False
        else:  # new refs join (the loop's own: a hard stop's wip/ branch); the others keep their values
            self.protected = {**{name: ref for name, ref in now.items() if name not in self.protected}, **self.protected}
        # a detached HEAD of the person's other worktree may move forward too (they commit there)
        heads = {f"{worktree.prefix}HEAD" for worktree in self.others}
        self.forward_only = (persons | {name for name in heads if name in self.protected
                                        and not self.protected[name].symref}) & set(self.protected)
        self._copy_objects()
        if self.protected != self._synced:
            self._name_in_mirror({f"{MIRRORED}{name.removeprefix('refs/')}": ref.sha
                                  for name, ref in self.protected.items() if ref.sha and not ref.symref})
            self._synced = dict(self.protected)
            self._write_record()

    def _refs_now(self) -> dict[str, Ref]:
        """Every ref as git lists it now: the last listing when nothing it came from changed since (same stat
        key, :mod:`ralph.loop.refkey`), else ``for-each-ref`` (after the ``.git`` checks, as every git call)."""
        from ralph.loop.refkey import NoKey, TooMany, ref_key
        from ralph.loop.worktreerefs import key_roots

        key: object = None
        if self._keyed:
            try:
                key = ref_key(self.project_dir, self._tips, key_roots(self.others))
            except TooMany:
                self._keyed = False  # thousands of loose refs: git lists them every time, no walk first
            except NoKey:
                pass
        if key is not None and self._known is not None and self._known[0] == key:
            return dict(self._known[1])
        refs = self._list()
        tips = {ref.sha for ref in refs.values()}
        # the key covers the objects of the tips it was taken for: a listing with other tips is keyed next time
        self._known = (key, dict(refs)) if key is not None and tips == self._tips else None
        self._tips = tips
        return refs

    def _list(self) -> dict[str, Ref]:
        """Every protected kind of ref now: git's listing from the run's worktree, and the refs of the person's
        other worktrees from their files (no git process when there are none; else one that looks for their
        tips' objects: one deleted by hand counts as gone, as in :func:`read_refs`)."""
        refs = read_refs(self.project_dir)
        if not self.others or self._common is None:
            return refs
        from ralph.loop.worktreerefs import read

        theirs = read(self.others, self._common)
        missing = _missing(self.project_dir, {ref.sha for ref in theirs.values() if not ref.symref})
        refs.update({name: Ref("") if ref.sha in missing else ref for name, ref in theirs.items()})
        return refs

    def read_again(self) -> None:
        """After a wait (the person's time, no agent session ran): the next :meth:`refresh` reads the refs itself
        and takes them as they are as the person's.  After code the loop ran (a final check) call :meth:`check`
        instead: it puts back what that code moved."""
        self._read = None
        self._adopt = True

    def put_back_on_stop(self, record: IterationRecord) -> str | None:
        """The run stops because the ``.git`` checks found a metadata change: what became of the protected refs,
        for the stop's message (None: none moved).

        They are put back while a new check finds the metadata as at the run's start again (the stop undid the
        change: :func:`ralph.gitutil.after_stop`).  When it did not, git is not run: the refs' files are read
        instead (loose refs, ``packed-refs``) and the moved ones named, with where their values are kept."""
        from ralph.gitutil import GitMetadataChanged, after_stop

        if self.run_dir is None or not self.protected:
            return None
        self._read = self._known = None
        try:
            with after_stop():
                refs = self._list()
                moved = self._moved(refs)
                return self._restore_refs(record, moved).message if moved else None
        except GitMetadataChanged:  # (a UsageError too) the metadata is not as at the start: no git, below
            pass
        except UsageError as exc:  # the put-back failed: the message names the refs and where their values are
            return str(exc)
        keep = f"the values they must have are in {self.run_dir}/refs.json, their objects in {self.mirror}"
        names = self._moved_without_git()
        if names is None:
            return (f"The loop could not check the refs that are the person's (git cannot run safely on this "
                    f"repository now, and its refs are not plain files): {keep}; compare once .git is fixed.")
        if not names:
            return None
        what = "; ".join(f"{_short(name)} moved" for name in names[:5]) + (" ..." if len(names) > 5 else "")
        return (f"The iteration also changed refs that are the person's ({what}); git cannot run safely on this "
                f"repository now, so the loop did not put them back: {keep} (once .git is fixed: "
                f"`git fetch {self.mirror} +{MIRRORED}heads/BRANCH:refs/heads/BRANCH`).")

    def _moved_without_git(self) -> list[str] | None:
        """The protected refs whose files (a loose ref, else its ``packed-refs`` line) no longer hold the value
        the loop keeps, or cannot be read without following a link; None when the refs cannot be compared (a
        reftable, a ``packed-refs`` that is not a plain file)."""
        common, own = self._common, self._git_dir
        if common is None or own is None or (common / "reftable").exists():
            return None
        packed_text = _read_small(common / "packed-refs", common)
        if packed_text is None:
            return None
        packed: dict[str, str] = {}
        for line in packed_text.splitlines():
            fields = line.split(" ", 1)
            if len(fields) == 2 and not line.startswith(("#", "^")):
                packed[fields[1].strip()] = fields[0]
        from ralph.loop.worktreerefs import owner

        moved = []
        for name, want in self.protected.items():
            theirs = owner(name, self.others)
            base = own if name.startswith(PER_WORKTREE) else common
            path = base / name if theirs is None else theirs.git_dir / name.removeprefix(theirs.prefix)
            loose = _read_small(path, base if theirs is None else common)
            if loose is None:  # a link or an odd file where the ref was: its value cannot be read, so it is named
                moved.append(name)
                continue
            loose = loose.strip()
            if loose.startswith("ref: "):
                now = Ref("", loose.removeprefix("ref: "))
            elif loose:
                now = Ref(loose)
            else:
                now = Ref(packed[name]) if name in packed else Ref("")
            if now.symref != want.symref or (not want.symref and now.sha != want.sha):
                moved.append(name)
        return moved

    def _head(self) -> str | None:
        """The branch HEAD is on, read from ``HEAD`` itself as git reads it (no process); git asked when the
        file is anything but a regular file with a ref or an id (git's own check then names the problem)."""
        from ralph.gitutil import git_dir

        if self._git_dir is None:
            self._git_dir = git_dir(self.project_dir)
        try:
            fd = os.open(self._git_dir / "HEAD", os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            return head_ref(self.project_dir)
        with os.fdopen(fd, "rb") as handle:
            text = handle.read(4096).decode(errors="replace").strip()
        if text.startswith("ref: refs/"):
            return text.removeprefix("ref: ")
        if len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text):
            return None
        return head_ref(self.project_dir)

    def _copy_objects(self) -> None:
        assert self.objects is not None, "start() first"
        self.objects.update()

    def _name_in_mirror(self, refs: dict[str, str]) -> None:
        """Point ``refs`` of the mirror at their objects (so they stay reachable there, and a person finds them)."""
        if not refs:
            return
        lines = "".join(f"update {name} {sha}\n" for name, sha in refs.items())
        result = git(self.mirror, "update-ref", "--stdin", input=lines, check=False)
        if result.returncode != 0:
            raise UsageError(
                f"could not record the repository's refs in {self.mirror} (the copy that keeps your branches safe "
                f"during the run): {(result.stderr or result.stdout).strip()}"
            )

    def _alternates(self, source: Path) -> None:
        """The project's ``objects/info/alternates`` for the mirror too (objects the project borrows are not copied)."""
        try:
            fd = os.open(source / "info" / "alternates", os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return
        with os.fdopen(fd, "rb") as handle:
            data = handle.read()
        listed = [line for line in data.decode(errors="replace").splitlines() if line.strip() and not line.startswith("#")]
        absolute = [line if os.path.isabs(line) else str((source / line).resolve()) for line in listed]
        (self.mirror / "objects" / "info").mkdir(parents=True, exist_ok=True)
        (self.mirror / "objects" / "info" / "alternates").write_text("".join(f"{line}\n" for line in absolute))

    def _write_record(self) -> None:
        if self.run_dir is None:
            return
        from ralph.fsutil import atomic_write_text

        record = {
            "run_branch": self.branch,
            "mirror": str(self.mirror),
            "protected": {name: ref.symref or ref.sha for name, ref in sorted(self.protected.items())},
            "worktrees": {worktree.prefix: worktree.path for worktree in self.others},
            "restore": f"git fetch {self.mirror} +{MIRRORED}heads/BRANCH:refs/heads/BRANCH (or the id: SHA:refs/heads/BRANCH)",
        }
        atomic_write_text(self.run_dir / "refs.json", json.dumps(record, indent=2) + "\n")

    def _checked_out_elsewhere(self) -> tuple[set[str], set[str]]:
        """Branches checked out in the repository's other worktrees: (ralph's own worktrees', the person's)."""
        from ralph.gitutil import common_dir

        out = git(self.project_dir, "worktree", "list", "--porcelain", check=False).stdout
        here = self.project_dir.resolve()
        ralphs = (common_dir(self.project_dir) / RALPH_WORKTREES).resolve()
        loops: set[str] = set()
        persons: set[str] = set()
        path = Path()
        for line in out.splitlines():
            if line.startswith("worktree "):
                path = Path(line.removeprefix("worktree ")).resolve()
            elif line.startswith("branch ") and path != here:
                (loops if ralphs in path.parents else persons).add(line.removeprefix("branch "))
        return loops, persons

    # -- the check ----------------------------------------------------------------------------------

    def check(
        self, record: IterationRecord, checkpoint: str | None, untracked_before: set[str] | None = None, *,
        after_agent: bool = True,
    ) -> list[Violation]:
        """Put back what the agent moved; one violation per kind of move.

        ``checkpoint`` is the run branch's commit before the iteration: after the agent's session
        (``after_agent``) the branch must still contain it.  After the gates only the person's refs
        and HEAD are checked (the loop itself may have reset the branch).  ``untracked_before``: the
        untracked files before the iteration (others are removed when HEAD is moved back).
        """
        violations = []
        self._read = None
        refs = self._refs_now()
        moved = self._moved(refs)
        adopted = []
        for name in [n for n in moved if n in self.forward_only]:
            now = moved[name]
            if now is not None and not now.symref and self._contains(now.sha, self.protected[name].sha):
                self.protected[name] = now  # the person's commit in their other worktree: it stays
                del moved[name]
                adopted.append(name)
        if adopted:  # the person's new commits: into the mirror too
            self._copy_objects()
            self._name_in_mirror({f"{MIRRORED}{name.removeprefix('refs/')}": self.protected[name].sha for name in adopted})
        branch_fix = self._branch_fix(refs, checkpoint, after_agent)
        if moved:
            violations.append(self._restore_refs(record, moved))
        if branch_fix is not None:
            violations.append(self._fix_branch(record, refs, checkpoint, branch_fix))
        head_violation = self._fix_head(record, checkpoint, untracked_before)
        if head_violation is not None:
            violations.append(head_violation)
        admin = self._admin_put_back(record)  # after the refs: a stop here leaves them put back
        if admin is not None:
            violations.append(admin)
        if not violations:
            self._read = refs  # as found, and nothing was put back (an adopted forward move is in ``refs`` too)
        return violations

    def _admin_put_back(self, record: IterationRecord) -> Violation | None:
        """Put back the files that say where the person's other worktrees are (``commondir``, ``gitdir``,
        ``config.worktree``, the folder's ``.git`` file) when the iteration changed them; stop the run when a
        worktree's git directory is another one than at the start (removed, or made again under its id)."""
        if not self.others or self._common is None:
            return None
        from ralph.loop import worktreerefs

        changed: list[str] = []
        for worktree in self.others:
            paths = worktreerefs.admin_changes(worktree, self._common)
            if paths == [str(worktree.git_dir)]:
                if not os.path.lexists(worktree.git_dir):
                    continue  # removed: its refs are gone too, and the put-back of them stops the run naming it
                # removed and made again under its id (another index, reflog, gitdir): not the person's any more
                raise UsageError(self._not_put_back([name for name in self.protected if name.startswith(worktree.prefix)]))
            failed = [path for path in paths if not worktreerefs.put_back_admin(worktree, self._common, path)]
            if failed:
                raise UsageError(f"the iteration changed {', '.join(failed)} (where the person's worktree "
                                 f"{worktree.path} is and what it reads) and the loop could not put it back")
            if str(worktree.git_dir / "gitdir") in paths:
                # another folder: the worktree made again elsewhere under its id (its index and reflog are not the
                # person's), or made to look like ralph's own for the next run; put back, and the run stops
                raise UsageError(
                    f"the person's worktree {worktree.path} was removed or made again elsewhere under its id "
                    f"({worktree.git_dir / 'gitdir'} named another folder; the loop put it back): its index and "
                    f"reflog may not be the person's any more; the values its refs had are in "
                    f"{self.run_dir}/refs.json, their objects in {self.mirror}")
            changed += paths
        if not changed:
            return None
        self.emit("worktree_files_restored", iteration=record.number, paths=changed)
        self._known = None  # where a worktree's refs are read from may have changed: list them again
        return Violation(
            CHECK,
            f"The iteration changed where the person's other worktrees are or what they read "
            f"({', '.join(changed[:5])}{' ...' if len(changed) > 5 else ''}); the loop put the files back. Work "
            "only in the run's worktree: never edit, move or remove another worktree's git files.",
        )

    def _moved(self, refs: dict[str, Ref]) -> dict[str, Ref | None]:
        """The protected refs ``refs`` has at another value: the value it has, None for one gone (or whose tip
        object is gone)."""
        return {
            name: now if now is not None and (now.sha or now.symref) else None
            for name, ref in self.protected.items() if (now := refs.get(name)) != ref
        }

    def _branch_fix(self, refs: dict[str, Ref], checkpoint: str | None, after_agent: bool) -> str | None:
        """``deleted`` / ``rewritten`` when the run's branch lost the checkpoint, else None."""
        if self.branch is None or not checkpoint:
            return None
        now = refs.get(self.branch)
        if now is None or now.symref or not now.sha:  # gone, made a link to another ref, or its objects deleted
            return "deleted"
        if after_agent and now.sha != checkpoint and not self._contains(now.sha, checkpoint):
            return "rewritten"
        return None

    def _contains(self, tip: str, commit: str) -> bool:
        return git(self.project_dir, "merge-base", "--is-ancestor", commit, tip, check=False).returncode == 0

    def _fetch_back(self, shas: list[str]) -> set[str]:
        """Fetch the objects of ``shas`` (and all they reach) back from the mirror; the ids now in the project."""
        wanted = sorted(set(shas))
        specs = [f"+{sha}:{RESTORE}{index}" for index, sha in enumerate(wanted)]
        result = git(self.project_dir, "fetch", "-q", "--no-write-fetch-head", "--no-auto-gc", str(self.mirror), *specs,
                     check=False)
        if result.returncode != 0:
            raise UsageError(
                f"could not restore {', '.join(s[:10] for s in wanted)} from {self.mirror}: "
                f"{(result.stderr or result.stdout).strip()} (the values the refs must have are in {self.run_dir}/refs.json)"
            )
        fetched = set()
        for index, sha in enumerate(wanted):
            got = git(self.project_dir, "rev-parse", "--verify", "-q", f"{RESTORE}{index}", check=False).stdout.strip()
            git(self.project_dir, "update-ref", "-d", f"{RESTORE}{index}", check=False)
            if got == sha:
                fetched.add(sha)
        return fetched

    def _keep(self, record: IterationRecord, moved: dict[str, Ref | None]) -> dict[str, str]:
        """Keep where the agent moved refs to in the mirror (``refs/ralph-kept/iteration-N/...``)."""
        kept = {name: ref.sha for name, ref in moved.items() if ref is not None and not ref.symref}
        if not kept:
            return {}
        prefix = f"{KEPT}iteration-{record.number:03d}/"
        self._copy_objects()
        names = {name: f"{prefix}{name.removeprefix('refs/')}" for name in kept}
        try:
            self._name_in_mirror({names[name]: sha for name, sha in kept.items()})
        except UsageError:
            return {}  # the agent's objects are not all there: the restore goes on without keeping them
        return names

    def _restore_refs(self, record: IterationRecord, moved: dict[str, Ref | None]) -> Violation:
        """Put every moved or deleted protected ref back; the event and the violation say which."""
        kept = self._keep(record, moved)
        plain = [self.protected[name].sha for name in moved if not self.protected[name].symref]
        fetched = self._fetch_back(plain) if plain else set()
        failed = [name for name in moved if not self._put_back(name, fetched)]
        shown = [
            {"ref": name, "was": self.protected[name].symref or self.protected[name].sha,
             "moved_to": (ref.symref or ref.sha) if ref is not None else None, "kept_as": kept.get(name)}
            for name, ref in moved.items()
        ]
        self.emit("refs_restored", iteration=record.number, refs=shown, mirror=str(self.mirror), failed=failed)
        if failed:
            raise UsageError(self._not_put_back(failed))
        what = "; ".join(
            f"{_short(name)} {'deleted' if ref is None else 'moved'}" for name, ref in list(moved.items())[:5]
        ) + (" ..." if len(moved) > 5 else "")
        return Violation(
            CHECK,
            f"The iteration changed refs that are the person's, not the run's ({what}); the loop put them back "
            f"as they were (where they had been moved to is kept outside the project). Work only on the run's "
            f"branch{'' if self.branch is None else ' ' + _short(self.branch)}: never check out, reset, delete or "
            "rewrite another branch or tag.",
        )

    def _put_back(self, name: str, fetched: set[str]) -> bool:
        """Give the moved protected ref ``name`` its value back (``fetched``: the ids the project has again)."""
        from ralph.loop import worktreerefs

        want = self.protected[name]
        theirs = worktreerefs.owner(name, self.others)
        if theirs is not None and (self._common is None or not worktreerefs.present(theirs, self._common)):
            return False  # its worktree was removed: git would make a broken one to write the ref into
        if want.symref and theirs is not None and self._common is not None:
            try:  # git writes no symbolic value under another worktree's name (worktrees/<id>/HEAD)
                worktreerefs.write_symref(theirs, name, want.symref, self._common)
            except OSError:
                return False
            return True
        if want.symref:
            result = git(self.project_dir, "symbolic-ref", name, want.symref, check=False)
        elif want.sha in fetched:  # --no-deref: a ref the agent made a link moves itself, not the target
            result = git(self.project_dir, "update-ref", "--no-deref", name, want.sha, check=False)
        else:
            return False
        return result.returncode == 0

    def _not_put_back(self, failed: list[str]) -> str:
        """What the stop says about the protected refs ``failed`` it could not put back."""
        from ralph.loop import worktreerefs

        keep = f"the values they must have are in {self.run_dir}/refs.json, their objects in {self.mirror}"
        gone: dict[OtherWorktree, list[str]] = {}
        for name in failed:
            theirs = worktreerefs.owner(name, self.others)
            if theirs is not None and self._common is not None and not worktreerefs.present(theirs, self._common):
                gone.setdefault(theirs, []).append(name)
        rest = [name for name in failed if not any(name in names for names in gone.values())]
        parts = []
        if rest:
            parts.append(f"the agent moved {', '.join(rest)} and the loop could not put them back; {keep}")
        for worktree, names in gone.items():
            values = ", ".join(
                f"{name.removeprefix(worktree.prefix)} was {self.protected[name].symref or self.protected[name].sha}"
                for name in names)
            head = self.protected.get(f"{worktree.prefix}HEAD")
            folder = shlex.quote(worktree.path) if worktree.path else "<folder>"
            again = f"`git worktree add {folder} {_short(head.symref or head.sha)}`" if head else "`git worktree add`"
            parts.append(
                f"the person's worktree {worktree.path or worktree.git_dir} was removed (its git directory "
                f"{worktree.git_dir} is gone), so the loop could not put its refs back ({values}); {keep}. "
                f"{again} makes it again (move away what is left in its folder first); its uncommitted work "
                "is not in the loop's copy")
        return "; ".join(parts)

    def _fix_branch(self, record: IterationRecord, refs: dict[str, Ref], checkpoint: str | None, how: str) -> Violation:
        """Put the run's branch back (deleted), or the agent's tree on top of the checkpoint (rewritten)."""
        assert self.branch is not None and checkpoint
        now = refs.get(self.branch)
        self._bring_back(checkpoint)
        if how == "deleted" or now is None:
            git(self.project_dir, "update-ref", "--no-deref", self.branch, checkpoint)
            message = "deleted the run's branch; the loop put it back at the iteration's starting commit"
            new = checkpoint
        else:
            tree = f"{now.sha}^{{tree}}"
            new = git(
                self.project_dir, "commit-tree", tree, "-p", checkpoint, "-m",
                f"ralph: iteration {record.number} rewrote the run's history; its tree, on top of {checkpoint[:10]}",
            ).stdout.strip()
            git(self.project_dir, "update-ref", "--no-deref", self.branch, new)
            message = (
                "rewrote the run's branch (its history no longer contained the iteration's starting commit); the "
                "loop committed the work tree it left on top of that commit instead"
            )
        self.emit("head_restored", iteration=record.number, branch=self.branch, how=how, was=now.sha if now else None,
                  now=new, saved=None)
        return Violation(HEAD_CHECK, f"The iteration {message}. History the loop accepted is never rewritten.")

    def _bring_back(self, checkpoint: str) -> None:
        """Make sure ``checkpoint``'s objects are in the project (the mirror has them: it was the branch's tip)."""
        if git(self.project_dir, "cat-file", "-e", f"{checkpoint}^{{commit}}", check=False).returncode != 0:
            self._fetch_back([checkpoint])

    def _fix_head(self, record: IterationRecord, checkpoint: str | None, untracked_before: set[str] | None) -> Violation | None:
        """HEAD back on the run's branch (or detached, as the run started) and the tree as that commit has it
        (files that were untracked before the iteration stay); the agent's tree saved first."""
        current = self._head()
        if current == self.branch:
            return None
        if self.branch is None and current is None:
            return None
        target = self.branch or checkpoint
        if target is None:
            return None
        where = _short(current) if current else "a detached HEAD"
        saved = self._save_tree(record, target, where)
        head_commit = git(self.project_dir, "rev-parse", "--verify", "-q", "HEAD", check=False).stdout.strip()
        if head_commit:  # an index without stat data: the reset below compares every file by content
            git(self.project_dir, "read-tree", head_commit, check=False)
        if self.branch is not None:
            git(self.project_dir, "symbolic-ref", "HEAD", self.branch)
        else:
            git(self.project_dir, "update-ref", "--no-deref", "HEAD", target)
        if untracked_before is None:
            git(self.project_dir, "reset", "-q", "--hard", "HEAD")
        else:
            from ralph.gitutil import rollback

            rollback(self.project_dir, "HEAD", untracked_before)
        self.emit("head_restored", iteration=record.number, branch=self.branch, how="moved", was=current or head_commit,
                  now=git(self.project_dir, "rev-parse", "HEAD", check=False).stdout.strip(), saved=saved)
        run = _short(self.branch) if self.branch else "the detached HEAD the run started on"
        return Violation(
            HEAD_CHECK,
            f"The iteration left HEAD on {where}; the loop moved it back to {run} and reset the work tree to it "
            f"(a copy of the tree it left is saved outside the project). Stay on {run}: never check out another branch.",
        )

    def _save_tree(self, record: IterationRecord, base: str, where: str) -> str | None:
        """A copy of the work tree (against ``base``) in the run directory before HEAD is moved back."""
        from ralph.gitutil import work_patch
        from ralph.loop.savedwork import record_saved_work

        if self.run_dir is None:
            return None
        try:
            patch = work_patch(self.project_dir, base)
        except Exception:  # noqa: BLE001 - a copy that cannot be made must not keep HEAD where the agent put it
            return None
        if not patch:
            return None
        what = f"the work tree iteration {record.number} left on {where}"
        where_saved = record_saved_work(self.run_dir, "head-moved", patch, what)
        self.emit("work_saved", iteration=record.number, what=what, where=where_saved)
        return where_saved


PER_WORKTREE = ("refs/bisect/", "refs/worktree/", "refs/rewritten/")
"""Refs git keeps in a worktree's own git directory, not the common one."""


def _read_small(path: Path, root: Path) -> str | None:
    """A ref file's text below ``root``: '' when it is missing, None when it is there but cannot be read as a
    regular file reached without a link (:func:`ralph.safeio.read_bytes`): its value is then unknown."""
    from ralph import safeio

    try:
        return safeio.read_bytes(path, root).decode(errors="replace")
    except FileNotFoundError:
        return ""
    except OSError:  # safeio.UnsafePath is one too
        return None


def mirror_path(project_dir: Path, state_dir: str | None) -> Path:
    """The project's ref mirror in its state directory (outside the project)."""
    from ralph.loop.rundir import project_state_dir

    return project_state_dir(project_dir, state_dir) / MIRROR_NAME


def _short(ref: str) -> str:
    for prefix in ("refs/heads/", "refs/tags/"):
        if ref.startswith(prefix):
            return ref.removeprefix(prefix)
    return ref
