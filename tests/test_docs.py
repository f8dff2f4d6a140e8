"""Documentation stays true: the hook reference matches the hookspecs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_hook_reference_is_up_to_date() -> None:
    spec = importlib.util.spec_from_file_location("gen", DOCS / "generate_hooks_md.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (DOCS / "hooks.md").read_text(encoding="utf-8") == module.render(), (
        "docs/hooks.md is stale: run python docs/generate_hooks_md.py"
    )


def test_every_hookspec_has_a_docstring_and_a_reference_entry() -> None:
    from ralph.plugin.manager import hook_names
    from ralph.plugin import hookspecs

    reference = (DOCS / "hooks.md").read_text(encoding="utf-8")
    for name in hook_names():
        assert (getattr(hookspecs, name).__doc__ or "").strip(), f"{name} has no docstring"
        assert f"## `{name}(" in reference



def test_the_plugin_guide_covers_every_hook_and_every_plugin_contract() -> None:
    """docs/plugins.md says how to write each kind: every hook and every ABC a plugin subclasses."""
    import inspect
    import re
    from abc import ABC

    import ralph.api
    from ralph.plugin.manager import hook_names

    guide = (DOCS / "plugins.md").read_text(encoding="utf-8")
    def named(name: str) -> bool:
        return re.search(rf"\b{name}\b", guide) is not None

    missing = [name for name in hook_names() if not named(name)]
    contracts = [name for name in ralph.api.__all__
                 if inspect.isclass(obj := getattr(ralph.api, name)) and ABC in obj.__bases__]
    assert {"Runner", "Agent", "Policy", "TaskStore", "Gate", "FleetEngine"} <= set(contracts)
    missing += [name for name in contracts if not named(name)]
    assert missing == [], "docs/plugins.md does not mention: " + ", ".join(missing)

def test_readme_config_example_is_valid(tmp_path) -> None:
    import re

    from ralph.config import load_config
    from ralph.plugin.manager import PluginHost

    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```toml\n(.*?)```", readme, re.S)
    assert block, "README has no toml example"
    (tmp_path / "pyproject.toml").write_text(block.group(1))
    config, sections, source = load_config(tmp_path, {}, PluginHost(environ={}).config_sections(), environ={})
    assert source == tmp_path / "pyproject.toml"
    assert config.max_iterations == 30 and config.on_usage_limit == "wait"
    assert sections["docker-sandbox"].network == "allowlist"


def test_readme_commands_exist() -> None:
    import re

    from click.testing import CliRunner

    from ralph.cli.main import cli

    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    for name in sorted(set(re.findall(r"`ralph ([a-z]+)", readme))):
        result = CliRunner().invoke(cli, [name, "--help"])
        assert result.exit_code == 0, f"`ralph {name}` in README.md is not a command: {result.output}"


def _layout_entries() -> set[str]:
    """Paths CONTRIBUTING.md's layout table names: ``ralph/loop/engine.py``, a bare ``archive.py``
    after ``ralph/lifecycle/plan.py`` in the same cell, or a whole directory (``ralph/shell/``)."""
    import re

    text = (DOCS.parent / "CONTRIBUTING.md").read_text(encoding="utf-8")
    table = text[text.index("## Layout"):text.index("## Writing a plugin")]
    named = set()
    for row in table.splitlines():
        if not row.startswith("| `"):
            continue
        directory = ""
        for token in re.findall(r"`([^`]+)`", row.split(" | ")[0]):
            if "/" in token:
                named.add(token)
                directory = token if token.endswith("/") else token.rsplit("/", 1)[0] + "/"
            elif token.endswith(".py"):
                named.add(directory + token)
    return named


def test_the_layout_table_names_every_core_module() -> None:
    root = DOCS.parent
    named = _layout_entries()
    missing = []
    for path in sorted((root / "ralph").rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if path.name in ("__init__.py", "__main__.py") or relative in named:
            continue
        if not any(entry.endswith("/") and relative.startswith(entry) for entry in named):
            missing.append(relative)
    assert missing == [], "add these to CONTRIBUTING.md's layout table: " + ", ".join(missing)
    stale = [entry for entry in named if entry.startswith("ralph/") and not (root / entry).exists()]
    assert stale == [], "CONTRIBUTING.md's layout table names what is gone: " + ", ".join(stale)


def _replay_section() -> str:
    text = (DOCS / "plugins.md").read_text(encoding="utf-8")
    return text[text.index("### Replay scripts"):text.index("## When a plugin breaks")]


def test_the_documented_replay_actions_are_the_ones_the_replay_agent_acts_out() -> None:
    import ast
    import re

    documented = set(re.findall(r"`(\w+)`", _replay_section().split("- Actions (one key each):")[1].split("\n- ")[0]))
    source = (DOCS.parent / "plugins" / "agents" / "replay_main.py").read_text(encoding="utf-8")
    handled: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and isinstance(node.left, ast.Name) and node.left.id == "kind":
            for other in node.comparators:
                values = other.elts if isinstance(other, (ast.Set, ast.Tuple)) else [other]
                handled |= {v.value for v in values if isinstance(v, ast.Constant) and isinstance(v.value, str)}
    documented -= {"path", "content", "story", "fields"}  # the keys inside an action's value
    assert handled and documented == handled


def test_the_documented_replay_script_drives_a_real_loop(ralph_project, tmp_path) -> None:
    """The example in docs/plugins.md, as written, through ``ralph run --agent replay``."""
    import json
    import re

    from ralph.testing import story

    example = json.loads(re.search(r"```json\n(.*?)```", _replay_section(), re.S).group(1))
    (tmp_path / "script.json").write_text(json.dumps(example))
    ralph_project.write_stories([story("US-001", "Greet")])
    env = {"RALPH_REPLAY_SCRIPT": str(tmp_path / "script.json"), "RALPH_DISABLE_PLUGINS": "spec-gate"}
    result = ralph_project.run("run", "--runner", "direct", "--agent", "replay", "--skip-review", "-n", "2", env=env)
    assert result.returncode == 0, result.stderr
    assert (ralph_project.path / "greet.py").read_text() == "print('hi')\n"
    assert ralph_project.story("US-001")["passes"] is True
    assert "feat: [US-001] - Greet" in ralph_project.git("log", "--format=%s")


def _testing_section() -> str:
    text = (DOCS / "plugins.md").read_text(encoding="utf-8")
    return text.split("## Testing a plugin", 1)[1].split("\n## ", 1)[0]


def test_the_plugin_guide_names_every_public_name_of_ralph_testing() -> None:
    """What a plugin author's tests can use is in docs/plugins.md: the fixtures, ``ralph.testing``'s
    builders, ``RalphProject``'s methods, the scripted servers, responders and turn builders."""
    import ast
    import inspect
    import re

    import ralph.testing
    from ralph.testing import model_server, responses_server, scripting

    section = _testing_section()
    blocks = re.findall(r"```\w*\n(.*?)```", section, re.S)
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```\w*\n.*?```", "", section, flags=re.S))
    named = {word for text in blocks + spans for word in re.findall(r"\w+", text)}
    plugin = ast.parse((DOCS.parent / "ralph" / "testing" / "pytest_plugin.py").read_text(encoding="utf-8"))
    fixtures = [n.name for n in plugin.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]
    project = [name for name, _ in inspect.getmembers(ralph.testing.RalphProject) if not name.startswith("_")]
    expected = {
        "fixture": fixtures,
        "ralph.testing": list(ralph.testing.__all__),
        "RalphProject": project + ["path", "state_dir", "env"],
        "ralph.testing.scripting": list(scripting.__all__),
        "ralph.testing.model_server": ["ScriptedModelServer", "IterationScript", "SequenceScript", "RejectFirst",
                                       "Turn", "text", "tool", "ErrorReply"],
        "ralph.testing.responses_server": ["ScriptedResponsesServer"],
    }
    for module in (model_server, responses_server):
        assert set(expected[module.__name__]) <= set(module.__all__)
    assert len(fixtures) >= 8 and len(project) >= 12
    missing = [f"{where}.{name}" for where, names in expected.items() for name in names if name not in named]
    assert missing == [], "docs/plugins.md's testing section does not name:\n" + "\n".join(missing)


DOC_FILES = ["README.md", "CONTRIBUTING.md", *(f"docs/{p.name}" for p in sorted(DOCS.glob("*.md"))),
             "examples/ralph-nice/README.md", "examples/ralph-remote/README.md", "benchmarks/README.md"]
NOT_CODE = {"ralph.toml", "ralph.yml", "ralph.commands", "ralph.runners", "ralph.agents", "ralph.policies", "ralph.task_stores",
            "ralph.gates", "ralph.fleet_engines", "ralph.sh", "ralph.recipe", "ralph.sandbox", "ralph.project",
            "ralph.role", "ralph.owner"}
"""Dotted names in the docs that are a file, an entry-point group or a container label, not a module."""


def _backticked(relative: str) -> list[tuple[int, str]]:
    import re

    text = (DOCS.parent / relative).read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in re.finditer(r"`([^`\n]+)`", text)]


def _resolves(dotted: str) -> bool:
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(module)
        except ModuleNotFoundError as error:
            if error.name is not None and not module.startswith(error.name):
                return True  # the module exists; an optional dependency of it is missing
            continue
        for attribute in parts[cut:]:
            if not hasattr(obj, attribute):
                return False
            obj = getattr(obj, attribute)
        return True
    return False


def test_every_ralph_module_and_name_the_docs_mention_exists() -> None:
    import re

    gone = [
        f"{relative}:{line}: {name}"
        for relative in DOC_FILES
        for line, code in _backticked(relative)
        for name in re.findall(r"(?<![\w./-])((?:ralph|ralph_plugins)(?:\.\w+)+)", code)
        if name not in NOT_CODE and not _resolves(name)
    ]
    assert gone == [], "the docs name modules or names that do not exist (moved? renamed?): " + "; ".join(gone)


def test_every_repository_path_the_docs_mention_exists() -> None:
    import re

    root = DOCS.parent
    pattern = r"(?<![\w./-])((?:ralph/[\w/]+\.py|(?:plugins|tests|benchmarks|docs|templates|examples)/[\w/.-]*\w))"
    gone = [
        f"{relative}:{line}: {path}"
        for relative in DOC_FILES
        for line, code in _backticked(relative)
        for path in re.findall(pattern, code)
        if not (root / path).exists()
    ]
    assert gone == [], "the docs name files that do not exist (moved? renamed?): " + "; ".join(gone)


def test_the_benchmarks_readme_describes_every_script() -> None:
    root = DOCS.parent / "benchmarks"
    text = (root / "README.md").read_text(encoding="utf-8")
    scripts = sorted(p.name for p in root.glob("*.py") if not p.name.startswith("_") and p.name != "run_all.py")
    missing = [name for name in scripts if f"### `{name}`" not in text]
    assert missing == [], "benchmarks/README.md has no section for: " + ", ".join(missing)


def test_the_documented_sandbox_hook_command_is_the_runners() -> None:
    import re

    from ralph_plugins.runners.docker_sandbox import DockerSandboxRunner

    command = DockerSandboxRunner.hook_command(object.__new__(DockerSandboxRunner))  # uses no state
    assert command is not None
    for relative in ("docs/sandbox.md", "docs/ray.md"):
        quoted = [code for _, code in _backticked(relative) if re.match(r"python3 .*hooks/client\.py$", code)]
        assert quoted and set(quoted) == {command}, (relative, quoted, command)


def test_every_ralph_command_line_in_the_docs_uses_real_commands_and_options() -> None:
    import re
    import shlex

    import click

    from ralph.cli.main import cli

    context = click.Context(cli)
    checked, wrong = 0, []
    for relative in DOC_FILES:
        text = (DOCS.parent / relative).read_text(encoding="utf-8")
        shell_lines = [(number, line.split("#")[0].strip()) for number, line in enumerate(text.splitlines(), 1)
                       if re.match(r"\s*ralph [a-z]", line)]
        for number, code in _backticked(relative) + shell_lines:
            if not code.startswith("ralph "):
                continue
            try:
                tokens = shlex.split(code)
            except ValueError:
                continue
            command: click.Command = cli
            for token in tokens[1:]:
                if isinstance(command, click.Group) and command.get_command(context, token) is not None:
                    command = command.get_command(context, token)  # type: ignore[assignment]
                    continue
                if token.startswith("--") and token != "--help":
                    flag = token.split("=")[0]
                    options = {o for param in command.params for o in (*param.opts, *param.secondary_opts)}
                    checked += 1
                    if flag not in options:
                        wrong.append(f"{relative}:{number}: `{code}`: {flag} is no option of `{command.name}`")
    assert checked > 50  # the docs' command lines were found
    assert wrong == [], "; ".join(wrong)


def test_the_docs_name_public_names_through_ralph_api() -> None:
    import importlib
    import pkgutil
    import re

    import ralph.api

    public = dict.fromkeys(ralph.api.__all__, "ralph.api")
    for info in pkgutil.iter_modules(ralph.api.__path__, "ralph.api."):
        public.update({name: info.name for name in importlib.import_module(info.name).__all__ if name not in public})
    internal = [
        f"{relative}:{line}: {name} (say {public[name.rsplit('.', 1)[1]]}.{name.rsplit('.', 1)[1]})"
        for relative in DOC_FILES
        if relative != "CONTRIBUTING.md"  # for core contributors, who use the modules themselves
        for line, code in _backticked(relative)
        for name in re.findall(r"(?<![\w./-])(ralph\.(?!api\b|testing\b)[\w.]+)", code)
        if name.rsplit(".", 1)[-1] in public
    ]
    assert internal == [], "plugins import ralph only through ralph.api: " + "; ".join(internal)


def _readme_test_command() -> str:
    import re

    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    lines = [line for block in re.findall(r"```sh\n(.*?)```", readme, re.S) for line in block.splitlines()]
    found = [line.split("  #")[0].strip() for line in lines if "tox" in line]
    assert len(found) == 1, f"the README should give one test command (with tox): {found}"
    return found[0]


def test_the_readme_test_command_leaves_the_working_venv_alone() -> None:
    """The example plugin and Ray go into tox's own environment, never into the person's ``.venv``;
    pytest reports why tests were skipped (``-rs``)."""
    command = _readme_test_command()
    assert "examples/ralph-" not in command and "ray" not in command.replace("-ray", "")
    assert ".venv/" not in command  # another env than the one the README's first line makes
    tox = (DOCS.parent / "tox.ini").read_text(encoding="utf-8")
    assert "examples/ralph-nice" in tox and "examples/ralph-remote" in tox and "ray" in tox  # ... tox installs them itself
    assert "pytest {posargs:-q -rs}" in tox


def test_ci_runs_exactly_the_readme_test_command() -> None:
    """``.ci/run`` runs the README's test command (in its order), so what CI proves is what a
    person gets; it may build the sandbox image between its steps."""
    steps = [step.strip() for step in _readme_test_command().split("&&")]
    ci = [line.strip() for line in (DOCS.parent / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    positions = []
    for step in steps:
        assert step in ci, f".ci/run does not run the README's test step `{step}`"
        positions.append(ci.index(step))
    assert positions == sorted(positions)
    assert ci[positions[-1]:] == [steps[-1]] or all(not line or line.startswith("#") for line in ci[positions[-1] + 1:])


def test_the_own_project_page_runs_as_written(ralph_project, tmp_path) -> None:
    """docs/own-project.md ("Run ralph on your own project without credentials"): its task list and
    replay script, as written, through ``ralph run --agent replay`` as the page types it; the README
    links the page."""
    import json
    import re

    readme = (DOCS.parent / "README.md").read_text(encoding="utf-8")
    assert "](docs/own-project.md)" in readme and "Run ralph on your own project without credentials" in readme
    page = (DOCS / "own-project.md").read_text(encoding="utf-8")
    tasks, script = (json.loads(block) for block in re.findall(r"```json\n(.*?)```", page, re.S))
    ralph_project.tasks_path.write_text(json.dumps(tasks, indent=2))
    ralph_project.commit_all("try ralph")
    (tmp_path / "ralph-try.json").write_text(json.dumps(script))
    env = {"RALPH_REPLAY_SCRIPT": str(tmp_path / "ralph-try.json")}
    commands = re.findall(r"^RALPH_REPLAY_SCRIPT=\S+ ralph (run [^#\n]*?)\s*(?:#.*)?$", page, re.M)
    assert len(commands) == 2 and "--dry-run" in commands[0]
    dry = ralph_project.run(*commands[0].split(), env=env)
    assert dry.returncode == 0, dry.stderr
    result = ralph_project.run(*commands[1].split(), env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ralph_project.story("US-001")["passes"] is True
    assert (ralph_project.path / "hello.txt").read_text() == "hello\n"
    assert any(e["gate"] == "tests" and e["passed"] for e in ralph_project.events("gate"))


def test_the_full_configuration_example_is_valid(tmp_path) -> None:
    """docs/usage.md's configuration block (every core key the README's short one leaves out) loads."""
    import re

    from ralph.config import load_config
    from ralph.plugin.manager import PluginHost

    usage = (DOCS / "usage.md").read_text(encoding="utf-8")
    block = re.search(r"## Configuration\n.*?```toml\n(.*?)```", usage, re.S)
    assert block, "docs/usage.md has no configuration example"
    (tmp_path / "pyproject.toml").write_text(block.group(1))
    config, sections, _ = load_config(tmp_path, {}, PluginHost(environ={}).config_sections(), environ={})
    assert config.review_agent == "codex" and config.max_attempts == 5
    assert sections["claude"].setting_sources == ["project", "local"]


def _code_lines(path: Path) -> list[str]:
    """``path``'s lines, stripped, without its docstrings and blank lines."""
    import ast

    source = path.read_text(encoding="utf-8")
    skipped: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            skipped.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    return [line.strip() for number, line in enumerate(source.splitlines(), 1) if number not in skipped and line.strip()]


def test_the_remote_runner_section_shows_the_examples_code() -> None:
    """docs/plugins.md's "Writing a remote runner" quotes examples/ralph-remote, which CI installs and
    tests: each code block is the example's code (``...`` where lines are left out), in its order."""
    import re

    text = (DOCS / "plugins.md").read_text(encoding="utf-8")
    section = text.split("## Writing a remote runner", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    package = DOCS.parent / "examples" / "ralph-remote" / "ralph_remote"
    sources = {path.name: _code_lines(path) for path in sorted(package.glob("*.py"))}
    assert len(blocks) >= 5 and "plugin.py" in sources and "host.py" in sources
    for block in blocks:
        chunks = [[line.strip() for line in chunk.splitlines() if line.strip()] for chunk in re.split(r"^\s*\.\.\.\s*$", block, flags=re.M)]
        found = False
        for lines in sources.values():
            start = 0
            for chunk in chunks:
                at = next((i for i in range(start, len(lines) - len(chunk) + 1) if lines[i:i + len(chunk)] == chunk), None)
                if at is None:
                    break
                start = at + len(chunk)
            else:
                found = True
        assert found, "docs/plugins.md quotes code examples/ralph-remote does not have:\n" + block
