"""Every hook is called through pluggy: wrappers, ordering, which plugin raised, tracing.

The unit tests register plugins in code; the last tests install a separate distribution
(tests/fakedists.py) and run the real ``ralph`` command.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

from ralph import hookimpl
from ralph.contracts import Denial, LoopEvent, Violation
from ralph.errors import PluginError
from ralph.plugin.calls import flatten, raised_by, trace_calls, traced_hooks
from ralph.plugin.manager import PluginFailure, PluginHost
from ralph.testing import RalphProject, ReplayScript, commit, say, set_fields, story
from tests.fakedists import FakeDists


class Strict:
    """A validator that always finds something."""

    @hookimpl
    def ralph_validate(self, context: Any) -> list[Violation]:
        return [Violation("strict", "always wrong")]


class Lenient:
    """A wrapper around every other validator: drops ``strict``'s errors, adds what it saw."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    @hookimpl(wrapper=True)
    def ralph_validate(self, context: Any) -> Generator[None, list[list[Violation]], list[list[Violation]]]:
        answers = yield
        self.seen = answers
        kept = [[v for v in answer if v.check != "strict"] for answer in answers]
        return [*kept, [Violation("lenient", f"{len(answers)} answers", severity="warning")]]


def host_of(*plugins: object, environ: dict[str, str] | None = None) -> PluginHost:
    return PluginHost(extra_plugins=plugins, load_entry_points=False, environ=environ or {})


def test_a_wrapper_validator_sees_every_answer_and_its_answer_counts() -> None:
    lenient = Lenient()
    host = host_of(Strict(), lenient)
    violations = host.validate(object())  # type: ignore[arg-type]
    assert lenient.seen == [[Violation("strict", "always wrong")]]
    assert violations == [Violation("lenient", "1 answers", severity="warning")]


def test_a_wrapper_may_answer_the_items_themselves() -> None:
    class Flat:
        @hookimpl(wrapper=True)
        def ralph_validate(self, context: Any) -> Generator[None, list[list[Violation]], list[Violation]]:
            answers = yield
            return [v for answer in answers for v in answer] + [Violation("flat", "added")]

    assert [v.check for v in host_of(Strict(), Flat()).validate(object())] == ["strict", "flat"]  # type: ignore[arg-type]


def test_a_guard_wrapper_sees_the_other_guards_denials() -> None:
    from ralph.hooks.answers import _collect

    class Deny:
        @hookimpl
        def ralph_pre_tool_use(self, event: Any) -> list[Denial]:
            return [Denial("no", "never")]

    class Softer:
        @hookimpl(wrapper=True)
        def ralph_pre_tool_use(self, event: Any) -> Generator[None, list[list[Denial]], list[list[Denial]]]:
            answers = yield
            return [[Denial(d.rule, d.reason + " (softened)") for d in answer] for answer in answers]

    host = host_of(Deny(), Softer())
    denials = _collect(host, host.pm.hook.ralph_pre_tool_use, "guard", object())  # type: ignore[arg-type]
    assert denials == [Denial("no", "never (softened)")]


def test_tryfirst_and_trylast_order_the_collected_answers() -> None:
    def validator(name: str, **options: bool) -> object:
        class One:
            @hookimpl(**options)
            def ralph_validate(self, context: Any) -> list[Violation]:
                return [Violation(name, name)]

        return One()

    host = host_of(validator("last", trylast=True), validator("plain"), validator("first", tryfirst=True))
    assert [v.check for v in host.validate(object())] == ["first", "plain", "last"]  # type: ignore[arg-type]


# -- which plugin raised ----------------------------------------------------------------------


class Exploding:
    @hookimpl
    def ralph_validate(self, context: Any) -> list[Violation]:
        raise ValueError("inner exploded")


def test_the_plugin_that_raised_is_named_even_through_a_wrapper() -> None:
    class PassThrough:
        @hookimpl(wrapper=True)
        def ralph_validate(self, context: Any) -> Generator[None, list[Any], list[Any]]:
            return (yield)

    host = host_of(Exploding(), PassThrough(), Strict())
    with pytest.raises(PluginFailure) as error:
        host.validate(object())  # type: ignore[arg-type]
    assert error.value.name == "Exploding" and "inner exploded" in str(error.value)


def test_a_wrapper_raising_its_own_error_is_named() -> None:
    class Raising:
        @hookimpl(wrapper=True)
        def ralph_validate(self, context: Any) -> Generator[None, list[Any], list[Any]]:
            yield
            raise RuntimeError("wrapper exploded")

    host = host_of(Strict(), Raising())
    with pytest.raises(PluginFailure) as error:
        host.validate(object())  # type: ignore[arg-type]
    assert error.value.name == "Raising" and "wrapper exploded" in str(error.value)


def test_two_instances_of_one_class_are_told_apart() -> None:
    class Picky:
        def __init__(self, fail: bool) -> None:
            self.fail = fail

        @hookimpl
        def ralph_validate(self, context: Any) -> list[Violation]:
            if self.fail:
                raise ValueError("this one")
            return []

    host = PluginHost(extra_plugins=[Picky(False), Picky(True), Picky(False)], load_entry_points=False, environ={})
    caller = host.pm.hook.ralph_validate
    with pytest.raises(ValueError) as error:
        caller(context=None)
    impl = raised_by(error.value, caller.get_hookimpls())
    assert impl is not None and impl.plugin.fail is True
    assert impl.plugin_name == "Picky-2"


def test_a_decorated_implementation_is_found_through_what_it_wraps() -> None:
    import functools

    def logged(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(function)
        def inner(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs)

        return inner

    class Quiet:
        @hookimpl
        @logged
        def ralph_validate(self, context: Any) -> list[Violation]:
            return []

    class Loud:
        @hookimpl
        @logged
        def ralph_validate(self, context: Any) -> list[Violation]:
            raise ValueError("decorated")

    host = host_of(Loud(), Quiet())
    with pytest.raises(PluginFailure) as error:
        host.validate(object())  # type: ignore[arg-type]
    assert error.value.name == "Loud"


def test_flatten_takes_lists_items_and_nothing() -> None:
    assert flatten([[1, 2], None, [], 3, (4,), [None]]) == [1, 2, 3, 4]
    assert flatten(None) == []  # type: ignore[arg-type]


# -- reporters --------------------------------------------------------------------------------


def recorder(name: str, log: list[str], fail_on: str | None = None, **options: bool) -> object:
    class Reporter:
        @hookimpl(**options)
        def ralph_loop_event(self, event: LoopEvent) -> None:
            log.append(f"{name}:{event.kind}")
            if event.kind == fail_on:
                raise RuntimeError(f"{name} exploded")

    Reporter.__name__ = name
    return Reporter()


def test_a_reporter_that_raises_is_silenced_and_the_others_still_get_the_event() -> None:
    log: list[str] = []
    warnings: list[str] = []
    host = host_of(recorder("c", log), recorder("b", log, fail_on="go"), recorder("a", log))  # called a, b, c
    host.warn = warnings.append
    host.emit(LoopEvent("go", {}))
    assert log == ["a:go", "b:go", "c:go", "a:reporter_disabled", "c:reporter_disabled"]
    assert list(host.silenced) == ["b"]
    assert len(warnings) == 1 and "reporter 'b' (registered in code) raised RuntimeError: b exploded" in warnings[0]
    log.clear()
    host.emit(LoopEvent("again", {}))
    assert log == ["a:again", "c:again"]


def test_two_reporters_raising_on_one_event_are_both_silenced() -> None:
    log: list[str] = []
    host = host_of(recorder("c", log, fail_on="go"), recorder("b", log), recorder("a", log, fail_on="go"))
    host.warn = lambda line: None
    host.emit(LoopEvent("go", {}))
    assert log[:3] == ["a:go", "b:go", "c:go"]
    assert sorted(host.silenced) == ["a", "c"]
    log.clear()
    host.emit(LoopEvent("again", {}))
    assert log == ["b:again"]


@pytest.mark.parametrize("hook", ["ralph_loop_event", "ralph_register_runners", "ralph_config_sections"])
def test_a_wrapper_where_none_can_wrap_is_refused_at_load(hook: str) -> None:
    argument = {"ralph_loop_event": "event", "ralph_register_runners": "register", "ralph_config_sections": ""}[hook]
    namespace: dict[str, Any] = {"hookimpl": hookimpl}
    exec(f"@hookimpl(wrapper=True)\ndef {hook}({argument}):\n    return (yield)\n", namespace)  # noqa: S102
    plugin = type("Wrapping", (), {hook: staticmethod(namespace[hook])})
    with pytest.raises(PluginError, match=f"implements {hook} as a wrapper, which ralph does not support"):
        PluginHost(extra_plugins=[plugin], load_entry_points=False, environ={})


def test_an_installed_plugin_wrapping_a_reporter_is_a_load_failure(fake_dists: FakeDists) -> None:
    fake_dists.add({"wrapping-reporter": "ralph_fake_wrapping"}, {"ralph_fake_wrapping": """
        from ralph.api import hookimpl

        @hookimpl(wrapper=True)
        def ralph_loop_event(event):
            return (yield)
    """})
    host = PluginHost(environ={})
    [info] = [info for info in host.infos if info.name == "wrapping-reporter"]
    assert info.status.startswith("INCOMPATIBLE: implements ralph_loop_event as a wrapper")
    assert host.pm.get_plugin("wrapping-reporter") is None


# -- tracing ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "hooks"),
    [("", None), ("0", None), ("1", set()), ("all", set()), ("validate, ralph_loop_event", {"ralph_validate", "ralph_loop_event"})],
)
def test_the_trace_setting(value: str, hooks: set[str] | None) -> None:
    assert traced_hooks({"RALPH_TRACE_PLUGINS": value}) == hooks


def test_tracing_prints_each_call_its_implementations_and_answer() -> None:
    host = host_of(Strict(), Lenient())
    out = io.StringIO()
    stop = trace_calls(host.pm, {"ralph_validate"}, out)
    host.validate("ctx\x1b[2J")  # type: ignore[arg-type]
    host.emit(LoopEvent("untraced", {}))
    stop()
    host.validate("after")  # type: ignore[arg-type]
    lines = out.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert lines[0] == "ralph: trace: ralph_validate(context='ctx\\x1b[2J') -> Lenient (wrapper), Strict"
    assert lines[1].startswith("ralph: trace: ralph_validate answered [[]")
    assert "lenient" in lines[1] and lines[1].endswith(" ms)")


def test_tracing_names_the_exception() -> None:
    host = host_of(Exploding())
    out = io.StringIO()
    trace_calls(host.pm, set(), out)
    with pytest.raises(PluginFailure):
        host.validate(None)  # type: ignore[arg-type]
    assert out.getvalue().splitlines()[-1].startswith("ralph: trace: ralph_validate raised ValueError: inner exploded (")


# -- through the real command, from a separate distribution ---------------------------------

STRICT_MODULE = """
    from ralph.api import Violation, hookimpl

    @hookimpl
    def ralph_validate(context):
        if context.mode is None:
            return []
        return [Violation("fake-strict", "this validator finds every iteration wrong")]
"""

WRAPPER_MODULE = """
    from ralph.api import Violation, hookimpl

    @hookimpl(wrapper=True)
    def ralph_validate(context):
        answers = yield
        kept = [[v for v in answer if v.check != "fake-strict"] for answer in answers]
        if context.mode is not None:
            kept.append([Violation("fake-wrapper", f"the wrapper saw {len(answers)} answers", severity="warning")])
        return kept
"""
"""Two plugins of one distribution: a validator failing every iteration, and a wrapper (around
every validator) that takes that one's errors out and says it ran."""


def test_a_wrapper_validator_from_another_distribution_works_in_a_real_run(
    fake_dists: FakeDists, ralph_project: RalphProject, tmp_path: Path
) -> None:
    fake_dists.add(
        {"fake-strict": "ralph_fake_strict", "fake-wrapper": "ralph_fake_wrapper"},
        {"ralph_fake_strict": STRICT_MODULE, "ralph_fake_wrapper": WRAPPER_MODULE},
        name="fake_validators",
    )
    ralph_project.write_stories([story("US-001")])
    replay = ReplayScript().extra_call("spec", None, say('```json\n{"verdict": "met", "unmet": [], "extra": []}\n```'))
    replay.iteration(1, set_fields("US-001", passes=True, notes="done"), commit("feat: [US-001] - a"), say("implemented"))
    env = {"RALPH_REPLAY_SCRIPT": str(replay.write(tmp_path / "script.json")), "PYTHONPATH": str(fake_dists.root),
           "RALPH_TRACE_PLUGINS": "ralph_validate"}
    command = ("run", "--runner", "direct", "--agent", "replay", "--skip-review", "-n", "1")
    result = ralph_project.run(*command, env=env)
    assert result.returncode == 0, result.stderr
    assert ralph_project.story("US-001")["passes"] is True
    seen = [e for e in ralph_project.events("violation") if e.get("check") == "fake-wrapper"]
    assert seen and all(e["severity"] == "warning" for e in seen), ralph_project.events("violation")
    assert not [e for e in ralph_project.events("violation") if e.get("check") == "fake-strict"]
    traced = [line for line in result.stderr.splitlines() if line.startswith("ralph: trace: ralph_validate(")]
    assert traced and all(line.endswith("-> fake-wrapper (wrapper), transitions, schema, invariants, git-clean, fake-strict")
                          for line in traced), traced  # the strict validator was called: the wrapper took its error out


def test_without_the_wrapper_the_strict_validator_fails_the_run(
    fake_dists: FakeDists, ralph_project: RalphProject, tmp_path: Path
) -> None:
    fake_dists.add({"fake-strict": "ralph_fake_strict"}, {"ralph_fake_strict": STRICT_MODULE}, name="fake_validators")
    ralph_project.write_stories([story("US-001")])
    replay = ReplayScript().extra_call("spec", None, say('```json\n{"verdict": "met", "unmet": [], "extra": []}\n```'))
    replay.iteration(1, set_fields("US-001", passes=True, notes="done"), commit("feat: [US-001] - a"), say("implemented"))
    env = {"RALPH_REPLAY_SCRIPT": str(replay.write(tmp_path / "script.json")), "PYTHONPATH": str(fake_dists.root)}
    alone = ralph_project.run("run", "--runner", "direct", "--agent", "replay", "--skip-review", "-n", "1", env=env)
    assert alone.returncode == 1, alone.stderr
    assert [e for e in ralph_project.events("violation") if e.get("check") == "fake-strict"]


def test_the_environment_turns_tracing_on(capsys: pytest.CaptureFixture[str]) -> None:
    PluginHost(extra_plugins=[Strict()], load_entry_points=False, environ={}).validate(None)  # type: ignore[arg-type]
    assert capsys.readouterr().err == ""
    host = PluginHost(extra_plugins=[Strict()], load_entry_points=False, environ={"RALPH_TRACE_PLUGINS": "1"})
    host.validate(None)  # type: ignore[arg-type]
    assert "ralph: trace: ralph_validate(context=None) -> Strict" in capsys.readouterr().err
