"""The ``ralph`` command line.

Only click is imported at start-up; plugins, pydantic and everything heavy are
imported inside the commands that need them, so ``ralph --help`` stays fast
and a broken plugin cannot make it unusable.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ralph import __version__
from ralph.cli.common import echo, fail, handles_errors, project_dir_option

if TYPE_CHECKING:
    from ralph.plugin.commands import CommandTable, PluginCommand

EPILOG = """\b
Typical session:
  ralph init --name my-feature --commit   # scaffold ralph/ (prd.md, tasks.json, ...)
  $EDITOR ralph/prd.md ralph/tasks.json   # or: ralph plan; then commit
  ralph run --dry-run                     # see the branch, mode, story and prompt
  ralph run                               # loop until every story is approved
  ralph status                            # what the last run did
\b
Exit codes of `ralph run`: 0 complete, 1 iterations exhausted or no story
selectable, 2 usage or configuration error, 3 finished with failed stories,
4 global hard timeout, 5 budget reached, 6 paused on the agent's usage limit
or the API's rate limit, 7 the agent failed repeatedly with the same error
(or every command it ran failed, changing nothing, that many iterations in a
row), 8 only stories waiting for a person's answer are left (ralph answer),
130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
"""


RUN_EPILOG = """\b
Exit codes: 0 complete, 1 iterations exhausted or no story selectable,
2 usage or configuration error, a failed pre-flight check or a plugin that
did not load, 3 finished with failed stories, 4 global hard timeout, 5 budget
reached (--max-cost, --max-quota), 6 paused on the agent's usage limit or the API's rate limit, 7 the
agent failed repeatedly with the same error (or every command it ran failed,
changing nothing, that many iterations in a row; the first error is printed),
8 only stories waiting for a person's answer are left (the agent asked with
`ralph ask`; answer with `ralph answer STORY "ANSWER"`, then run again),
130 interrupted (Ctrl-C), 143 terminated (SIGTERM).
"""


class RalphGroup(click.Group):
    """ralph's own commands, plus those plugins declare in the ``ralph.commands`` entry-point group.

    ralph's own commands are found without looking at any plugin.  The plugin
    commands are read from installed metadata only when the full list is
    needed (``ralph --help``) or a name is not one of ralph's own; a command's
    module is imported for its help line or when it runs, and running it first
    loads its plugin (the API version check).  Why metadata and not a hook:
    ralph/plugin/commands.py.  A plugin cannot shadow ralph's own commands.
    """

    table: CommandTable | None = None
    loaded: dict[str, click.Command | None]

    def _table(self) -> CommandTable:
        if self.table is None:
            from ralph.plugin.commands import plugin_commands

            self.table = plugin_commands(reserved=set(self.commands))
            self.loaded = {}
            for line in self.table.warnings:
                echo(f"ralph: warning: {line}", err=True)
        return self.table

    def _load(self, name: str) -> click.Command | None:
        """The click command of plugin command ``name`` (None, with a warning, when it does not import)."""
        table = self._table()
        if name not in self.loaded:
            declared = table.commands[name]
            try:
                self.loaded[name] = declared.load()
            except Exception as exc:  # noqa: BLE001 - a broken plugin must not break the command line
                self.loaded[name] = None
                echo(
                    f"ralph: warning: plugin {declared.describe_plugin()} could not add its command {name!r}: "
                    f"{type(exc).__name__}: {exc}",
                    err=True,
                )
        return self.loaded[name]

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Run the command line: every error ends in one line on stderr and an exit code, never a
        traceback — click's own usage errors (exit 2), a path that cannot be read or written (exit 2),
        and an error no command expected (exit 2, its traceback kept in a file it names)."""
        if kwargs.get("standalone_mode", True) is False:
            return super().main(*args, **kwargs)
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except click.exceptions.UsageError as exc:
            where = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
            fail(f"{exc.format_message()}{where}", exc.exit_code)
        except click.ClickException as exc:
            fail(exc.format_message(), exc.exit_code)
        except click.exceptions.Abort:
            echo("Aborted!", err=True)
            sys.exit(1)
        except OSError as exc:
            import errno

            if exc.errno == errno.EPIPE:  # the reader went away (`ralph status | head`): as click does
                from click.utils import PacifyFlushWrapper

                sys.stdout = PacifyFlushWrapper(sys.stdout)  # type: ignore[assignment,operator]
                sys.stderr = PacifyFlushWrapper(sys.stderr)  # type: ignore[assignment,operator]
                sys.exit(1)
            from ralph.cli.common import os_error_line

            fail(os_error_line(exc), 2)
        except Exception as exc:  # noqa: BLE001 - a bug: one line and where its traceback is
            from ralph.cli.common import report_crash

            report_crash(exc)
        if isinstance(code, int) and code:
            sys.exit(code)
        return code

    def forget_plugin_commands(self) -> None:
        """Read plugins' commands afresh on the next lookup (tests install plugins in-process)."""
        self.table = None

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command name, plugins' included (their plugins are not imported)."""
        return sorted({*self.commands, *self._table().commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """ralph's own command ``cmd_name``, else a plugin's (its module imported, not its plugin)."""
        own = self.commands.get(cmd_name)
        if own is not None or cmd_name not in self._table().commands:
            return own
        return self._load(cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """The command to run; a plugin's runs only when its plugin loads (else exit 2 naming it)."""
        name = args[0] if args else ""
        if name in self.commands:
            return super().resolve_command(ctx, args)
        table = self._table()
        if name in table.switched_off:
            declared, reason = table.switched_off[name]
            _fail_plugin(f"`ralph {name}` comes from plugin {declared.describe_plugin()}, which {reason}")
        if name in table.commands:
            _require_plugin(table.commands[name])
            if self._load(name) is None:
                _fail_plugin(f"`ralph {name}` could not be loaded (the warning above says why)")
        return super().resolve_command(ctx, args)


def _require_plugin(declared: PluginCommand) -> None:
    """Load the plugin behind a command as every command loading plugins would; exit 2 if it does not load."""
    from ralph.errors import RalphError
    from ralph.plugin.manager import PluginHost

    try:
        host = PluginHost(only={declared.plugin})
    except RalphError as exc:
        _fail_plugin(f"`ralph {declared.name}` comes from plugin {declared.describe_plugin()}, which did not load: {exc}")
    for info in host.infos:
        if info.name == declared.plugin and info.error:
            _fail_plugin(f"`ralph {declared.name}` comes from plugin {info.describe()}, which did not load: {info.status}")


def _fail_plugin(message: str) -> None:
    from ralph.errors import PluginError

    fail(PluginError(message))


@click.group(cls=RalphGroup, epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ralph")
def cli() -> None:
    """Run an AI coding agent in a Ralph loop: fresh context every iteration,
    a fresh-context review of every story, and a loop that verifies the agent's
    claims itself."""


class RegistryOption(click.Option):
    """An option whose help ends with the names registered in this environment.

    The names come from the distributions' declarations (ralph/plugin/declared.py): no plugin is
    imported for them, except a third-party plugin that declares nothing (it is asked, so the list
    stays complete).  Read only when the help is shown (``ralph run --help``).
    """

    def __init__(self, *args: Any, registry: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.registry = registry

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        record = super().get_help_record(ctx)
        if record is None:
            return None
        try:
            names = _registered_names(self.registry)
        except Exception:  # a broken plugin must not break --help
            return record
        return record[0], f"{record[1]}  Registered: {', '.join(names)}."


def _registered_names(registry: str) -> list[str]:
    """The names of one registry (``runners`` ...): declared ones, and those of plugins declaring nothing."""
    from ralph.plugin.declared import declarations

    found = declarations()
    names = set(found.of(registry))
    if found.silent:
        names.update(getattr(_help_host(found.silent), registry).names())
    return sorted(names)


def _help_host(only: list[str]) -> Any:
    """One plugin host of the plugins ``only`` for all the options of one help page (loaded on first use)."""
    global _HELP_HOST
    if _HELP_HOST is None:
        from ralph.plugin.manager import PluginHost

        _HELP_HOST = PluginHost(only=set(only))
    return _HELP_HOST


_HELP_HOST: Any = None




@cli.command()
@project_dir_option
@click.option("--name", help="Feature name: sets tasks.json branchName to ralph/<name> (the branch `ralph run` works on).")
@click.option("--ralph-dir", help="Directory to create (or complete) inside the project.  [default: ralph]")
@click.option("--force", is_flag=True, help="Replace prompt.md, prd.md, tasks.json and progress.txt if present, keeping a backup of each.")
@click.option("--commit", is_flag=True, help="Commit what init wrote (and .gitignore), nothing else.")
@handles_errors
def init(project_dir: Path, name: str | None, ralph_dir: str | None, force: bool, commit: bool) -> None:
    """Scaffold a Ralph loop in a project: prd.md, tasks.json, progress.txt, prompt.md.

    The project must be a git repository (ralph commits every iteration).  In a
    directory that already holds a loop (e.g. snarktank/ralph's prd.json,
    prompt.md and progress.txt) only what is missing is added, and what was
    kept is named; no second task list is created beside an existing one.
    """
    from ralph.lifecycle.init import (
        check_repository, commit_init, init_project, next_steps, no_run_active, refuse_nested_loop,
    )
    from ralph.ralphfiles import KNOWN_LOOP_DIRS, holds_loop

    project_dir = project_dir.resolve()
    if not project_dir.is_dir():
        from ralph.errors import UsageError

        raise UsageError(f"project directory {project_dir} does not exist")
    check_repository(project_dir)
    refuse_nested_loop(project_dir)
    if project_dir != Path.cwd().resolve():
        echo(f"project: {project_dir}")
    if ralph_dir is None:
        ralph_dir = "ralph"
        found = [d for d in KNOWN_LOOP_DIRS if d != "ralph" and holds_loop(project_dir / d)]
        if found and not holds_loop(project_dir / "ralph"):
            from ralph.errors import UsageError

            raise UsageError(
                f"{project_dir / found[0]} already holds a Ralph loop; adopt it with "
                f"`ralph init --ralph-dir {found[0]}` (adds only what is missing) or run it as it is with "
                f"`ralph run --ralph-dir {found[0]}`; nothing was written"
            )
    with no_run_active(project_dir):
        result = init_project(project_dir, name=name, ralph_dir=ralph_dir, force=force)
        committed = commit_init(project_dir, result) if commit and (result.files_written or result.gitignore_changed) else None

    def rel(path: Path) -> str:
        return path.relative_to(project_dir).as_posix() if path.is_relative_to(project_dir) else str(path)

    for original, copy in result.backups:
        echo(f"backed up {rel(original)} to {rel(copy)}")
    for path in result.files_written:
        echo(f"wrote {rel(path)}")
    for path, why in result.kept:
        echo(f"kept {rel(path)}: {why}")
    if result.adopted_from:
        echo(f"took over {result.adopted_from}'s loop (its files are left as they are):")
        for line in result.imported:
            echo(f"  - {line}")
    if result.gitignore_changed:
        echo("added .ralph-active to .gitignore")
    if not result.files_written:
        echo(f"nothing to add: {rel(result.ralph_dir)}/ already holds a complete loop")
    if committed is not None:
        echo(f"committed what init wrote: {committed} \"ralph init: {result.project_name}\"")
    echo("\nNext steps:")
    for number, step in enumerate(next_steps(result, committed=committed is not None), 1):
        echo(f"  {number}. {step}")


@cli.command(epilog=RUN_EPILOG)
@project_dir_option
@click.option("-n", "--max-iterations", type=click.IntRange(min=1), help="Iterations before giving up.  [default: 15]")
@click.option("--ralph-dir", help="The ralph directory inside the project.  [default: ralph]")
@click.option("--prd", "prd", metavar="N", help="Use the folder .ralph/PRD-N/ as the ralph directory (one folder per PRD, numbered).")
@click.option("-m", "--model", help="Model name passed to the agent (e.g. opus, sonnet).")
@click.option("--runner", cls=RegistryOption, registry="runners", help="Where the agent runs.  [default: auto]")
@click.option("--sandbox", "sandbox", flag_value="docker-sandbox", help="Alias of --runner docker-sandbox.")
@click.option("--no-sandbox", "sandbox", flag_value="direct", help="Alias of --runner direct.")
@click.option("--agent", cls=RegistryOption, registry="agents", help="Agent CLI plugin.  [default: claude]")
@click.option("--review-agent", cls=RegistryOption, registry="agents", help="Agent CLI plugin of review iterations (e.g. codex).  [default: --agent]")
@click.option("--policy", cls=RegistryOption, registry="policies", help="Mode policy: how modes and stories are chosen.  [default: review]")
@click.option("--skip-review", is_flag=True, help="No review cycle: implement iterations set passes=true.")
@click.option("--review-cap", type=click.IntRange(min=1), help="Reviews per story before auto-approval.  [default: 5]")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), help="Seconds per iteration.  [default: 3600]")
@click.option(
    "--iteration-limit",
    type=click.IntRange(min=1),
    help="Raise the runaway guard: --max-iterations above this (default 100) is refused.",
)
@click.option("--max-cost", type=click.FloatRange(min=0, min_open=True), help="Stop when the run's cost reaches this many USD (metered from the model traffic; else the agent's reports).")
@click.option(
    "--max-quota",
    metavar="PERCENT",
    help="Stop (exit 5) when this run has used this percentage of a subscription's usage window, from the API's own "
    "figures (the meter): 20 for every window, or per window 5h=50,7d=10.",
)
@click.option(
    "--refuse-api-billing",
    is_flag=True,
    help="Do not start when an API key where the agent runs would bill the API although you are logged in with a "
    "subscription (api_billing = \"refuse\"; the default is a warning).",
)
@click.option(
    "--max-wait",
    type=click.FloatRange(min=0, min_open=True),
    help="Longest wait, in seconds, for a usage-limit reset or rate-limit backoff before exiting (6) with a resume hint.  [default: 21600]",
)
@click.option("--no-live", is_flag=True, help="Plain status lines even on a terminal (no live footer).")
@click.option("--resume", "rerun", flag_value="resume", help="Continue with the state an interrupted run left.")
@click.option("--fresh", "rerun", flag_value="fresh", help="Archive an interrupted run's state and start over.")
@click.option(
    "--timeout-multiplier", type=click.FloatRange(min=0, min_open=True), help="Multiply every timeout (complex tasks)."
)
@click.option("--story", "story", metavar="ID", help="Work on this story alone (its dependencies must be done); same checks as a full run.")
@click.option("--dry-run", is_flag=True, help="Show the mode, story and rendered prompt; run nothing.")
@click.option("-q", "--quiet", "output", flag_value="quiet", help="Only status lines and the summary.")
@click.option("-v", "--verbose", "output", flag_value="verbose", help="Also tool results and raw events.")
@click.option("--parallel", is_flag=True, help="Run every .ralph/PRD-N/ folder (or, with --groups, story group) in its own git worktree, concurrently; never merges.")
@click.option("--groups", is_flag=True, help="With --parallel: split one task list into independent story groups (dependsOn components).")
@click.option(
    "--engine",
    metavar="NAME",
    help="With --parallel: where the loops run: worktrees (local git worktrees, the default) or a fleet engine such as ray (one loop per node of a Ray cluster; see docs/ray.md).",
)
@handles_errors
def run(
    project_dir: Path,
    max_iterations: int | None,
    ralph_dir: str | None,
    prd: str | None,
    model: str | None,
    runner: str | None,
    sandbox: str | None,
    agent: str | None,
    review_agent: str | None,
    policy: str | None,
    skip_review: bool,
    review_cap: int | None,
    timeout: float | None,
    iteration_limit: int | None,
    max_cost: float | None,
    max_quota: str | None,
    refuse_api_billing: bool,
    max_wait: float | None,
    no_live: bool,
    rerun: str | None,
    timeout_multiplier: float | None,
    dry_run: bool,
    output: str | None,
    story: str | None = None,
    parallel: bool = False,
    groups: bool = False,
    engine: str | None = None,
) -> None:
    """Run the loop until every story is implemented, reviewed and approved.

    Each iteration starts the agent afresh with the prompt for one story in
    one mode (implement, review or review-fix).  After every iteration the loop
    validates the task list itself and undoes illegal review transitions.
    """
    from ralph.errors import UsageError
    from ralph.session import open_session

    # -- ralph run --parallel (ralph/lifecycle/parallel.py): one child `ralph run` per worktree --
    if parallel or groups or engine:
        if not parallel:
            flag = "--groups" if groups else "--engine"
            raise UsageError(f"{flag} goes with --parallel (ralph run --parallel {flag} ...)")
        from ralph.lifecycle.parallel import passthrough_args, run_parallel

        ctx = click.get_current_context()
        child_args = passthrough_args(ctx, {"project_dir", "ralph_dir", "prd", "parallel", "groups", "dry_run", "engine"})
        sys.exit(run_parallel(project_dir, child_args, groups=groups, ralph_dir=ralph_dir, prd=prd, dry_run=dry_run,
                              engine=engine))
    # -- end of --parallel --

    if runner and sandbox and runner != sandbox:
        raise UsageError(f"--runner {runner} contradicts --{'no-' if sandbox == 'direct' else ''}sandbox")
    if skip_review and policy and policy != "skip-review":
        raise UsageError(f"--skip-review contradicts --policy {policy}")
    if prd is not None:
        if ralph_dir:
            raise UsageError("--prd and --ralph-dir both name the ralph directory; give one")
        from ralph.lifecycle.plan import prd_dir

        ralph_dir = str(prd_dir(project_dir.resolve(), prd, must_exist=True))
    overrides = {
        "max_iterations": max_iterations,
        "ralph_dir": ralph_dir,
        "model": model,
        "runner": runner or sandbox,
        "agent": agent,
        "review_agent": review_agent,
        "policy": "skip-review" if skip_review else policy,
        "review_cap": review_cap,
        "timeout": timeout,
        "iteration_limit": iteration_limit,
        "output": output,
        "timeout_multiplier": timeout_multiplier,
        "max_cost": max_cost,
        "max_quota": max_quota,
        "api_billing": "refuse" if refuse_api_billing else None,
        "usage_limit_max_wait": max_wait,
        "live": False if no_live else None,
    }
    if story is not None and parallel:
        raise UsageError("--story runs one story; it does not go with --parallel")
    session = open_session(project_dir.resolve(), overrides, strict=True, local_plugins=True)
    from ralph.loop.runcontext import RunOptions

    options = RunOptions(rerun=rerun, only_story=story)
    loop = _build_loop(session, {"runner": runner or sandbox, "agent": agent, "policy": policy}, options)
    if dry_run:
        _print_dry_run(loop)
        return
    result = loop.run()
    sys.exit(result.exit_code)


def _build_loop(session: Any, from_cli: dict[str, str | None], options: Any) -> Any:
    """``session.build_loop(options)``; an unknown plugin name says where it was set (flag, env var, file)."""
    from ralph.errors import PluginError
    from ralph.session import where_named

    try:
        return session.build_loop(options)
    except PluginError as exc:
        raise where_named(exc, session.settings, from_cli) from None


def _print_dry_run(loop: Any) -> None:
    from ralph.loop.opening import uncommitted_warning
    from ralph.loop.start import BUILTIN_PROMPT_NOTE, unselectable_reason, work_branch_plan

    selection, prompt, tasks = loop.dry_run()
    echo(f"runner:  {loop.runner.name}" + (f" (fallback: {loop.runner.fallback_reason})" if loop.runner.fallback_reason else ""))
    echo(f"agent:   {loop.agent.name}" + (f" (reviews: {loop.review_agent.name})" if loop.review_agent is not loop.agent else ""))
    echo(f"policy:  {loop.policy.name}")
    for check in loop.warnings:
        echo(f"warning: {check.what}" + (f"; fix: {check.fix}" if check.fix else ""), err=True)
    for check in loop.preflight_checks():
        if check.ok is not True:
            stop = " (ralph run would stop here)" if check.ok is False else ""
            fix = f"; fix: {check.fix}" if check.fix else ""
            echo(f"warning: pre-flight: {check.what}{fix}{stop}", err=True)
    plan = work_branch_plan(loop.project_dir, tasks.branchName)
    if plan is not None:
        echo(f"branch:  {tasks.branchName} (`ralph run` starts by {plan[1]})")
    if loop.options.only_story:
        echo(f"only:    {loop.options.only_story} (--story)")
    if loop.prompt is not None and loop.prompt.builtin:
        from ralph.loop.prompt import relative_dir

        echo("note:    " + BUILTIN_PROMPT_NOTE.format(dir=relative_dir(loop.ralph_dir, loop.project_dir)))
    dirty = uncommitted_warning(loop.project_dir, loop.config)
    if dirty is not None:
        echo(f"ralph: warning: {dirty.what} (or set dirty_start = \"stash\")", err=True)
    if selection is None:
        if loop.is_complete(tasks):
            state = f"{loop.options.only_story} is complete" if loop.options.only_story else "complete"
        else:
            state = "no story can be selected: " + unselectable_reason(tasks, loop.policy)
        echo(f"nothing to run: {state}")
        return
    echo(f"mode:    {selection.mode}")
    echo(f"story:   {selection.story_id} ({selection.reason})")
    echo("\n--- prompt (iteration 1) ---")
    echo(prompt)


@cli.command()
@project_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("-f", "--follow", is_flag=True, help="Follow the latest run live (the same view as `ralph run`) until it ends.")
@click.option("--no-live", is_flag=True, help="With --follow: plain lines even on a terminal.")
@handles_errors
def status(project_dir: Path, as_json: bool, follow: bool, no_live: bool) -> None:
    """Show what the last `ralph run` in this project did (or is doing).

    With --follow, show it as it goes, read from the run's event log: a run
    started in another terminal, in the background or in the sandbox.
    """
    from ralph.configfile import state_dir_setting

    project = project_dir.resolve()
    state_dir = state_dir_setting(project)
    if follow:
        from ralph.lifecycle.follow import follow_run

        sys.exit(follow_run(project, live=not no_live, state_dir=state_dir))
    from ralph.lifecycle.status import show_status

    echo(show_status(project, as_json=as_json, state_dir=state_dir))


@cli.command()
@project_dir_option
@click.argument("run", required=False)
@click.argument("number", required=False, type=click.IntRange(min=1))
@handles_errors
def restore(project_dir: Path, run: str | None, number: int | None) -> None:
    """Bring back work the loop stashed or rolled back, from the run directory's copy.

    RUN is a run directory name (see `ralph status`; default: the latest run that saved
    work); NUMBER picks one of its copies (default: the first, your work from before the
    run).  Runs `git apply --3way PATCH`, which you can also run yourself.
    """
    from ralph.configfile import state_dir_setting
    from ralph.loop.savedwork import restore as restore_work
    from ralph.lifecycle.status import run_with_saved_work

    project = project_dir.resolve()
    echo(restore_work(project, run_with_saved_work(project, run, state_dir_setting(project)), number))


@cli.command()
@click.option("--dir", "directory", type=click.Path(file_okay=False, path_type=Path), help="Where to create the example project (new or empty).  [default: a temporary directory]")
@click.option("--agent", type=click.Choice(["auto", "claude", "codex", "replay"]), default="auto", show_default=True, help="claude / codex: the real Claude Code / Codex CLI against a scripted local model; replay: the scripted agent.")
@handles_errors
def demo(directory: Path | None, agent: str) -> None:
    """Run a real loop on a small example project with a SCRIPTED model.

    Needs no credentials and no network.  It goes through implement, review
    (changes requested), review-fix and approval, with real git commits and the
    loop's own checks.  Uses the real Claude Code CLI when installed (pip
    install claude-agent-sdk), else the replay agent; --agent codex drives the
    real Codex CLI (pip install openai-codex-cli-bin) against a scripted
    Responses API server.
    """
    from ralph.lifecycle.demo import run_demo

    sys.exit(run_demo(directory, agent, echo))


@cli.command()
@handles_errors
def plugins() -> None:
    """List every plugin: name, what it provides (commands included), distribution, version and status.

    Exit 1 when a plugin did not load (FAILED or INCOMPATIBLE, with the error).
    """
    from ralph.plugin.commands import plugin_commands
    from ralph.plugin.manager import PluginHost

    host = PluginHost()
    provided: dict[str, list[str]] = {}
    for registry in (host.runners, host.agents, host.policies, host.stores, host.gates, host.fleet_engines):
        for name, provider in registry.providers.items():
            plugin = provider.split("'")[1] if "'" in provider else provider
            provided.setdefault(plugin, []).append(f"{registry.kind} {name}")
    commands = plugin_commands(reserved=set(cli.commands))
    for info in host.infos:
        provided.setdefault(info.name, []).extend(f"command {name}" for name in commands.of_plugin(info.name))
    rows = [("plugin", "provides", "distribution", "version", "status")]
    for info in host.infos:
        state = info.status
        what = ", ".join(provided.get(info.name, []) + _roles(host, info.name)) or "-"
        rows.append((info.name, what, info.distribution, info.version, state))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        echo("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4])
    for problem in host.declaration_problems():
        echo(f"ralph: warning: {problem}", err=True)
    if host.failures:
        sys.exit(1)


@cli.group("plugin")
def plugin_group() -> None:
    """The Claude Code plugin bundle (hooks + ralph-plan skill) for interactive use."""


@plugin_group.command("export")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite an existing bundle in DIRECTORY.")
@handles_errors
def plugin_export(directory: Path, force: bool) -> None:
    """Write the bundle to DIRECTORY: a marketplace with the `ralph` plugin.

    \b
    Then, in Claude Code:
      /plugin marketplace add DIRECTORY
      /plugin install ralph@ralph-marketplace
    or for one session: claude --plugin-dir DIRECTORY/ralph
    """
    from ralph.hooks.bundle import export_bundle

    for path in export_bundle(directory.resolve(), force=force):
        echo(f"wrote {path}")
    echo(f"\nUse it: claude --plugin-dir {directory.resolve() / 'ralph'}  (or /plugin marketplace add {directory.resolve()})")


ROLE_OF_HOOK = {
    "ralph_validate": "validator",
    "ralph_loop_event": "reporter",
    "ralph_pre_tool_use": "guard",
    "ralph_post_tool_use": "monitor",
    "ralph_session_start": "session hook",
    "ralph_user_prompt_submit": "prompt hook",
    "ralph_prompt_context": "prompt context",
    "ralph_preflight": "pre-flight check",
}


def _roles(host: Any, plugin_name: str) -> list[str]:
    """What a plugin does beyond registering named things (validator, reporter ...)."""
    plugin = host.pm.get_plugin(plugin_name)
    if plugin is None:
        return []
    return [role for hook, role in ROLE_OF_HOOK.items() if hasattr(plugin, hook)]


def _register_command_modules() -> None:
    """Commands defined in their own modules (each imports only click at import time)."""
    from ralph.cli.doctor import doctor
    from ralph.cli.lifecycle import COMMANDS
    from ralph.cli.person import COMMANDS as PERSON_COMMANDS
    from ralph.cli.serve import serve
    from ralph.cli.worktrees import worktrees

    for command in (*COMMANDS, *PERSON_COMMANDS, doctor, serve, worktrees):
        cli.add_command(command)


_register_command_modules()


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="ralph")


if __name__ == "__main__":
    main()
