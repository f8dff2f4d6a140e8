"""The files a git subcommand writes because of its options and operands, read the way git's parse-options does.

One table per subcommand (:data:`TABLES`): the short letters that take a value, every long option that takes
one, and which of them name a file or directory git writes.  :func:`parse` reads a command line with it the
way parse-options does -- a short option glued to its value (``-oFILE``, ``-qoFILE``), ``--opt=VALUE`` and
``--opt VALUE``, any unambiguous prefix of a long option (``--pre=`` is ``--prefix=``, through
:func:`~ralph.shell.progutil.long_option`) -- and :func:`record` turns what names a written path into writes.

Built by construction: a long option that is, or may abbreviate, a writing option of the subcommand counts
as that option; a subcommand that writes files where the guard does not model it (:data:`UNMODELLED`) counts
as a write it cannot place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ralph.shell.progutil import long_option


@dataclass(frozen=True)
class Table:
    """How one git subcommand's options are read."""

    shorts: str = ""
    """Short letters that take a value (glued or the next word)."""
    values: frozenset[str] = frozenset()
    """Long options that take a value (``--x=V`` or ``--x V``)."""
    longs: frozenset[str] = frozenset()
    """Long options without a value (with :attr:`values`, every long option the guard knows of it)."""
    writes: dict[str, bool] = field(default_factory=dict)
    """Options (short ``-o`` or long) whose value is a path git writes: True when it writes files under it."""
    complete: bool = False
    """:attr:`values` and :attr:`longs` hold *every* long option: an abbreviation is read against them all;
    otherwise any prefix of a writing option counts as that option."""
    attached: str = ""
    """Short letters whose value is optional: only glued (``-U5``, ``-M50%``)."""


_DIFF_VALUES = frozenset({"--output", "--output-indicator-new", "--output-indicator-old", "--output-indicator-context",
                          "--src-prefix", "--dst-prefix", "--line-prefix", "--word-diff-regex",
                          "--inter-hunk-context", "--diff-algorithm", "--anchored", "--find-object",
                          "--ignore-matching-lines", "--ws-error-highlight", "--skip-to", "--rotate-to", "--format",
                          "--since", "--until", "--after", "--before", "--author", "--committer", "--grep",
                          "--encoding", "--max-count", "--skip", "--date", "--decorate-refs",
                          "--decorate-refs-exclude"})
"""Long options of the diff and log family that take a value (``--relative[=DIR]``, ``--pretty[=FMT]`` ... take
one only after ``=``)."""
_DIFF_SHORTS = "SGn"  # -S/-G strings, -n count (log)
_DIFF_ATTACHED = "OUlXMCB"  # -O<orderfile>, -U<n>, -l<n>, -X<dirstat>, -M/-C/-B<n>
_DIFF = Table(_DIFF_SHORTS, _DIFF_VALUES, writes={"--output": False}, attached=_DIFF_ATTACHED)

TABLES: dict[str, Table] = {
    "archive": Table("o", frozenset({"--output", "--prefix", "--format", "--remote", "--exec", "--add-file",
                                     "--add-virtual-file", "--mtime"}),
                     frozenset({"--list", "--verbose", "--worktree-attributes"}), {"-o": False, "--output": False},
                     complete=True),
    "format-patch": Table("ovSG", _DIFF_VALUES | {"--output-directory", "--subject-prefix", "--suffix",
                                                              "--in-reply-to", "--to", "--cc",
                                                              "--add-header", "--signature", "--signature-file",
                                                              "--base", "--interdiff", "--range-diff",
                                                              "--creation-factor", "--start-number", "--reroll-count",
                                                              "--cover-letter-format", "--description-file"},
                          writes={"-o": True, "--output-directory": True, "--output": False}, attached=_DIFF_ATTACHED),
    "checkout-index": Table("", frozenset({"--prefix", "--stage"}),
                            frozenset({"--index", "--quiet", "--force", "--all", "--no-create", "--temp",
                                       "--ignore-skip-worktree-bits", "--stdin"}),
                            {"--prefix": True}, complete=True),
    "init": Table("", frozenset({"--separate-git-dir", "--template", "--object-format", "--ref-format",
                                     "--initial-branch"}), frozenset({"--quiet", "--bare", "--shared"}),
                  {"--separate-git-dir": True}, complete=True),
    "clone": Table("obucj", frozenset({"--separate-git-dir", "--template", "--origin", "--branch", "--upload-pack",
                                       "--config", "--depth", "--shallow-since", "--shallow-exclude", "--reference",
                                       "--reference-if-able", "--filter", "--server-option", "--jobs", "--bundle-uri",
                                       "--ref-format", "--revision"}),
                   writes={"--separate-git-dir": True}),
    "config": Table("f", frozenset({"--file", "--blob", "--type", "--default", "--comment", "--value", "--url"}),
                    frozenset({"--global", "--system", "--local", "--worktree", "--get", "--get-all",
                               "--get-regexp", "--get-urlmatch", "--replace-all", "--add", "--unset", "--unset-all",
                               "--rename-section", "--remove-section", "--list", "--fixed-value", "--edit",
                               "--bool", "--int", "--bool-or-int", "--bool-or-str", "--path", "--expiry-date",
                               "--no-type", "--null", "--name-only", "--includes", "--no-includes", "--show-origin",
                               "--show-scope", "--all", "--regexp", "--get-color", "--get-colorbool", "--no-value"}),
                    complete=True),  # its file is written only by a setting (git.config_call says which)
    "fast-export": Table("", frozenset({"--export-marks", "--import-marks", "--import-marks-if-exists",
                                        "--signed-tags", "--signed-commits", "--tag-of-filtered-object",
                                        "--refspec", "--anonymize-map", "--progress"}),
                         writes={"--export-marks": False}),
    "bugreport": Table("os", frozenset({"--output-directory", "--suffix"}),
                       frozenset({"--no-suffix", "--no-diagnose", "--diagnose"}),
                       {"-o": True, "--output-directory": True}),
    "diagnose": Table("os", frozenset({"--output-directory", "--suffix", "--mode"}), frozenset(),
                      {"-o": True, "--output-directory": True}, complete=True),
    "read-tree": Table("", frozenset({"--index-output", "--prefix", "--exclude-per-directory"}),
                       writes={"--index-output": False}),
    "index-pack": Table("o", frozenset({"--keep", "--index-version", "--threads", "--max-input-size",
                                        "--object-format", "--promisor", "--progress-title"}),
                        writes={"-o": False}),
    "mailsplit": Table("o", writes={"-o": True}),
    "worktree": Table("bB", frozenset({"--reason", "--orphan"})),
    "bundle": Table(),
    "pack-objects": Table("", frozenset({"--window", "--depth", "--window-memory", "--max-pack-size", "--threads",
                                         "--index-version", "--compression", "--filter", "--missing", "--keep-pack",
                                         "--unpack-unreachable", "--cruft-expiration", "--name-hash-version",
                                         "--path-walk"})),
    **dict.fromkeys(("diff", "log", "show", "diff-tree", "diff-index", "diff-files", "whatchanged", "range-diff",
                     "shortlog", "stash", "rev-list", "blame"), _DIFF),
}
"""The subcommands whose options (or operands) name files git writes."""

UNMODELLED = frozenset({"mailinfo", "unpack-file", "credential-store", "multi-pack-index", "commit-graph",
                        "merge-index", "merge-one-file", "p4", "svn", "subtree"})
"""Subcommands that write files at places their arguments decide, read no further: a write the guard cannot
place."""


def parse(sub: str, args: list[str]) -> tuple[list[tuple[str, str | None]], list[str]]:
    """([(option, value or None)], operands) of ``git SUB ARGS``; long options spelled out, ``--`` ends them."""
    table = TABLES.get(sub, Table())
    every = table.values | table.longs
    opts: list[tuple[str, str | None]] = []
    operands: list[str] = []
    k = 0
    while k < len(args):
        a = args[k]
        k += 1
        if a == "--":
            operands.extend(args[k:])
            break
        if a.startswith("--"):
            key, eq, inline = a.partition("=")
            name = _long(key, table, every)
            if eq:
                opts.append((name, inline))
            elif name in table.values and k < len(args):
                opts.append((name, args[k]))
                k += 1
            else:
                opts.append((name, None))
            continue
        if a.startswith("-") and len(a) > 1:
            for j in range(1, len(a)):
                letter = "-" + a[j]
                if a[j] in table.attached:
                    opts.append((letter, a[j + 1 :] or None))
                    break
                if a[j] in table.shorts:
                    if a[j + 1 :]:
                        opts.append((letter, a[j + 1 :]))
                    elif k < len(args):
                        opts.append((letter, args[k]))
                        k += 1
                    else:
                        opts.append((letter, None))
                    break
                opts.append((letter, None))
            continue
        operands.append(a)
    return opts, operands


def _long(key: str, table: Table, every: frozenset[str]) -> str:
    if table.complete:
        return long_option(key, every) or key
    if key in every:
        return key
    if len(key) > 2:  # against a partial table, any prefix of a writing option is that option
        for name in table.writes:
            if name.startswith("--") and name.startswith(key):
                return name
    return long_option(key, every) or key


def record(w: Any, call: Any, sub: str, args: list[str], word: Any) -> None:
    """Record the paths ``git SUB ARGS`` writes through its options and operands (``word(text)`` makes the word
    of a path as typed)."""
    from ralph.shell.writes import add_write

    via = f"git {sub}"
    if sub in UNMODELLED:
        add_write(w, call, f"git {sub}", anywhere=True, via=via)
        return
    table = TABLES.get(sub)
    if table is None:
        return
    opts, operands = parse(sub, args)
    names = {name for name, _ in opts}
    for name, value in opts:
        if name in table.writes and value:
            add_write(w, call, word(value), into=table.writes[name], skips_git=sub == "checkout-index",
                      via=f"{via} {name}")
    if sub == "worktree" and operands[:1] == ["add"] and len(operands) >= 2:
        add_write(w, call, word(operands[1]), into=True, skips_git=True, via="git worktree add")
    elif sub == "worktree" and operands[:1] == ["move"] and len(operands) >= 3:
        add_write(w, call, word(operands[2]), into=True, skips_git=True, via="git worktree move")
    elif sub == "bundle" and operands[:1] == ["create"] and len(operands) > 1:
        add_write(w, call, word(operands[1]), via="git bundle create")
    elif sub == "pack-objects" and operands and "--stdout" not in names:
        from ralph.shell.walker import Word

        base = word(operands[0])
        add_write(w, call, Word(base.text + "-*", base.dynamic, True, input=base.input), via="git pack-objects")
