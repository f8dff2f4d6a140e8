"""Configuration: sources and their precedence, and errors that name the file and the TOML path."""

from __future__ import annotations

from pathlib import Path

import pytest

from ralph.config import DEFAULT_MAX_ITERATIONS, RalphConfig, load_config
from ralph.errors import ConfigError
from ralph.plugin.manager import PluginHost
from ralph_plugins.agents.claude_config import ClaudeConfig


@pytest.fixture(scope="module")
def sections() -> dict[str, type]:
    """The config sections the installed plugins really contribute."""
    return PluginHost(environ={}).config_sections()


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def config_error(project: Path, sections: dict[str, type] | None = None, **kwargs: object) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(project, sections=sections, environ={}, **kwargs)  # type: ignore[arg-type]
    return str(info.value)


def test_defaults_without_a_file(tmp_path: Path) -> None:
    config, plugin_config, source = load_config(tmp_path, environ={})
    assert source is None
    assert plugin_config == {}
    assert config == RalphConfig()
    assert config.max_iterations == DEFAULT_MAX_ITERATIONS == 15
    assert (config.review_cap, config.runner, config.policy) == (5, "auto", "review")


def test_pyproject_tool_ralph(tmp_path: Path) -> None:
    pyproject = write(tmp_path / "pyproject.toml", '[project]\nname = "x"\n\n[tool.ralph]\nmax_iterations = 9\n'
                      'review_cap = 3\nrunner = "direct"\n')
    config, _, source = load_config(tmp_path, environ={})
    assert source == pyproject
    assert (config.max_iterations, config.review_cap, config.runner) == (9, 3, "direct")


def test_pyproject_without_tool_ralph_is_no_source(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[project]\nname = "x"\n')
    config, _, source = load_config(tmp_path, environ={})
    assert source is None
    assert config.max_iterations == 15


def test_ralph_toml_wins_over_pyproject(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", "[tool.ralph]\nmax_iterations = 9\nreview_cap = 3\n")
    ralph_toml = write(tmp_path / "ralph.toml", "max_iterations = 4\n")
    config, _, source = load_config(tmp_path, environ={})
    assert source == ralph_toml
    assert config.max_iterations == 4
    assert config.review_cap == 5  # pyproject is not merged in: ralph.toml replaces it


def test_env_overrides_file_and_cli_overrides_env(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", "[tool.ralph]\nmax_iterations = 9\nreview_cap = 3\n")
    env = {"RALPH_MAX_ITERATIONS": "7"}
    config, _, _ = load_config(tmp_path, environ=env)
    assert (config.max_iterations, config.review_cap) == (7, 3)
    config, _, _ = load_config(tmp_path, {"max_iterations": 2, "review_cap": None}, environ=env)
    assert (config.max_iterations, config.review_cap) == (2, 3)


def test_empty_env_value_is_ignored(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", "[tool.ralph]\nmax_iterations = 9\n")
    config, _, _ = load_config(tmp_path, environ={"RALPH_MAX_ITERATIONS": ""})
    assert config.max_iterations == 9


def test_bad_env_value_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, environ={"RALPH_MAX_ITERATIONS": "lots"})
    assert str(info.value) == "environment variable RALPH_MAX_ITERATIONS: `max_iterations` must be an integer (got 'lots')"


def test_unknown_key_names_file_and_toml_path(tmp_path: Path, sections: dict[str, type]) -> None:
    pyproject = write(tmp_path / "pyproject.toml", "[tool.ralph]\nmax_iteration = 3\n")
    message = config_error(tmp_path, sections)
    assert message == f"{pyproject}: unknown key `tool.ralph.max_iteration`; did you mean `max_iterations`?"
    write(tmp_path / "pyproject.toml", "[tool.ralph.claud]\nbinary = 'x'\n")
    assert config_error(tmp_path, sections).endswith("did you mean `claude`?")  # plugin sections are known keys too
    write(tmp_path / "pyproject.toml", "[tool.ralph]\ncolour = 'red'\n")
    assert config_error(tmp_path, sections) == (  # nothing close: no list of every key
        f"{pyproject}: unknown key `tool.ralph.colour`; remove it or check its spelling"
    )


def test_unknown_key_in_ralph_toml_has_no_tool_prefix(tmp_path: Path) -> None:
    ralph_toml = write(tmp_path / "ralph.toml", "bogus = 1\n")
    assert config_error(tmp_path).startswith(f"{ralph_toml}: unknown key `bogus`;")


def test_bad_value_names_path_and_constraint(tmp_path: Path) -> None:
    pyproject = write(tmp_path / "pyproject.toml", "[tool.ralph]\nreview_cap = 0\n")
    assert config_error(tmp_path) == f"{pyproject}: `tool.ralph.review_cap` must be an integer >= 1 (got 0)"


def test_bad_literal_and_type(tmp_path: Path) -> None:
    pyproject = write(tmp_path / "pyproject.toml", '[tool.ralph]\noutput = "loud"\ntimeout = "soon"\n')
    assert config_error(tmp_path).splitlines() == [
        f"{pyproject}: `tool.ralph.timeout` must be a number (got 'soon')",
        f"{pyproject}: `tool.ralph.output` must be one of 'normal', 'quiet' or 'verbose' (got 'loud')",
    ]


def test_plugin_section_is_validated_by_the_plugin_model(tmp_path: Path, sections: dict[str, type]) -> None:
    assert sections["claude"] is ClaudeConfig
    write(tmp_path / "pyproject.toml", '[tool.ralph]\nagent = "claude"\n\n[tool.ralph.claude]\nbinary = "x"\n'
          'extra_args = ["--verbose"]\n')
    config, plugin_config, _ = load_config(tmp_path, sections=sections, environ={})
    claude = plugin_config["claude"]
    assert isinstance(claude, ClaudeConfig)
    assert (claude.binary, claude.extra_args) == ("x", ["--verbose"])
    assert config.agent == "claude"
    assert plugin_config["replay"].script is None  # sections absent from the file get their defaults


def test_unknown_key_in_plugin_section(tmp_path: Path, sections: dict[str, type]) -> None:
    pyproject = write(tmp_path / "pyproject.toml", '[tool.ralph.claude]\nbinary = "x"\nbinray = "y"\n')
    assert config_error(tmp_path, sections) == (
        f"{pyproject}: unknown key `tool.ralph.claude.binray`; did you mean `binary`?"
    )


def test_bad_value_in_plugin_section(tmp_path: Path, sections: dict[str, type]) -> None:
    pyproject = write(tmp_path / "pyproject.toml", "[tool.ralph.claude]\nbinary = 3\n")
    assert config_error(tmp_path, sections) == f"{pyproject}: `tool.ralph.claude.binary` must be a string (got 3)"


def test_plugin_section_must_be_a_table(tmp_path: Path, sections: dict[str, type]) -> None:
    pyproject = write(tmp_path / "pyproject.toml", '[tool.ralph]\nclaude = "x"\n')
    assert config_error(tmp_path, sections) == f"{pyproject}: `tool.ralph.claude` must be a table ([tool.ralph.claude])"


OWN_SECTIONS = ["claude", "codex", "replay", "quality", "verify", "spec", "ray", "docker-sandbox"]


def test_every_section_of_ralphs_plugins_is_a_config_section(sections: dict[str, type]) -> None:
    from ralph.api import ConfigSection

    assert set(OWN_SECTIONS) <= set(sections)
    plain = sorted(name for name in OWN_SECTIONS if not issubclass(sections[name], ConfigSection))
    assert plain == [], "use ralph.api.ConfigSection (unknown keys rejected, values validated on assignment)"


@pytest.mark.parametrize("name", OWN_SECTIONS)
def test_an_unknown_key_in_each_own_section_names_its_toml_path(tmp_path: Path, sections: dict[str, type], name: str) -> None:
    pyproject = write(tmp_path / "pyproject.toml", f'[tool.ralph."{name}"]\nno_such_key = 1\n')
    assert config_error(tmp_path, sections) == (
        f"{pyproject}: unknown key `tool.ralph.{name}.no_such_key`; remove it or check its spelling"
    )


@pytest.mark.parametrize(("name", "key", "bad"), [("codex", "retries", -1), ("ray", "poll_seconds", 0)])
def test_a_section_value_is_validated_on_assignment_too(
    tmp_path: Path, sections: dict[str, type], name: str, key: str, bad: object
) -> None:
    _, plugin_config, _ = load_config(tmp_path, sections=sections, environ={})
    with pytest.raises(ValueError):
        setattr(plugin_config[name], key, bad)


@pytest.mark.parametrize("name", ["pyproject.toml", "ralph.toml"])
def test_invalid_toml_names_the_file(tmp_path: Path, name: str) -> None:
    path = write(tmp_path / name, "[tool.ralph\nmax_iterations = \n")
    assert config_error(tmp_path).startswith(f"{path}: not valid TOML: ")


def test_a_config_section_rejects_unknown_keys_naming_the_toml_path(tmp_path: Path) -> None:
    from pydantic import BaseModel, Field

    from ralph.api import ConfigSection

    class EchoConfig(ConfigSection):
        niceness: int = Field(10, ge=1)

    class LaxConfig(BaseModel):  # a plain model that would ignore unknown keys: ralph rejects them anyway
        level: int = 1

    write(tmp_path / "pyproject.toml", "[tool.ralph.echo]\nnice = 3\n")
    message = config_error(tmp_path, sections={"echo": EchoConfig})
    assert message == f"{tmp_path / 'pyproject.toml'}: unknown key `tool.ralph.echo.nice`; remove it or check its spelling"
    write(tmp_path / "pyproject.toml", "[tool.ralph.echo]\nniceness = 0\n")
    assert "`tool.ralph.echo.niceness` must be an integer >= 1 (got 0)" in config_error(tmp_path, sections={"echo": EchoConfig})
    write(tmp_path / "pyproject.toml", "[tool.ralph.lax]\nlevl = 2\n")
    assert "unknown key `tool.ralph.lax.levl`" in config_error(tmp_path, sections={"lax": LaxConfig})
    write(tmp_path / "pyproject.toml", "[tool.ralph.echo]\nniceness = 4\n")
    _, plugin_config, _ = load_config(tmp_path, sections={"echo": EchoConfig}, environ={})
    assert plugin_config["echo"].niceness == 4
    with pytest.raises(ValueError):
        plugin_config["echo"].niceness = 0  # validated on assignment too


def test_unknown_keys_in_a_nested_table_are_rejected_too(tmp_path: Path) -> None:
    """A section's nested table is often a plain pydantic model, which would drop a misspelt key."""
    from pydantic import BaseModel

    from ralph.api import ConfigSection

    class Limits(BaseModel):
        cpus: float = 1.0

    class BoxConfig(ConfigSection):
        limits: Limits = Limits()
        spare: Limits | None = None

    pyproject = write(tmp_path / "pyproject.toml", "[tool.ralph.box.limits]\ncpu = 2\n")
    assert config_error(tmp_path, sections={"box": BoxConfig}) == (
        f"{pyproject}: unknown key `tool.ralph.box.limits.cpu`; did you mean `cpus`?"
    )
    write(tmp_path / "pyproject.toml", "[tool.ralph.box.spare]\ncpus = 2\nmemory = 1\n")
    assert "unknown key `tool.ralph.box.spare.memory`" in config_error(tmp_path, sections={"box": BoxConfig})
    write(tmp_path / "pyproject.toml", "[tool.ralph.box.limits]\ncpus = 2\n")
    _, plugin_config, _ = load_config(tmp_path, sections={"box": BoxConfig}, environ={})
    assert plugin_config["box"].limits.cpus == 2
