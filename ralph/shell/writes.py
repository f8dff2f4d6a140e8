"""Files a program writes because of its arguments: copies, downloads, extractions, ``-o FILE`` outputs.

Redirections and ``tee`` are found by the walker; this module reads the command lines of the programs
that write files named in their arguments and records each as a :class:`~ralph.shell.WriteTarget`:

- ``cp``/``mv``/``install``/``ln``/``rsync``/``scp``: the destination, or with ``-t DIR``, a directory
  destination or several sources, ``DIR/NAME`` per source; a copy of a directory's *contents*
  (``cp -r src/. DIR``, ``rsync -a src/ DIR``, ``cp -rT``, a source only known at run time or a
  glob) writes any name under ``DIR`` (``into``);
- archives and patches: ``tar -x``/``unzip``/``cpio -i``/``bsdtar``/``7z x`` write the names inside
  the archive under their extraction directory (``-C``, ``-d``, ``-o``, the cwd; ``/`` with
  ``tar -P``, ``cpio`` without ``--no-absolute-filenames``, ``unzip -:``), ``patch`` the file it is
  given or the names in the diff under ``-d DIR``/the cwd;
- downloads: ``curl -o``/``--output``/``-O`` with ``--output-dir``/``-D``/``-c``/``--trace``...,
  ``wget -O``/``-P``/``-o``/``-a``;
- ``touch``/``mkdir``/``mkfifo``/``mknod``: the names they create;
- ``sort -o``, ``uniq IN OUT``, ``split``/``csplit`` prefixes, ``ed``/``ex`` files, ``logsave`` logs;
- any other program's ``-o PATH``/``--output[=]PATH``/``--output-file``/``--outfile``/``-out``/
  ``--log-file`` (compilers, ``go build -o``, ``openssl -out`` ...), when the value is a path.

It also follows what some of these run: ``tar --to-command``/``--checkpoint-action=exec=``/
``--use-compress-program``/``--info-script``, ``rsync -e``, ``scp -S``, ``sort
--compress-program``, ``split --filter``, ``install --strip-program`` (the GTFOBins ways to run
code through a file tool).
"""

from __future__ import annotations

import os
import re

from ralph.shell import WriteTarget
from ralph.shell.progutil import (SED_LONGS, Handler, Unreadable, expand_long, has_long, is_stdin_path, long_option,
                                  read_regular, run_code)
from ralph.shell.walker import Call, Walker, Word


def add_write(w: Walker, call: Call, word: Word | str, *, truncates: bool = True, into: bool = False,
              follow: bool = True, via: str | None = None, skips_git: bool = False, anywhere: bool = False) -> None:
    """Record that ``call`` writes ``word`` (a file, or with ``into`` any name under that directory)."""
    if isinstance(word, str):
        word = Word(word)
    w.budget.spend(64)
    w.result.writes.append(WriteTarget(word.text, word.dynamic, word.glob, list(call.st.cd), call.st.cd_unknown,
                                       via or call.name, truncates=truncates, input=word.input, into=into,
                                       follow=follow, skips_git=skips_git, anywhere=anywhere))


def parse_options(words: list[Word], start: int, shorts: str, longs: frozenset[str], optional: frozenset[str] = frozenset(),
                  flags_with_values: str = "") -> tuple[list[tuple[str, Word | None]], list[Word]]:
    """GNU-style options and operands from ``start``: ([(option, value or None)], operands).

    ``shorts``: short letters that take a value (attached or the next word); ``longs``: long options that
    take one (``--x=V`` or ``--x V``); ``optional``: long options whose value may only be attached
    (``--backup[=CONTROL]``).  Options may come after operands (GNU permutes); ``--`` ends them."""
    opts: list[tuple[str, Word | None]] = []
    operands: list[Word] = []
    known = longs | optional
    i = start
    while i < len(words):
        word = words[i]
        t = word.text
        i += 1
        if word.dynamic or not t.startswith("-") or t == "-":
            operands.append(word)
            continue
        if t == "--":
            operands.extend(words[i:])
            break
        if t.startswith("--"):
            key, eq, val = t.partition("=")
            key = expand_long(key, known)
            if eq:
                opts.append((key, Word(val)))
            elif key in longs and i < len(words):
                opts.append((key, words[i]))
                i += 1
            else:
                opts.append((key, None))
            continue
        for j in range(1, len(t)):
            letter = "-" + t[j]
            if t[j] in shorts:
                rest = t[j + 1 :]
                if rest:
                    opts.append((letter, Word(rest)))
                elif i < len(words):
                    opts.append((letter, words[i]))
                    i += 1
                else:
                    opts.append((letter, None))
                break
            opts.append((letter, None))
    return opts, operands


def _values(opts: list[tuple[str, Word | None]], *names: str) -> list[Word]:
    return [v for k, v in opts if k in names and v is not None]


def _has(opts: list[tuple[str, Word | None]], *names: str) -> bool:
    return any(k in names for k, _ in opts)


def _join(base: Word, name: str) -> Word:
    text = base.text.rstrip("/") + "/" + name if base.text not in ("", "/") else "/" + name
    return Word(text, base.dynamic, base.glob, input=base.input)


def _contents(source: Word) -> bool:
    """Does copying ``source`` recursively copy what is *in* it (``src/.``, ``rsync src/``), names unknown?"""
    t = source.text
    return source.dynamic or source.glob or t in (".", "..") or t.endswith(("/.", "/..")) or t.endswith("/*")


# -- cp, mv, install, ln -------------------------------------------------------------------------------------

_COPY_SHORTS = {"cp": "tS", "mv": "tS", "ln": "tS", "install": "tSmog", "link": ""}
_COPY_LONGS = frozenset({"--target-directory", "--suffix", "--mode", "--owner", "--group", "--strip-program",
                         "--sparse", "--no-preserve", "--reflink", "--preserve", "--backup", "--context",
                         "--update", "--no-target-directory", "--recursive", "--archive", "--parents",
                         "--symbolic", "--force", "--directory", "--relative", "--link", "--dereference"})
_COPY_VALUES = frozenset({"--target-directory", "--suffix", "--mode", "--owner", "--group", "--strip-program",
                          "--sparse", "--no-preserve"})


def _copy(w: Walker, call: Call) -> None:
    """``cp``/``mv``/``install``/``ln`` (and ``link``): the names they create or replace."""
    from ralph.shell.paths import is_dir
    from ralph.shell import resolve_path

    name = call.name
    opts, ops = parse_options(call.words, 1, _COPY_SHORTS.get(name, ""), _COPY_VALUES, _COPY_LONGS - _COPY_VALUES)
    for program in _values(opts, "--strip-program"):
        w.run([program], {}, call.st.copy(), call.flow, [*call.wrappers, f"{name} --strip-program"], [])
    if name == "install" and _has(opts, "-d", "--directory"):
        return  # `install -d DIR...` makes directories
    letters = {k for k, _ in opts}
    recursive = name in ("cp", "mv") and bool(letters & {"-r", "-R", "-a", "--recursive", "--archive"}) or name == "mv"
    replaces = name in ("mv", "ln", "link")  # the name is replaced, not written through a link there
    no_target = bool(letters & {"-T", "--no-target-directory"})
    parents = "--parents" in letters
    target_dirs = _values(opts, "-t", "--target-directory")
    if target_dirs:
        dest, sources, into_dir = target_dirs[-1], ops, True
    elif name == "ln" and len(ops) == 1:
        dest, sources, into_dir = Word("."), ops, True
    elif len(ops) >= 2:
        dest, sources = ops[-1], ops[:-1]
        path = None if dest.dynamic else resolve_path(dest.text, w.cwd, w.home, False, call.st.cd, call.st.cd_unknown)
        into_dir = not no_target and (len(sources) > 1 or dest.text.endswith("/") or dest.text in (".", "..")
                                      or (path is not None and (is_dir(path) or path == os.path.normpath(w.home))))
    else:
        return
    # cp/install write into the file; mv and `ln -f` replace it: either way what was there is gone
    truncates = name in ("cp", "install", "mv") or (name in ("ln", "link") and bool(letters & {"-f", "--force"}))
    for source in sources:
        if not into_dir:  # DEST itself (with -r: a directory tree there)
            add_write(w, call, dest, truncates=truncates, follow=not replaces, into=recursive)
            continue
        base = source.text.rstrip("/")
        if dest.glob:  # a directory the shell's glob picks (`cp x l?d/`): any name under what it matches
            add_write(w, call, dest, truncates=truncates, into=True)
        elif parents and not source.dynamic:
            add_write(w, call, _join(dest, base.lstrip("/")), truncates=truncates, follow=not replaces,
                      into=recursive)
        elif source.dynamic or source.glob or not base or (recursive and _contents(source)):
            add_write(w, call, dest, truncates=truncates, into=True)  # names only known when it runs
        else:
            add_write(w, call, _join(dest, os.path.basename(base)), truncates=truncates, follow=not replaces,
                      into=recursive)


# -- rsync, scp ----------------------------------------------------------------------------------------------

_RSYNC_LONGS = frozenset(
    """--rsh --rsync-path --filter --exclude --include --exclude-from --include-from --files-from --temp-dir
    --backup-dir --suffix --compare-dest --copy-dest --link-dest --log-file --log-file-format --password-file
    --chown --chmod --usermap --groupmap --timeout --contimeout --port --sockopts --out-format --bwlimit
    --max-size --min-size --partial-dir --iconv --block-size --compress-level --skip-compress --protocol
    --checksum-seed --info --debug --max-delete --modify-window --remote-option --address --outbuf
    --write-batch --only-write-batch --read-batch --stop-after --stop-at --compress-choice --checksum-choice
    --zc --cc --max-alloc""".split())


def _remote(text: str) -> bool:
    return bool(re.match(r"[A-Za-z0-9_.@-]*:", text)) and not text.startswith(("/", "./", "~"))


def _rsync(w: Walker, call: Call) -> None:
    """``rsync SRC... DEST`` (a local DEST), its log and batch files, and the ``-e`` program it runs."""
    opts, ops = parse_options(call.words, 1, "efTBM", _RSYNC_LONGS)
    for code in _values(opts, "-e", "--rsh"):
        run_code(w, call, code, "`rsync -e`")
    for f in _values(opts, "--log-file", "--write-batch", "--only-write-batch"):
        add_write(w, call, f, truncates=False)
    for d in _values(opts, "--backup-dir", "--temp-dir", "-T", "--partial-dir"):
        add_write(w, call, d, into=True)
    recursive = _has(opts, "-r", "-a", "--recursive", "--archive", "-R", "--relative")
    if len(ops) >= 2 and any(has_long([x.text], "--remove-source-files", 5) for x in call.words[1:] if not x.dynamic):
        for source in ops[:-1]:  # what was sent is removed where it was
            if not _remote(source.text):
                _removes(w, call, source, recursive)
    if len(ops) < 2 or _remote(ops[-1].text):
        return
    dest, sources = ops[-1], ops[:-1]
    into_dir = len(sources) > 1 or dest.text.endswith("/") or _is_dir(w, call, dest)
    for source in sources:
        contents = source.text.endswith("/") or _contents(source) or _has(opts, "-R", "--relative")
        if recursive and contents or source.dynamic:
            add_write(w, call, dest, into=True)
        elif into_dir or recursive:
            base = os.path.basename(source.text.rstrip("/").split(":")[-1])
            add_write(w, call, _join(dest, base) if base else dest, into=recursive or not base)
        else:
            add_write(w, call, dest)


def _scp(w: Walker, call: Call) -> None:
    """``scp`` to a local destination (a copy), and its ``-S`` program / ``-o``/``-F`` settings."""
    opts, ops = parse_options(call.words, 1, "cFiJlPSoXD", frozenset())
    if _has(opts, "-S", "-o", "-F", "-J"):
        w.opaque("`scp -S/-o/-F/-J` runs a program or reads settings that can run one",
                 "copy with cp, or leave the transfer to the user")
    if len(ops) >= 2 and not _remote(ops[-1].text):
        dest = ops[-1]
        for source in ops[:-1]:
            base = os.path.basename(source.text.rstrip("/").split(":")[-1])
            into = source.dynamic or source.glob or not base or _has(opts, "-r")
            add_write(w, call, dest if into or not _is_dir(w, call, dest) else _join(dest, base), into=into and
                      _is_dir(w, call, dest))


def _is_dir(w: Walker, call: Call, word: Word) -> bool:
    from ralph.shell import resolve_path
    from ralph.shell.paths import is_dir

    if word.dynamic:
        return True
    path = resolve_path(word.text, w.cwd, w.home, False, call.st.cd, call.st.cd_unknown)
    return path is None or is_dir(path) or path == os.path.normpath(w.home)


# -- archives, patches ----------------------------------------------------------------------------------------

_TAR_SHORTS = "fCTXIFgKLNVbHs"
_TAR_LONGS = frozenset(
    """--file --directory --files-from --exclude-from --use-compress-program --info-script --new-volume-script
    --listed-incremental --starting-file --tape-length --newer --after-date --label --blocking-factor --format
    --to-command --checkpoint-action --rsh-command --rmt-command --index-file --transform --xform --exclude
    --owner --group --mode --mtime --volno-file --record-size --suffix --backup --quoting-style --strip-components
    --sort --hole-detection --level --occurrence --warning --checkpoint""".split())


def _tar(w: Walker, call: Call) -> None:
    """``tar``/``bsdtar``: where ``-x`` extracts (``-C`` dirs, the cwd, ``/`` with ``-P``), the archive ``-c``
    writes, and the programs its options run."""
    words = list(call.words)
    if len(words) > 1 and not words[1].dynamic and words[1].text[:1] not in ("-", "") and re.fullmatch(
            r"[A-Za-z]+", words[1].text):
        # old style `tar xzf ARCHIVE`: the letters are options, their values follow in order
        letters = words[1].text
        values = [c for c in letters if c in _TAR_SHORTS]
        rest = words[2 : 2 + len(values)]
        words = [words[0], *[Word("-" + c) for c in letters if c not in _TAR_SHORTS],
                 *[x for c, v in zip(values, rest) for x in (Word("-" + c), v)], *words[2 + len(values) :]]
    opts, operands = parse_options(words, 1, _TAR_SHORTS, _TAR_LONGS)
    names = {k for k, _ in opts}
    for code in _values(opts, "--to-command"):
        run_code(w, call, code, "`tar --to-command`")
    for action in _values(opts, "--checkpoint-action"):
        kind, _, command = action.text.partition("=")
        if kind.strip() == "exec" or action.dynamic:
            run_code(w, call, Word(command, action.dynamic, input=action.input), "`tar --checkpoint-action=exec`")
    for program in _values(opts, "-I", "--use-compress-program", "--rsh-command", "--rmt-command"):
        run_code(w, call, program, "`tar --use-compress-program`")
    for script in _values(opts, "-F", "--info-script", "--new-volume-script"):
        w.result.scripts.append(script.text)
    for f in _values(opts, "-g", "--listed-incremental", "--index-file", "--volno-file"):
        add_write(w, call, f, truncates=False)
    extract = bool(names & {"-x", "--extract", "--get"})
    create = bool(names & {"-c", "--create", "-r", "--append", "-u", "--update", "-A", "--catenate",
                           "--concatenate", "--delete"})
    if create and any(has_long([x.text], "--remove-files", 5) for x in words[1:]):
        archives = {a.text for a in _values(opts, "-f", "--file")}
        for word in operands:  # `tar --remove-files -c`: what went into the archive is removed (trees too)
            if word.text not in archives:
                _removes(w, call, word, recursive=True)
    if create:
        for archive in _values(opts, "-f", "--file"):
            if archive.text != "-":
                add_write(w, call, archive, truncates="-c" in names or "--create" in names)
    if not extract or _has(opts, "-O", "--to-stdout", "-t", "--list", "--to-command"):
        return  # nothing lands on disk (a listing, stdout, a command fed each member)
    if _has(opts, "-P", "--absolute-names"):
        add_write(w, call, "/", into=True)
    dirs = _values(opts, "-C", "--directory")
    if not dirs:
        add_write(w, call, ".", into=True)
    where: Word | None = None
    for d in dirs:  # each -C is relative to the one before
        where = d if where is None or d.text.startswith(("/", "~")) or d.dynamic else _join(where, d.text)
        add_write(w, call, where, into=True)


def _unzip(w: Walker, call: Call) -> None:
    """``unzip ARCHIVE [-d DIR]``: the archive's names under DIR (or the cwd; anywhere with ``-:``)."""
    opts, _ = parse_options(call.words, 1, "dxP", frozenset())
    if _has(opts, "-l", "-t", "-v", "-z", "-p", "-c", "-Z"):
        return
    dirs = _values(opts, "-d") or [Word(".")]
    if _has(opts, "-:"):
        dirs = [Word("/")]
    for d in dirs:
        add_write(w, call, d, into=True)


def _sevenzip(w: Walker, call: Call) -> None:
    """``7z x|e ARCHIVE [-oDIR]``."""
    if len(call.words) < 2 or call.words[1].text not in ("x", "e"):
        return
    out = [Word(x.text[2:], x.dynamic) for x in call.words[2:] if x.text.startswith("-o")]
    for d in out or [Word(".")]:
        add_write(w, call, d, into=True)


def _cpio(w: Walker, call: Call) -> None:
    """``cpio -i`` (absolute names as they are unless ``--no-absolute-filenames``), ``cpio -p DIR``."""
    opts, ops = parse_options(call.words, 1, "DEFHIMORCs", frozenset({"--directory", "--file", "--pattern-file",
                                                                     "--format", "--owner", "--rsh-command"}))
    names = {k for k, _ in opts}
    for program in _values(opts, "--rsh-command"):
        run_code(w, call, program, "`cpio --rsh-command`")
    if names & {"-p", "--pass-through"}:
        for d in ops[-1:]:
            add_write(w, call, d, into=True)
    elif names & {"-i", "--extract"}:
        for d in _values(opts, "-D", "--directory") or [Word(".")]:
            add_write(w, call, d, into=True)
        if "--no-absolute-filenames" not in names:
            add_write(w, call, "/", into=True)
    for f in _values(opts, "-O", "-F", "--file") if names & {"-o", "--create"} else []:
        add_write(w, call, f)


def _patch(w: Walker, call: Call) -> None:
    """``patch [FILE [PATCHFILE]]``: FILE, ``-o OUT``, ``-r REJECTS``, or the names in the diff under
    ``-d DIR``/the cwd."""
    opts, ops = parse_options(call.words, 1, "iodpDFBYzVrg", frozenset(
        {"--input", "--output", "--directory", "--strip", "--ifdef", "--fuzz", "--prefix", "--basename-prefix",
         "--suffix", "--version-control", "--reject-file", "--get", "--quoting-style", "--reject-format"}))
    if _has(opts, "--dry-run"):
        return
    for f in _values(opts, "-o", "--output", "-r", "--reject-file"):
        if f.text != "-":
            add_write(w, call, f)
    if _values(opts, "-o", "--output"):
        return
    if ops:
        add_write(w, call, ops[0])
        return
    dirs = _values(opts, "-d", "--directory") or [Word(".")]
    names = _patch_names(w, call, _values(opts, "-i", "--input"))
    for d in dirs:
        if names is None:
            add_write(w, call, d, into=True)  # the names are in a diff the guard cannot read
            continue
        for name in names:
            add_write(w, call, _join(d, name) if d.text != "." else Word(name))


_DIFF_NAME = re.compile(r"^(?:---|\+\+\+|\*\*\*|Index:|rename from|rename to|copy from|copy to) (.+)$|^diff --git (.+)$",
                        re.MULTILINE)
MAX_DIFF = 1 << 20
"""Bytes of a diff ``patch`` reads that the guard reads too, to see which files it changes."""


def _patch_names(w: Walker, call: Call, inputs: list[Word]) -> list[str] | None:
    """Every file a diff names, at every ``-p`` level (None: the diff cannot be read here).

    The diff is the ``-i`` file, the stdin file or heredoc; a pipe, a file written earlier on this line or
    one that cannot be read is None.  GNU patch refuses absolute names and ``..``, so the names stay under
    its directory."""
    from ralph.shell import resolve_path

    text: str | None = None
    source = inputs[-1] if inputs else None
    stdin = call.flow.stdin
    if source is None and stdin is not None and stdin[0] == "text":
        text = stdin[1]
    else:
        name = source.text if source is not None and not source.dynamic else (
            stdin[1] if stdin is not None and stdin[0] == "file" else None)
        if name is None or any(x.path == name for x in w.result.writes):
            return None
        path = resolve_path(name, w.cwd, w.home, False, call.st.cd, call.st.cd_unknown)
        if path is None:
            return None
        try:
            data = read_regular(path, MAX_DIFF)
        except Unreadable as problem:  # a FIFO would block the guard; a device or a huge file is no diff to read
            w.opaque(f"`{call.name}` reads its diff from {name}, which the guard does not read ({problem})",
                     "give it a regular diff file of at most 1 MB")
            return None
        except OSError:
            return []  # patch fails the same way
        w.budget.spend(len(data))
        text = data.decode("utf-8", "replace")
    names: list[str] = []
    for m in _DIFF_NAME.finditer(text):
        found = m.group(1) if m.group(1) is not None else m.group(2)
        for name in found.split(" ") if m.group(2) is not None else [found.split("\t", 1)[0]]:
            if name.startswith('"'):
                return None  # a quoted name with escapes
            parts = [p for p in name.strip().split("/") if p and p != "."]
            names.extend("/".join(parts[k:]) for k in range(len(parts)))
            if len(names) > 4096:
                return None
    return list(dict.fromkeys(names))


# -- downloads ---------------------------------------------------------------------------------------------------

_CURL_SHORTS = "AbcCdDeEFHKmoPQrtTuUwxXyYz"
_CURL_LONGS = frozenset(
    """--output --output-dir --dump-header --cookie-jar --trace --trace-ascii --stderr --libcurl --etag-save
    --hsts --alt-svc --config --data --data-raw --data-binary --data-urlencode --header --request --user
    --user-agent --referer --cookie --form --max-time --upload-file --write-out --proxy --url --range --cert
    --key --cacert --capath --connect-timeout --retry --retry-delay --retry-max-time --resolve --connect-to
    --interface --limit-rate --max-filesize --proto --proto-redir --proxy-user --quote --speed-limit
    --speed-time --time-cond --json --variable --expand-url --create-file-mode --unix-socket
    --abstract-unix-socket --netrc-file --preproxy --noproxy --happy-eyeballs-timeout-ms --ciphers --tls-max
    --aws-sigv4 --oauth2-bearer --pinnedpubkey --local-port --dns-servers --doh-url --mail-from --mail-rcpt
    --mail-auth --login-options --sasl-authzid --service-name --socks4 --socks4a --socks5 --socks5-hostname
    --socks5-gssapi-service --telnet-option --tftp-blksize --trace-config --keepalive-time --max-redirs
    --url-query --form-string --request-target --engine --egd-file --random-file --crlfile --delegation
    --ftp-account --ftp-alternative-to-user --ftp-method --ftp-port --ftp-ssl-ccc-mode --hostpubmd5
    --hostpubsha256 --krb --parallel-max --proxy-header --proxy-cacert --proxy-capath --proxy-cert
    --proxy-key --proxy-ciphers --proxy-service-name --proxy-tlsuser --proxy-tlspassword --tlsuser
    --tlspassword --tls13-ciphers --proxy-tls13-ciphers --key-type --cert-type --pass --ech --ipfs-gateway""".split())


def _curl(w: Walker, call: Call) -> None:
    """``curl``: ``-o``/``--output`` files, ``-O`` into ``--output-dir`` (or the cwd), the files its
    other options write; a config file (``-K``) may name any of them: opaque."""
    opts, ops = parse_options(call.words, 1, _CURL_SHORTS, _CURL_LONGS)
    if _has(opts, "-K", "--config"):
        w.opaque("`curl -K/--config` reads options (output files included) from a file",
                 "give curl its options on the command line")
    outputs = _values(opts, "-o", "--output")
    dirs = _values(opts, "--output-dir")
    for f in outputs:
        if f.text != "-":
            add_write(w, call, f if f.text.startswith(("/", "~")) or not dirs else _join(dirs[-1], f.text))
    if _has(opts, "-O", "--remote-name", "--remote-name-all", "-J", "--remote-header-name"):
        where = dirs[-1] if dirs else Word(".")
        urls = [u for u in ops if not u.dynamic] if not _has(opts, "-J", "--remote-header-name") else []
        for url in urls if urls and len(urls) == len(ops) else []:
            add_write(w, call, _join(where, _url_name(url.text) or "index.html"))
        if not urls or len(urls) != len(ops):  # the name is the server's (-J) or only known at run time
            any_name = _join(where, ".*")  # one name of the server's choosing, a dotfile too
            add_write(w, call, Word(any_name.text, any_name.dynamic, True, input=any_name.input))
    for f in _values(opts, "-D", "--dump-header", "-c", "--cookie-jar", "--trace", "--trace-ascii", "--stderr",
                     "--libcurl", "--etag-save", "--hsts", "--alt-svc"):
        if f.text != "-":
            add_write(w, call, f)


def _url_name(url: str) -> str:
    """The file name curl -O / wget give a URL: its path's last part."""
    path = re.sub(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/]*", "", url).split("?", 1)[0].split("#", 1)[0]
    return path.rsplit("/", 1)[-1]


_WGET_SHORTS = "OoaPeiBtwTQUlARDIXn"
_WGET_LONGS = frozenset(
    """--output-document --output-file --append-output --directory-prefix --execute --input-file --base --tries
    --wait --timeout --quota --user-agent --level --accept --reject --domains --include-directories
    --exclude-directories --config --use-askpass --post-data --post-file --header --user --password
    --http-user --http-password --load-cookies --save-cookies --save-headers --referer --bind-address
    --limit-rate --cut-dirs --default-page --restrict-file-names --secure-protocol --ca-certificate
    --certificate --private-key --warc-file --rejected-log --hsts-file --body-data --body-file --method""".split())


def _wget(w: Walker, call: Call) -> None:
    """``wget``: ``-O`` file, names from the URL under ``-P`` (or the cwd), log and cookie files;
    ``-e``/``--config`` commands and ``--use-askpass`` programs: opaque."""
    opts, ops = parse_options(call.words, 1, _WGET_SHORTS, _WGET_LONGS)
    if _has(opts, "-e", "--execute", "--config", "--use-askpass"):
        w.opaque("`wget -e/--config/--use-askpass` runs wgetrc commands or a program (they can name any output "
                 "file)", "give wget its options on the command line")
    outputs = [f for f in _values(opts, "-O", "--output-document") if f.text != "-"]
    for f in outputs:
        add_write(w, call, f)
    if not _values(opts, "-O", "--output-document"):
        tree = _has(opts, "-r", "--recursive", "-m", "--mirror", "-x", "--force-directories", "-p",
                    "--page-requisites", "--trust-server-names", "--content-disposition", "-i", "--input-file")
        for d in _values(opts, "-P", "--directory-prefix") or [Word(".")]:
            urls = [u for u in ops if not u.dynamic]
            if tree or not urls or len(urls) != len(ops):
                add_write(w, call, d, into=True)  # a tree of names from the server, or names known when it runs
                continue
            for url in urls:
                add_write(w, call, _join(d, _url_name(url.text) or "index.html"))
    for f in _values(opts, "-o", "--output-file", "-a", "--append-output", "--save-cookies", "--warc-file",
                     "--rejected-log", "--hsts-file"):
        add_write(w, call, f, truncates=False)


# -- text tools -----------------------------------------------------------------------------------------------------

def _sort(w: Walker, call: Call) -> None:
    """``sort -o FILE``; ``--compress-program`` runs a program."""
    opts, _ = parse_options(call.words, 1, "kotSTy", frozenset({"--output", "--key", "--field-separator",
                                                                "--buffer-size", "--temporary-directory",
                                                                "--compress-program", "--parallel",
                                                                "--batch-size", "--files0-from", "--sort",
                                                                "--random-source"}))
    for program in _values(opts, "--compress-program"):
        w.run([program], {}, call.st.copy(), call.flow, [*call.wrappers, "sort --compress-program"], [])
    for f in _values(opts, "-o", "--output"):
        add_write(w, call, f)


def _uniq(w: Walker, call: Call) -> None:
    """``uniq [IN [OUT]]``: OUT is written."""
    _, ops = parse_options(call.words, 1, "fsw", frozenset({"--skip-fields", "--skip-chars", "--check-chars",
                                                            "--group", "--all-repeated"}))
    if len(ops) >= 2:
        add_write(w, call, ops[1])


def _split(w: Walker, call: Call) -> None:
    """``split [FILE [PREFIX]]``/``csplit -f PREFIX``: files named PREFIX...; ``--filter`` runs shell code."""
    opts, ops = parse_options(call.words, 1, "abClnfk" if call.name == "csplit" else "abCln",
                              frozenset({"--suffix-length", "--bytes", "--line-bytes", "--lines", "--number",
                                         "--additional-suffix", "--filter", "--prefix", "--separator",
                                         "--suffix-format", "--digits"}))
    for code in _values(opts, "--filter"):
        run_code(w, call, code, "`split --filter`")
    prefixes = _values(opts, "-f", "--prefix") if call.name == "csplit" else ops[1:2]
    for prefix in prefixes or [Word("x" if call.name == "split" else "xx")]:
        add_write(w, call, Word(prefix.text + "*", prefix.dynamic, True, input=prefix.input))


_GAWK_LONGS = frozenset({"--assign", "--bignum", "--characters-as-bytes", "--copyright", "--csv", "--debug",
                         "--dump-variables", "--exec", "--field-separator", "--file", "--gen-pot", "--help", "--include",
                         "--lint", "--load", "--no-optimize", "--non-decimal-data", "--optimize", "--posix",
                         "--pretty-print", "--profile", "--re-interval", "--sandbox", "--source", "--traditional",
                         "--trace", "--use-lc-numeric", "--version", "--lint-old"})
"""Every long option of gawk (its getopt_long takes any unambiguous prefix: ``--inc`` is ``--include``)."""
_GAWK_VALUES = frozenset({"--assign", "--exec", "--field-separator", "--file", "--include", "--load", "--source"})
_AWK_DIRECTIVE = re.compile(r"@\s*(include|load)\b")


def _awk_in_place(w: Walker, call: Call) -> None:
    """gawk's in-place editing: ``-i inplace`` (``--include``, any abbreviation), or ``@include "inplace"``/
    ``@load`` in the program.  Built by construction: any ``-i``/``-l`` (a library may be ``inplace`` under
    another name), any ``@include``/``@load`` in the program text, or a program file the guard cannot read
    (stdin, a FIFO, one only known at run time or missing now) counts as writing every file operand."""
    from ralph.shell import resolve_path

    words = call.words
    loads = False
    programs: list[Word] = []
    texts: list[str] = []
    i = 1
    while i < len(words):
        word = words[i]
        t = word.text
        if word.dynamic or not t.startswith("-") or t == "-":
            break
        i += 1
        if t == "--":
            break
        value: Word | None
        if t.startswith("--"):
            key, eq, inline = t.partition("=")
            name = long_option(key, _GAWK_LONGS) or key
            if eq:
                value = Word(inline, word.dynamic, word.glob, input=word.input)
            elif name in _GAWK_VALUES and i < len(words):
                value, i = words[i], i + 1
            else:
                value = None
            opt = {"--include": "-i", "--load": "-l", "--file": "-f", "--exec": "-E", "--source": "-e"}.get(name, name)
        else:
            opt, value = "", None
            for j in range(1, len(t)):
                if t[j] in "fFvilEe":
                    opt = "-" + t[j]
                    if t[j + 1 :]:
                        value = Word(t[j + 1 :], word.dynamic, word.glob, input=word.input)
                    elif i < len(words):
                        value, i = words[i], i + 1
                    break
                if t[j] in "dDLop":  # optional values, attached only
                    break
        if opt in ("-i", "-l"):
            loads = True
        elif opt in ("-f", "-E") and value is not None:
            programs.append(value)
        elif opt == "-e" and value is not None:
            texts.append(value.text)
            loads = loads or value.dynamic
        if opt == "-E":
            break
    if not programs and not texts and i < len(words):
        texts.append(words[i].text)
        loads = loads or words[i].dynamic
        i += 1
    for program in programs:
        path = None if program.dynamic else resolve_path(program.text, w.cwd, w.home, False, call.st.cd,
                                                         call.st.cd_unknown)
        try:
            if path is None or program.input or is_stdin_path(path):
                raise Unreadable(program.text)
            texts.append(read_regular(path).decode("utf-8", "replace"))
        except OSError:
            loads = True
    if not loads and not any(_AWK_DIRECTIVE.search(text) for text in texts):
        return
    for word in words[i:]:
        if ("=" not in word.text or word.dynamic) and word.text != "-":  # `var=value` operands are assignments
            add_write(w, call, word, via=f"{call.name} (in place)")


def _sponge(w: Walker, call: Call) -> None:
    """``sponge [-a] FILE`` (moreutils): FILE gets stdin."""
    append = any(x.text == "-a" for x in call.words[1:])
    for word in call.words[1:]:
        if not word.text.startswith("-") or word.dynamic:
            add_write(w, call, word, truncates=not append)


def _zip(w: Walker, call: Call) -> None:
    """``zip ARCHIVE FILES``: the archive; ``-TT CMD``/``--unzip-command`` runs CMD."""
    opts, ops = parse_options(call.words, 1, "bnOtx", frozenset({"--unzip-command", "--out", "--temp-path",
                                                                  "--suffixes", "--exclude", "--include"}))
    for k, word in enumerate(call.words):
        if word.text in ("-TT", "--unzip-command") and k + 1 < len(call.words):
            run_code(w, call, call.words[k + 1], f"`zip {word.text}`")
        elif word.text.startswith("--unzip-command="):
            run_code(w, call, Word(word.text.split("=", 1)[1], word.dynamic), "`zip --unzip-command`")
    for archive in _values(opts, "-O", "--out") or ops[:1]:
        add_write(w, call, archive, truncates=False)
    moves = any(x.text == "--move" or (x.text.startswith("-") and not x.text.startswith("--") and "m" in x.text)
                for x in call.words[1:] if not x.dynamic)
    if moves:  # `zip -m`: the files go into the archive, and away
        recursive = _has(opts, "-r", "-R", "--recurse-paths", "--recurse-patterns")
        for word in ops[1:]:
            _removes(w, call, word, recursive)


def _database(w: Walker, call: Call) -> None:
    """``sqlite3 FILE``/``duckdb FILE``: the database file is written."""
    i = 1
    words = call.words
    while i < len(words) and words[i].text.startswith("-") and not words[i].dynamic:
        i += 2 if words[i].text in ("-cmd", "-init", "-separator", "-newline", "-nullvalue", "-c") else 1
    if i < len(words) and words[i].text not in (":memory:", ""):
        add_write(w, call, words[i], truncates=False)


def _dd(w: Walker, call: Call) -> None:
    """``dd of=FILE`` (``conv=notrunc`` keeps the rest of it)."""
    notrunc = any(x.text.startswith("conv=") and "notrunc" in x.text for x in call.words[1:])
    for word in call.words[1:]:
        if word.text.startswith("of="):
            add_write(w, call, Word(word.text[3:], word.dynamic, word.glob, input=word.input), truncates=not notrunc)


def _logsave(w: Walker, call: Call) -> None:
    """``logsave [-asv] LOGFILE CMD...``: writes LOGFILE and runs CMD."""
    from ralph.shell.progutil import inner

    i = 1
    while i < len(call.words) and call.words[i].text.startswith("-") and not call.words[i].dynamic:
        i += 1
    if i < len(call.words):
        add_write(w, call, call.words[i], truncates="-a" not in [x.text for x in call.words[1:i]])
    inner(w, call, i + 1)



def _script(w: Walker, call: Call) -> None:
    """``script [-a] [-c CMD] [FILE]``: the typescript FILE (``typescript`` by default) and the ``-O``/``-B``/
    ``-I``/``-T`` log files."""
    opts, ops = parse_options(call.words, 1, "cEOBITm", frozenset({"--command", "--echo", "--log-out", "--log-in",
                                                                     "--log-io", "--log-timing", "--logging-format",
                                                                     "--output-limit"}),
                              optional=frozenset({"--timing"}))
    append = _has(opts, "-a", "--append")
    for word in _values(opts, "-O", "--log-out", "-B", "--log-io", "-I", "--log-in", "-T", "--log-timing", "--timing"):
        add_write(w, call, word, truncates=not append)
    logs = _values(opts, "-O", "--log-out", "-B", "--log-io", "-I", "--log-in")
    for word in ops[:1] or ([] if logs else [Word("typescript")]):
        add_write(w, call, word, truncates=not append)


def _xxd(w: Walker, call: Call) -> None:
    """``xxd [options] [INFILE [OUTFILE]]``: OUTFILE is written (``xxd -r dump FILE`` writes any bytes)."""
    _, ops = parse_options(call.words, 1, "cglnosR", frozenset())
    for word in ops[1:2]:
        if word.text != "-":
            add_write(w, call, word)


def _fallocate(w: Walker, call: Call) -> None:
    """``fallocate [-c|-p|-z|-i|-d] -l LEN FILE``: FILE is made (or grown); punching, zeroing, collapsing or
    inserting a range rewrites what is in it."""
    opts, ops = parse_options(call.words, 1, "lo", frozenset({"--length", "--offset"}))
    rewrites = _has(opts, "-c", "-p", "-z", "-i", "-d", "--collapse-range", "--punch-hole", "--zero-range",
                    "--insert-range", "--dig-holes")
    for word in ops:
        add_write(w, call, word, truncates=rewrites)



def _creates(w: Walker, call: Call) -> None:
    """``touch``/``mkdir [-p]``/``mkfifo``/``mknod NAME TYPE``: a new file, directory or FIFO at each name.
    Creating is writing for the protected paths (a FIFO where the loop reads its state blocks the loop)."""
    name = call.name
    if name == "touch":
        opts, ops = parse_options(call.words, 1, "drt", frozenset({"--date", "--reference", "--time"}))
    else:
        opts, ops = parse_options(call.words, 1, "m", frozenset({"--mode"}), optional=frozenset({"--context"}))
    if name == "mknod":
        ops = ops[:1]
    for word in ops:
        add_write(w, call, word, truncates=False)  # `mkdir -p a/b`: a's place is inside b's


# -- in-place editors, programs that remove their input -----------------------------------------------------

_IN_PLACE_FAMILY = re.compile(r"^(g?sed|perl|ruby)([0-9][0-9.]*)?$")


def _editor_options(call: Call) -> tuple[bool, bool, list[Word]]:
    """(in place, script given by option, operands) of ``sed``/``perl``/``ruby``, read as each reads its options:
    ``-i`` takes the rest of its cluster as a backup suffix (``-i.bak``, ``-ie``), ``sed --in-pl`` is
    ``--in-place``; ``-e SCRIPT`` (``-f FILE``, ``-l N`` of sed; ``-E`` of perl; ``-r``/``-I``/``-C``/``-E``
    of ruby) takes a value; perl's ``-l``/``-0`` only digits."""
    family = _IN_PLACE_FAMILY.match(call.name)
    kind = family.group(1).lstrip("g") if family else "sed"
    takes = {"sed": "efl", "perl": "eE", "ruby": "erICE"}[kind]
    swallows = {"sed": "efli", "perl": "eEIMmxCFdDi", "ruby": "erICEFxiKTW"}[kind]
    digits = {"sed": "", "perl": "l0", "ruby": "0"}[kind]
    scripts = {"sed": "ef", "perl": "eE", "ruby": "e"}[kind]
    in_place = given = False
    operands: list[Word] = []
    words = call.words
    i = 1
    while i < len(words):
        word = words[i]
        t = word.text
        i += 1
        if word.dynamic or not t.startswith("-") or t == "-":
            operands.append(word)
            continue
        if t == "--":
            operands.extend(words[i:])
            break
        if t.startswith("--"):
            if kind != "sed":
                continue
            name = long_option(t, SED_LONGS)
            in_place = in_place or name == "--in-place"
            if name in ("--expression", "--file", "--line-length"):
                given = given or name != "--line-length"
                if "=" not in t:
                    i += 1
            continue
        j = 1
        while j < len(t):
            letter = t[j]
            j += 1
            if letter == "i":
                in_place = True
            if letter in digits:
                while j < len(t) and t[j] in "0123456789abcdefABCDEFx":
                    j += 1
                continue
            if letter in swallows:
                given = given or letter in scripts
                if letter in takes and j >= len(t):
                    i += 1  # the value is the next word
                break
    return in_place, given, operands


def _in_place(w: Walker, call: Call) -> None:
    """``sed -i``/``--in-place`` (any abbreviation), ``perl -i``, ``ruby -i``: every file operand is rewritten."""
    in_place, given, operands = _editor_options(call)
    if not in_place or _found_by_find(call):
        return
    for word in operands if given else operands[1:]:
        if word.text != "-":
            add_write(w, call, word)


def in_place_writer(name: str) -> Handler | None:
    """The writer of an in-place editor spelled with a version (``perl5.36``, ``ruby3.2``), if ``name`` is one."""
    return _in_place if _IN_PLACE_FAMILY.match(name) else None


def _found_by_find(call: Call) -> bool:
    """Is ``call`` run by ``find -exec`` (its ``{}`` a path the find expression picks)?  Then what it writes is
    read from the find command, whose expression says which files it reaches."""
    return any(wrapper.startswith("find ") for wrapper in call.wrappers)


def _removes(w: Walker, call: Call, word: Word, recursive: bool = False) -> None:
    """``call`` removes ``word`` (a file, or with ``recursive`` a tree): what was there is gone."""
    if _found_by_find(call):
        return
    add_write(w, call, word, truncates=True, into=recursive, follow=False, via=f"{call.name} (removes its input)")


COMPRESSORS = frozenset({"gzip", "gunzip", "bzip2", "bunzip2", "xz", "unxz", "lzma", "unlzma", "lzip", "lz4", "zstd",
                         "unzstd", "compress", "uncompress", "pigz", "unpigz", "pbzip2", "lbzip2", "brotli", "unlz4"})
"""Programs that replace each file they are given by its compressed (or expanded) version: the original goes."""
_COMPRESSOR_LONGS = frozenset({"--stdout", "--to-stdout", "--keep", "--list", "--test", "--recursive", "--rm",
                               "--decompress", "--uncompress", "--force", "--quiet", "--verbose", "--suffix",
                               "--fast", "--best", "--name", "--no-name", "--help", "--version", "--license",
                               "--format", "--check", "--threads", "--memlimit", "--files", "--files0", "--rsyncable",
                               "--synchronous", "--no-sparse", "--sparse", "--single-stream", "--robot", "--extreme",
                               "--ascii", "--small", "--output-dir-flat", "--output-dir-mirror", "--output"})


def _compress(w: Walker, call: Call) -> None:
    """``gzip FILE`` (and the other compressors): FILE is replaced by ``FILE.gz``, unless written to stdout, kept
    (``-k``), listed or tested; ``zstd`` and ``lz4`` keep their input unless ``--rm``."""
    opts, ops = parse_options(call.words, 1, "S" if call.name not in ("zstd", "unzstd") else "o",
                              frozenset({"--suffix", "--format", "--threads", "--memlimit", "--files", "--files0",
                                         "--output"}), _COMPRESSOR_LONGS)
    names = {k for k, _ in opts}
    keeps = names & {"-c", "-k", "-l", "-t", "--stdout", "--to-stdout", "--keep", "--list", "--test"}
    if call.name in ("zstd", "unzstd", "lz4", "unlz4"):
        keeps = keeps or ({"--rm"} - names)
    if keeps:
        return
    recursive = bool(names & {"-r", "--recursive"})
    for word in ops:
        if word.text != "-":
            _removes(w, call, word, recursive)


_RENAME_VALUES = frozenset({"--expr", "--filename"})


def _rename(w: Walker, call: Call) -> None:
    """``rename EXPR FILE...`` (perl's) / ``rename FROM TO FILE...`` (util-linux): the files move away; with
    ``-n``/``--no-act`` nothing happens."""
    opts, ops = parse_options(call.words, 1, "e", _RENAME_VALUES,
                              frozenset({"--no-act", "--nono", "--verbose", "--force", "--symlink", "--no-overwrite",
                                         "--interactive", "--all", "--last", "--help", "--version"}))
    names = {k for k, _ in opts}
    if names & {"-n", "--no-act", "--nono"}:
        return
    skip = 0 if names & {"-e", "--expr"} else (2 if call.name in ("rename.ul",) else 1)
    for word in ops[skip:]:
        _removes(w, call, word)

_OUTPUT_OPTIONS = frozenset({"-o", "--output", "--output-file", "--outfile", "--out", "-out", "--log-file",
                             "--logfile", "--output-document"})
_TREE_OPTIONS = frozenset({"--target", "--prefix", "--root", "--destdir", "--install-dir", "--bindir", "--target-dir",
                           "--out-dir", "--outdir", "--output-dir", "--dest", "--destination", "--directory-prefix"})
"""Options naming a directory a program installs or writes files of its own choosing into."""


def _package_tool(w: Walker, call: Call) -> None:
    """Package managers: ``pip install --user`` (``~/.local``), ``pip``/``npm``/``yarn config set`` (the user's
    configuration files), ``python -m venv DIR``-like environments; the rest as :func:`generic_outputs`."""
    words = [x.text for x in call.words]
    name = call.name
    if name in ("pip", "pip3", "uv") or re.fullmatch(r"pip[0-9.]+", name):
        args = words[2:] if name == "uv" and words[1:2] == ["pip"] else words[1:]
        if args[:1] == ["install"] and "--user" in args:
            add_write(w, call, "~/.local", into=True)
        if args[:1] == ["config"] and args[1:2] and args[1] in ("set", "unset", "edit") and "--site" not in args:
            add_write(w, call, "~/.config/pip/pip.conf", truncates=False)
        if name == "uv" and words[1:2] == ["venv"]:
            for target in [x for x in call.words[2:] if not x.text.startswith("-")][:1]:
                add_write(w, call, target, into=True)
    elif name in ("npm", "pnpm", "yarn"):
        args = words[1:]
        local = any(a.startswith(("--location=project", "--location project")) for a in args) or (
            "-L" in args and "project" in args)
        if not local and (args[:1] in (["set"], ["adduser"], ["login"]) or (
                args[:1] in (["config"], ["c"]) and args[1:2] and args[1] in ("set", "delete", "rm", "edit"))):
            add_write(w, call, "~/.yarnrc" if name == "yarn" else "~/.npmrc", truncates=False)
    elif name == "virtualenv":
        for target in [x for x in call.words[1:] if not x.text.startswith("-")][:1]:
            add_write(w, call, target, into=True)
    generic_outputs(w, call)
_NOT_OUTPUT = frozenset(
    {"ls", "ps", "grep", "egrep", "fgrep", "rg", "ag", "ack", "ssh", "autossh", "mosh", "sftp", "mount", "umount",
     "findmnt", "lsblk", "blkid", "journalctl", "systemctl", "df", "top", "htop", "pytest", "py.test", "jq", "yq",
     "kubectl", "helm", "oc", "xargs", "nc", "ncat", "netcat", "socat", "ip", "ss", "column", "set", "shopt", "sudo",
     "doas", "lsof", "pgrep", "pkill", "docker", "podman", "nerdctl", "git", "setopt", "env", "ssh-keygen", "sed",
     "readlink", "realpath", "stat", "file", "find", "which", "type", "command", "echo", "printf", "test", "[",
     "cp", "mv", "install", "ln", "link", "rsync", "scp", "tar", "gtar", "bsdtar", "unzip", "7z", "7za", "7zr", "cpio",
     "patch", "curl", "wget", "sort", "uniq", "split", "csplit", "logsave", "sponge", "zip", "sqlite3", "duckdb",
     "dd", "awk", "gawk", "script", "xxd", "fallocate", "touch", "mkdir", "mkfifo", "mknod"})
"""Programs whose ``-o`` is no output file (``ls -o``, ``ssh -o Option``, ``ps -o fields`` ...) or that are
read elsewhere."""


def generic_outputs(w: Walker, call: Call) -> None:
    """Any other program's output-file option naming a path (``gcc -o ~/.local/bin/git``, ``--output=/etc/x``)."""
    words = call.words
    if call.name in _NOT_OUTPUT or len(words) < 3:
        return
    for k in range(1, len(words)):
        word = words[k]
        if not word.text.startswith("-"):
            continue
        key, eq, value = word.text.partition("=")
        given: Word | None = None
        if key in _OUTPUT_OPTIONS and eq:
            given = Word(value, word.dynamic, word.glob, input=word.input)
        elif word.text in _OUTPUT_OPTIONS and k + 1 < len(words):
            given = words[k + 1]
        elif word.text.startswith("-o") and len(word.text) > 2 and not word.text.startswith("--"):
            given = Word(word.text[2:], word.dynamic, word.glob, input=word.input)
        if given is not None and (given.dynamic or given.text.startswith(("/", "~", ".")) or "/" in given.text):
            add_write(w, call, given)
            continue
        tree: Word | None = None
        if key in _TREE_OPTIONS and eq:
            tree = Word(value, word.dynamic, word.glob, input=word.input)
        elif word.text in _TREE_OPTIONS and k + 1 < len(words):
            tree = words[k + 1]
        if tree is not None and (tree.dynamic or tree.text.startswith(("/", "~")) or "/" in tree.text):
            add_write(w, call, tree, into=True)


WRITERS: dict[str, Handler] = {
    "cp": _copy,
    "mv": _copy,
    "install": _copy,
    "ln": _copy,
    "link": _copy,
    "rsync": _rsync,
    "scp": _scp,
    "tar": _tar,
    "gtar": _tar,
    "bsdtar": _tar,
    "unzip": _unzip,
    "7z": _sevenzip,
    "7za": _sevenzip,
    "7zr": _sevenzip,
    "cpio": _cpio,
    "patch": _patch,
    "curl": _curl,
    "wget": _wget,
    "sort": _sort,
    "uniq": _uniq,
    "split": _split,
    "csplit": _split,
    "logsave": _logsave,
    "sponge": _sponge,
    "awk": _awk_in_place,
    "gawk": _awk_in_place,
    "zip": _zip,
    "sqlite3": _database,
    "duckdb": _database,
    "dd": _dd,
    "script": _script,
    "xxd": _xxd,
    "fallocate": _fallocate,
    **dict.fromkeys(("touch", "mkdir", "mkfifo", "mknod"), _creates),
    "sed": _in_place,
    "gsed": _in_place,
    "perl": _in_place,
    "ruby": _in_place,
    **dict.fromkeys(COMPRESSORS, _compress),
    **dict.fromkeys(("rename", "prename", "perl-rename", "file-rename", "rename.ul"), _rename),
    "pip": _package_tool,
    "pip3": _package_tool,
    "uv": _package_tool,
    "npm": _package_tool,
    "pnpm": _package_tool,
    "yarn": _package_tool,
    "virtualenv": _package_tool,
}
"""Programs whose arguments name the files they write (run after the program's own handler)."""
