"""The person in the loop: ``ralph ask`` (run by the agent) and ``ralph answer`` (run by the person).

Only click is imported here; each command imports what it needs when it runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ralph.cli.common import echo, handles_errors, project_dir_option

__all__ = ["COMMANDS", "answer", "ask"]


@click.command("ask", context_settings={"ignore_unknown_options": True})
@click.argument("question", nargs=-1, required=True)
def ask(question: tuple[str, ...]) -> None:
    """Ask a person a question (run by the agent, inside a loop iteration).

    The running loop records QUESTION with the story and what the agent was
    doing, parks the story until a person answers (`ralph answer`) and goes on
    with the stories that do not depend on it.  End the session after asking.
    Exit 0: recorded; 1: the loop refused it (why is printed); 2: not inside a
    loop iteration.
    """
    from ralph.hooks.client import ask as send, environment

    code, line = send(" ".join(question), environment())
    echo(line, err=code != 0)
    sys.exit(code)


@click.command("answer")
@project_dir_option
@click.argument("story")
@click.argument("text", metavar="ANSWER")
@handles_errors
def answer(project_dir: Path, story: str, text: str) -> None:
    """Answer the question the agent asked about STORY (see `ralph status`).

    While a run goes on, the running loop takes the answer and STORY's next
    iteration has it in its prompt; after the run, the next `ralph run` does.
    Only your own processes can answer: not the agent's commands, which the
    loop refuses.  ANSWER "-" reads the answer from stdin.
    """
    from ralph.configfile import state_dir_setting
    from ralph.questions import answer as record

    if text == "-":
        text = sys.stdin.read()
    project = project_dir.resolve()
    done = record(project, story, text, state_dir=state_dir_setting(project))
    echo(done.message)


COMMANDS = (ask, answer)
