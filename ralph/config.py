"""Load and validate configuration.

Sources, later ones winning: ``[tool.ralph]`` in pyproject.toml (or the whole
of ``ralph.toml``), ``RALPH_*`` environment variables, command-line flags.
Unknown keys are rejected; every error names the file, the TOML path and
the fix, and all of a config's problems are reported at once (one line each).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ralph.configfile import ENV_PREFIX, find_config_file, state_dir_setting, table_prefix  # noqa: F401 - kept importable here
from ralph.errors import ConfigError

DEFAULT_MAX_ITERATIONS = 15
DEFAULT_ITERATION_LIMIT = 100
DEFAULT_TIMEOUT_SECONDS = 3600.0


class ModelPrice(BaseModel):
    """``[tool.ralph.prices."<model glob>"]``: USD per million tokens (docs/metering.md)."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0, description="uncached input tokens")
    output: float = Field(ge=0, description="output tokens")
    cache_read: float | None = Field(None, ge=0, description="cache reads (default: 0.1 x input)")
    cache_write: float | None = Field(None, ge=0, description="5-minute cache writes (default: 1.25 x input)")
    cache_write_1h: float | None = Field(None, ge=0, description="1-hour cache writes (default: 2 x input)")


class RalphConfig(BaseModel):
    """The ``[tool.ralph]`` table.  Plugin sections are sub-tables (``[tool.ralph.claude]``)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    ralph_dir: str = Field("ralph", description="directory holding prd.md, tasks.json, progress.txt, prompt.md")
    max_iterations: int = Field(DEFAULT_MAX_ITERATIONS, ge=1, description="iterations before the loop gives up")
    iteration_limit: int = Field(
        DEFAULT_ITERATION_LIMIT, ge=1, description="max_iterations above this are refused (runaway guard)"
    )
    model: str | None = Field(None, description="model name passed to the agent")
    runner: str = Field("auto", description="runner plugin: direct, docker-sandbox, auto ...")
    agent: str = Field("claude", description="agent plugin: claude, replay ...")
    review_agent: str | None = Field(None, description="agent plugin for review iterations (default: agent)")
    implement_model: str | None = Field(None, description="model of implement and review-fix iterations (default: model)")
    review_model: str | None = Field(None, description="model of review iterations (default: model, for the same agent)")
    policy: str = Field("review", description="mode policy: review or skip-review")
    review_cap: int = Field(5, ge=1, description="fresh-context reviews per story before auto-approval")
    timeout: float = Field(DEFAULT_TIMEOUT_SECONDS, gt=0, description="seconds one iteration may take")
    empty_retries: int = Field(2, ge=0, description="retries of an iteration whose agent said nothing")
    task_store: str | None = Field(None, description="task list format; detected when unset")
    state_dir: str | None = Field(None, description="where run directories go (default: ~/.local/state/ralph)")
    output: Literal["normal", "quiet", "verbose"] = Field("normal", description="console verbosity")
    live: bool = Field(True, description="on a terminal, a live footer (progress, iteration, cost) below the output")
    max_attempts: int = Field(5, ge=1, description="failed gate attempts per story before it is stopped")
    strategy_shifts: int = Field(2, ge=0, description="tier-1 strategy shifts for a stuck story before tier 2/3")
    on_gate_failure: Literal["keep", "rollback"] = Field(
        "keep", description="keep the failing iteration's work for the next attempt, or roll back to the checkpoint"
    )
    dirty_start: Literal["refuse", "stash"] = Field(
        "refuse", description="uncommitted work at start: refuse to run, or stash it under a named stash"
    )
    global_soft_timeout: float | None = Field(None, gt=0, description="seconds of run time before a warning")
    global_hard_timeout: float | None = Field(None, gt=0, description="seconds of run time before the loop stops")
    timeout_multiplier: float = Field(1.0, gt=0, description="multiplies every timeout (complex tasks)")
    max_cost: float | None = Field(
        None, gt=0, description="USD for the whole run, from the metered model traffic (else the agent's cost reports)"
    )
    story_max_cost: float | None = Field(None, gt=0, description="USD per story before it is flagged and skipped")
    max_quota: dict[str, float] | None = Field(
        None, description="percent of a subscription's usage windows this run may use, from the API's own figures: "
        "20 (every window), or per window: 5h=50,7d=10 (a table in the file)",
    )
    api_billing: Literal["warn", "refuse", "allow"] = Field(
        "warn", description="an API key where the agent runs although you are logged in with a subscription "
        "(the run would bill the API): warn at start, refuse to run, or allow",
    )
    on_usage_limit: Literal["wait", "exit"] = Field(
        "wait", description="when the agent hits its usage limit: wait for the reset, or exit with a resume hint"
    )
    usage_limit_wait: float = Field(900.0, gt=0, description="seconds to wait when the reset time is not given")
    usage_limit_max_wait: float = Field(6 * 3600.0, gt=0, description="longest wait for a reset before exiting")
    rate_limit_wait: float = Field(30.0, gt=0, description="first wait after a 429/overload rejection without retry-after")
    rate_limit_max_backoff: float = Field(900.0, gt=0, description="longest single wait of the doubling rate-limit backoff")
    max_agent_failures: int = Field(
        3, ge=1, description="consecutive agent failures with the same error (or iterations whose commands all failed, "
        "changing nothing) before the run stops"
    )
    metering: bool = Field(
        True, description="route the agent's model traffic through the loop's meter: cost, tokens and limits from the API itself"
    )
    prices: dict[str, ModelPrice] = Field(
        default_factory=dict, description="USD per million tokens by model-name glob, before the built-in table"
    )
    preflight: bool = Field(True, description="check the runner and agent (binary, credentials, files) before iteration 1")
    progress_keep_entries: int = Field(
        20, ge=0, description="progress log entries kept; older ones move to progress-archive.txt (0: keep all)"
    )
    prompt_progress_entries: int = Field(
        3, ge=0, description="progress log entries quoted in the prompt, with the Codebase Patterns section"
    )
    plugins: list[str] = Field(
        default_factory=list,
        description="project-local plugin files (.py, relative to the project) `ralph run` loads at its start",
    )


    @field_validator("max_quota", mode="before")
    @classmethod
    def _quota_forms(cls, value: Any) -> Any:
        from ralph.loop.quota import parse_max_quota

        return parse_max_quota(value)


class ConfigSection(BaseModel):
    """Base class of a plugin's config section (``[tool.ralph.<section>]``).

    Unknown keys are rejected, and every error names the key's TOML path
    (``unknown key `tool.ralph.nice.nicenes```).  Values are validated on
    assignment too.  Return the subclass from ``ralph_config_sections``.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


CORE_KEYS = frozenset(RalphConfig.model_fields)
# Environment variables that override config keys: RALPH_MAX_ITERATIONS, ...
ENV_KEYS = {f"{ENV_PREFIX}{key.upper()}": key for key in CORE_KEYS - {"plugins"}}
"""(``plugins`` is read from the config file alone: ralph/plugin/local.py.)"""


def _env_overrides(environ: dict[str, str]) -> dict[str, Any]:
    return {key: environ[var] for var, key in ENV_KEYS.items() if environ.get(var, "") != ""}


def load_config(
    project_dir: Path,
    cli_overrides: dict[str, Any] | None = None,
    sections: dict[str, type[BaseModel]] | None = None,
    environ: dict[str, str] | None = None,
) -> tuple[RalphConfig, dict[str, BaseModel], Path | None]:
    """Build the effective config: file, then environment, then CLI flags.

    ``sections`` are the plugin config models (``ralph_config_sections``).
    Returns the core config, the validated plugin sections and the file used.
    """
    environ = dict(os.environ) if environ is None else environ
    sections = sections or {}
    source, table = find_config_file(project_dir)
    prefix = table_prefix(source)
    where = str(source) if source else "configuration"

    plugin_tables = {k: v for k, v in table.items() if k not in CORE_KEYS}
    core_table = {k: v for k, v in table.items() if k in CORE_KEYS}
    problems: list[str] = []  # every one at once: a person fixing typos one run at a time would not thank us
    for key, value in plugin_tables.items():
        if key not in sections:
            problems.append(f"{where}: {_unknown(prefix, key, CORE_KEYS | set(sections))}")
        elif not isinstance(value, dict):
            problems.append(f"{where}: `{prefix}{key}` must be a table ([{prefix}{key}])")

    merged = {**core_table}
    env_values = _env_overrides(environ)
    merged.update(env_values)
    merged.update({k: v for k, v in (cli_overrides or {}).items() if v is not None})
    config: RalphConfig | None = None
    try:
        config = RalphConfig.model_validate(merged)
    except ValidationError as exc:
        problems += _explain(exc, where, prefix, env_values, cli_overrides or {})

    plugin_config: dict[str, BaseModel] = {}
    for name, model in sections.items():
        table_of_section = plugin_tables.get(name, {})
        if not isinstance(table_of_section, dict):
            continue  # said above
        unknown = _unknown_keys(model, table_of_section)
        problems += [f"{where}: {_unknown(f'{prefix}{name}.', key, _known_at(model, key))}" for key in unknown]
        try:
            plugin_config[name] = model.model_validate(table_of_section)
        except ValidationError as exc:
            problems += _explain(exc, where, f"{prefix}{name}.", {}, {}, model)
    if problems or config is None:
        raise ConfigError("\n".join(problems))
    return config, plugin_config, source


def _unknown_keys(model: type[BaseModel], table: dict[str, Any], path: str = "") -> list[str]:
    """Keys of ``table`` (dotted, nested tables included) that a model not forbidding extras
    would silently accept; a model that forbids them has pydantic report its own."""
    forbids = model.model_config.get("extra") == "forbid"
    fields = {field.alias or name: field for name, field in model.model_fields.items()}
    fields.update(model.model_fields)
    unknown = []
    for key, value in table.items():
        field = fields.get(key)
        if field is None:
            if not forbids:
                unknown.append(f"{path}{key}")
            continue
        nested = _model_of(field.annotation)
        if nested is not None and isinstance(value, dict):
            unknown += _unknown_keys(nested, value, f"{path}{key}.")
    return unknown


def _unknown(prefix: str, key: str, known: Iterable[str]) -> str:
    """``unknown key `PATH`; did you mean `KEY`?`` (the closest known key), else how to fix it."""
    from ralph.spelling import closest

    found = closest(key.rsplit(".", 1)[-1], known)
    return f"unknown key `{prefix}{key}`; " + (f"did you mean `{found}`?" if found else "remove it or check its spelling")


def _known_at(model: type[BaseModel], dotted: str) -> set[str]:
    """The keys the table at ``dotted``'s parent accepts (``limits.cpu``: the fields of ``limits``'s model)."""
    for part in dotted.split(".")[:-1]:
        field = model.model_fields.get(part)
        nested = _model_of(field.annotation) if field is not None else None
        if nested is None:
            return set()
        model = nested
    return {field.alias or name for name, field in model.model_fields.items()}


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model a field holds (``Limits`` for ``Limits`` or ``Limits | None``), or None."""
    from typing import get_args

    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _explain(
    exc: ValidationError, where: str, prefix: str, env_values: dict[str, Any], cli: dict[str, Any],
    model: type[BaseModel] = RalphConfig,
) -> list[str]:
    """One line per problem: ``file: `tool.ralph.review_cap` must be ... (got 0)``."""
    lines = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"])
        top = str(error["loc"][0]) if error["loc"] else ""
        if error["type"] == "extra_forbidden":
            lines.append(f"{where}: {_unknown(prefix, key, _known_at(model, key))}")
            continue
        origin = where
        if cli.get(top) is not None:
            origin = f"command line option for {top.replace('_', '-')}"
        elif top in env_values:
            origin = f"environment variable {ENV_PREFIX}{top.upper()}"
        got = error.get("input")
        lines.append(f"{origin}: `{prefix}{key}` {_describe(error)} (got {got!r})")
    return lines


def _describe(error: Any) -> str:
    ctx = error.get("ctx") or {}
    kind = error["type"]
    if kind == "greater_than_equal":
        return f"must be an integer >= {ctx.get('ge')}"
    if kind == "greater_than":
        return f"must be a number > {ctx.get('gt')}"
    if kind in {"int_parsing", "int_type", "int_from_float"}:
        return "must be an integer"
    if kind in {"float_parsing", "float_type"}:
        return "must be a number"
    if kind in {"string_type"}:
        return "must be a string"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}"
    if kind in {"bool_parsing", "bool_type"}:
        return "must be true or false"
    if kind == "value_error" and ctx.get("error") is not None:
        return str(ctx["error"])  # a validator's own words, as it wrote them
    return error.get("msg", "is invalid").lower()
