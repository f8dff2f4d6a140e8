"""The project's toolchain for the docker sandbox, without a Docker engine: the config keys, the
devcontainer file, which files the build reads (never through a link), the hash that names the
image, what the build borrows from this machine, and how gate commands become programs to look up.

The image builds and the look-ups in a real image are in tests/test_sandbox_image.py and
tests/test_sandbox_toolchain_claude.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ralph.testing.project import RalphProject, story
from ralph_plugins.runners.docker import buildenv, devcontainer, gateprograms, toolchain
from ralph_plugins.runners.docker.config import SandboxConfig


def toml_value(value: object) -> str:
    """A TOML value (a table inline) for ralph.toml."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items()) + " }"
    return json.dumps(value)


def config(**keys: object) -> SandboxConfig:
    return SandboxConfig(**keys)  # type: ignore[arg-type]


# -- config ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "words"),
    [
        ({"packages": ["-oAPT::Update::Pre-Invoke::=touch /x"]}, "is not a Debian package name"),
        ({"setup_files": ["../secrets.txt"]}, "is not a path inside the project"),
        ({"setup_files": ["/etc/passwd"]}, "is not a path inside the project"),
        ({"path": ["venv/bin"]}, "is not an absolute directory"),
        ({"image_env": {"PATH": "/x"}}, "PATH goes in `path`"),
    ],
)
def test_bad_toolchain_keys_are_one_line_naming_the_key(ralph_project: RalphProject, keys: dict, words: str) -> None:
    lines = ["[docker-sandbox]"] + [f"{key} = {toml_value(value)}" for key, value in keys.items()]
    (ralph_project.path / "ralph.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ralph_project.write_stories([story("US-001")])
    result = ralph_project.run("run", "--dry-run", "--runner", "direct")
    assert result.returncode == 2, result.stdout + result.stderr
    assert words in result.stderr and next(iter(keys)) in result.stderr


def test_a_project_without_toolchain_keys_or_devcontainer_has_no_toolchain(tmp_path: Path) -> None:
    assert toolchain.toolchain_of(tmp_path, config()) is None
    assert toolchain.toolchain_of(tmp_path, config(network="none", memory="2g")) is None
    assert toolchain.toolchain_of(tmp_path, config(packages=["python3-pytest"])) is not None


# -- which files the build reads, and the hash ----------------------------------------------------


def test_setup_files_are_the_manifests_and_the_files_setup_names(tmp_path: Path) -> None:
    for name in ("requirements.txt", "pyproject.toml", "dev/extra.txt", "install.sh", "notes.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name, encoding="utf-8")
    found = toolchain.toolchain_of(tmp_path, config(setup=["pip install --requirement=dev/extra.txt", "sh ./install.sh"]))
    assert found is not None
    assert found.setup_files == ["dev/extra.txt", "install.sh", "pyproject.toml", "requirements.txt"]
    named = toolchain.toolchain_of(tmp_path, config(setup=["true"], setup_files=["*.md", "dev/*"]))
    assert named is not None and named.setup_files == ["dev/extra.txt", "notes.md"]
    with pytest.raises(toolchain.ToolchainError, match="setup_files: missing.txt is not a file in the project"):
        toolchain.toolchain_of(tmp_path, config(setup=["true"], setup_files=["missing.txt"]))


def test_a_setup_file_is_never_read_through_a_link(tmp_path: Path) -> None:
    """An agent can leave requirements.txt as a link to a secret on this machine; the build would
    copy it into the image, where the agent reads it.  Links are refused in every component."""
    project, outside = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    outside.mkdir()
    (outside / "id_rsa").write_text("SECRET", encoding="utf-8")
    (project / "requirements.txt").symlink_to(outside / "id_rsa")
    (project / "deps").symlink_to(outside)
    os.link(outside / "id_rsa", project / "hardlinked.txt")
    derived = toolchain.toolchain_of(project, config(setup=["pip install -r requirements.txt -r deps/id_rsa"]))
    assert derived is not None and derived.setup_files == []  # not taken, so neither copied nor hashed
    for name in ("requirements.txt", "deps/id_rsa", "hardlinked.txt"):
        with pytest.raises(toolchain.ToolchainError):
            toolchain.read_project_file(project, name)
        with pytest.raises(toolchain.ToolchainError, match="not a file in the project"):
            toolchain.toolchain_of(project, config(setup=["true"], setup_files=[name]))


def test_the_hash_changes_with_every_input_and_says_what_changed(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("pytest\n", encoding="utf-8")
    base = toolchain.toolchain_of(tmp_path, config(packages=["python3-venv"], setup=["pip install -r requirements.txt"]))
    assert base is not None
    before = base.inputs("sha256:base")
    assert base.tag(before) == base.tag(base.inputs("sha256:base"))
    assert base.tag(before).startswith(toolchain.image_repository(tmp_path) + ":")
    (tmp_path / "requirements.txt").write_text("pytest>=8\n", encoding="utf-8")
    after = base.inputs("sha256:base")
    assert toolchain.changed(before, after) == ["requirements.txt"]
    assert toolchain.changed(before, base.inputs("sha256:rebuilt")) == ["base image", "requirements.txt"]
    more = toolchain.toolchain_of(tmp_path, config(packages=["python3-venv", "make"], setup=["pip install -r requirements.txt"]))
    assert more is not None and toolchain.changed(after, more.inputs("sha256:base")) == ["packages"]
    assert base.tag(after) != base.tag(before)


def test_the_image_repository_is_the_projects_and_never_ralphs_own(tmp_path: Path) -> None:
    one, other = tmp_path / "My Project!", tmp_path / "b" / "My Project!"
    assert toolchain.image_repository(one).startswith("ralph-sandbox-my-project-")
    assert toolchain.image_repository(one) != toolchain.image_repository(other)
    assert toolchain.image_repository(Path("/")) != "ralph-sandbox"


# -- the devcontainer --------------------------------------------------------------------------


def test_devcontainer_json_with_comments_and_trailing_commas() -> None:
    text = """{
      // the image "with quotes"
      "image": "debian:bookworm", /* a block
      comment */
      "onCreateCommand": ["pip", "install", "-r", "requirements.txt"],
      "postCreateCommand": {"a": "npm ci", "b": ["make", "deps"],},
      "containerEnv": {"GOFLAGS": "-mod=mod", "X": "${containerEnv:PATH}:/x", "Y": "${localEnv:HOME}"},
      "features": {"ghcr.io/devcontainers/features/node:1": {}},
      "url": "http://example.test//not-a-comment, ]",
    }"""
    found = devcontainer.read(Path("/p/.devcontainer/devcontainer.json"), text)
    assert found.image == "debian:bookworm"
    assert found.commands == ["pip install -r requirements.txt", "npm ci", "make deps"]
    assert found.container_env == {"GOFLAGS": "-mod=mod", "X": "${containerEnv:PATH}:/x"}
    assert found.ignored == ["containerEnv.Y (only ${containerEnv:NAME} is expanded)", "features"]
    assert devcontainer.expand_env(found.container_env["X"], {"PATH": "/usr/bin"}) == "/usr/bin:/x"
    assert devcontainer.parse_jsonc('{"url": "http://example.test//not-a-comment, ]",}')["url"].endswith(", ]")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{", "not valid JSON"),
        ('{"name": "x"}', "names neither `image` nor `build.dockerfile`"),
        ('{"image": 3}', "`image` is not a string"),
        ('{"image": "x", "postCreateCommand": 3}', "`postCreateCommand` is not a string"),
        ('{"build": {"dockerfile": "Dockerfile", "args": {"A": 1}}}', "`build.args` is not an object of strings"),
    ],
)
def test_a_devcontainer_that_cannot_be_used_names_the_key(text: str, words: str) -> None:
    with pytest.raises(devcontainer.DevContainerError, match=words.replace("(", r"\(").replace(")", r"\)")):
        devcontainer.read(Path("/p/.devcontainer/devcontainer.json"), text)


def test_the_devcontainer_is_the_toolchains_base_and_can_be_turned_off(tmp_path: Path) -> None:
    folder = tmp_path / ".devcontainer"
    folder.mkdir()
    (folder / "devcontainer.json").write_text(
        '{"build": {"dockerfile": "Dockerfile", "context": "..", "args": {"V": "1"}}, '
        '"postCreateCommand": "pip install -r requirements.txt", "containerEnv": {"A": "dev", "B": "dev"}}',
        encoding="utf-8",
    )
    (folder / "Dockerfile").write_text("ARG BASE=ralph-sandbox:latest\nFROM ${BASE} AS tools\nFROM tools\n", encoding="utf-8")
    (tmp_path / "requirements.txt").write_text("pytest\n", encoding="utf-8")
    found = toolchain.toolchain_of(tmp_path, config(setup=["make"], image_env={"B": "config"}))
    assert found is not None and found.devcontainer is not None
    assert found.setup == ["pip install -r requirements.txt", "make"]
    assert found.image_env == {"A": "dev", "B": "config"}
    assert found.devcontainer.context == folder / ".."
    assert ".devcontainer/Dockerfile" in found.inputs("x") and ".devcontainer/devcontainer.json" in found.inputs("x")
    from ralph_plugins.runners.docker.projectimage import dockerfile_bases

    assert dockerfile_bases(folder / "Dockerfile", tmp_path, {}) == ["ralph-sandbox:latest"]
    assert dockerfile_bases(folder / "Dockerfile", tmp_path, {"BASE": "debian:bookworm"}) == ["debian:bookworm"]
    assert toolchain.toolchain_of(tmp_path, config(devcontainer=False)) is None
    (folder / "devcontainer.json").write_text("{oops", encoding="utf-8")
    with pytest.raises(toolchain.ToolchainError, match="or set devcontainer = false"):
        toolchain.toolchain_of(tmp_path, config())


# -- what the build borrows from this machine ---------------------------------------------------------


def test_the_build_borrows_the_hosts_ca_bundle_and_proxy_variables(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle.crt"
    bundle.write_bytes(b"-----BEGIN CERTIFICATE-----\nHOST\n-----END CERTIFICATE-----\n")
    borrowed = buildenv.build_env({"SSL_CERT_FILE": str(bundle), "HTTPS_PROXY": "http://proxy.test:3128",
                                   "no_proxy": "localhost", "UNRELATED": "x"})
    assert borrowed.ca_bundle is not None and b"HOST" in borrowed.ca_bundle
    assert {borrowed.env[name] for name in ("SSL_CERT_FILE", "PIP_CERT", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO")} \
        == {buildenv.CA_FILE}
    assert borrowed.env["HTTPS_PROXY"] == "http://proxy.test:3128" and borrowed.env["no_proxy"] == "localhost"
    assert "UNRELATED" not in borrowed.env and not borrowed.host_network
    assert borrowed.apt_options() == ["-o", f"Acquire::https::CAInfo={buildenv.CA_FILE}"]
    assert buildenv.build_env({"SSL_CERT_FILE": str(bundle), "http_proxy": "127.0.0.1:8080"}).host_network


def test_this_machines_extra_cas_are_in_the_borrowed_bundle() -> None:
    extra = sorted(Path(buildenv.EXTRA_CA_DIR).glob("*.crt")) if Path(buildenv.EXTRA_CA_DIR).is_dir() else []
    if not extra:
        pytest.skip(f"this machine trusts no extra CA ({buildenv.EXTRA_CA_DIR} is empty)")
    bundle = buildenv.ca_bundle()
    assert bundle is not None
    for cert in extra:
        assert cert.read_bytes().strip() in bundle


# -- gate commands as programs -----------------------------------------------------------------------------


def needs_of(commands: list[str], project: Path, tracked: set[str] = frozenset()) -> tuple[list, list, list]:  # type: ignore[assignment]
    return gateprograms.gate_needs(commands, project, set(tracked))


def test_each_gate_program_is_found_through_the_shell_model(tmp_path: Path) -> None:
    needs, missing, unchecked = needs_of(
        ["python3 -m pytest -q", "python3 -X dev -W error -m mypy.stubtest x", "timeout 60 go test ./...",
         "cd web && npm test", "PYTHONPATH=src pytest -q | tail -5", "bash -c 'ruff check . && true'",
         "uv run pytest", "echo hi; exit 0", "$PY -m pytest", "npx jest", "cd web && npx eslint ."],
        tmp_path, {"web/node_modules/.bin/eslint"},
    )
    got = {(n.program, n.module) for n in needs}
    assert got == {("python3", "pytest"), ("python3", "mypy.stubtest"), ("timeout", None), ("go", None), ("npm", None),
                   ("pytest", None), ("tail", None), ("bash", None), ("ruff", None), ("uv", None), ("npx", None)}
    assert [m.need.program for m in missing] == ["npx jest"]  # npx looks in node_modules, never on PATH
    assert "runs jest from the project's node_modules" in missing[0].why and "call it by name" in missing[0].fix
    assert unchecked == ["`$PY -m pytest`: the program `$PY` is only known at run time"]


def test_a_program_from_the_project_must_be_in_the_repository(tmp_path: Path) -> None:
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").symlink_to("/usr/bin/python3")
    needs, missing, _ = needs_of([".venv/bin/python -m pytest", "./gradlew test", "cd tools && ./lint.sh"], tmp_path,
                                 {"gradlew", "tools/lint.sh"})
    assert needs == []
    assert [m.need.program for m in missing] == [".venv/bin/python"]
    assert "not in the repository (here a link to /usr/bin/python3)" in missing[0].why
    assert "python3 -m pytest" in missing[0].fix and "ralph sandbox build" in missing[0].fix


def test_a_module_of_the_project_itself_is_not_looked_up_in_the_image(tmp_path: Path) -> None:
    needs, _, _ = needs_of(["python3 -m myapp.tests", "PYTHONPATH=src python3 -m pkg", "python3 -m unittest"], tmp_path,
                           {"myapp/__init__.py", "src/pkg/__init__.py"})
    assert [(n.program, n.module) for n in needs] == [("python3", None), ("python3", "unittest")]


def test_missing_programs_become_failed_checks_naming_the_fix() -> None:
    need = gateprograms.Need("python3 -m pytest -q", "python3", "pytest")
    other = gateprograms.Need("make test", "make")
    checks = gateprograms.missing_checks(
        [gateprograms.Missing(other, "make is not installed in the sandbox image I", gateprograms._fix("make")),
         gateprograms.Missing(need, "python3 in the sandbox image I has no module pytest", gateprograms._fix("python3-pytest", True))],
        ["python3 -m pytest -q", "make test"],
    )
    assert [c.ok for c in checks] == [False, False]
    assert checks[0].what == "the sandbox cannot run the gate `python3 -m pytest -q`: python3 in the sandbox image I has no module pytest"
    assert 'add "python3-pytest" to packages in [tool.ralph.docker-sandbox]' in checks[0].fix
    assert checks[0].fix.endswith("then run `ralph sandbox build`")
