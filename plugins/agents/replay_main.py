"""The replay agent's process: acts out one iteration of a script.

Run as ``python -m ralph_plugins.agents.replay_main --script S --iteration N --tasks T``;
reads the prompt on stdin (and records its first line in the result).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def say(text: str) -> None:
    emit({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": text}]}})


def set_fields(tasks_path: Path, story_id: str, fields: dict[str, Any]) -> None:
    data = json.loads(tasks_path.read_text(encoding="utf-8"))
    stories = data.get("userStories", [])
    for story in stories:
        if story.get("id") == story_id:
            story.update(fields)
            break
    else:
        stories.append({"id": story_id, **fields})
    tasks_path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def run_action(action: dict[str, Any], tasks_path: Path, state: dict[str, Any]) -> None:
    (kind, value), = action.items()
    if kind == "say":
        say(str(value))
        state["said"] = str(value)
    elif kind in {"write", "append"}:
        path = Path(value["path"])
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a" if kind == "append" else "w", encoding="utf-8") as handle:
            handle.write(value["content"])
        emit_tool("Write", {"file_path": str(path)})
    elif kind == "set":
        set_fields(tasks_path, value["story"], value["fields"])
        emit_tool("Edit", {"file_path": str(tasks_path), "story": value["story"]})
    elif kind == "run":
        emit_tool("Bash", {"command": value})
        subprocess.run(value, shell=True, check=False)
    elif kind == "commit":
        emit_tool("Bash", {"command": f"git add -A && git commit -m {value!r}"})
        subprocess.run(["git", "add", "-A"], check=True)
        subprocess.run(["git", "commit", "-q", "-m", value], check=True)
    elif kind == "sleep":
        time.sleep(float(value))
    elif kind == "cost":
        state["cost"] += float(value)
    elif kind == "exit":
        state["exit"] = int(value)
    else:
        raise SystemExit(f"replay: unknown action {kind!r}")


def emit_tool(name: str, tool_input: dict[str, Any]) -> None:
    emit(
        {
            "type": "assistant",
            "message": {"role": "assistant", "content": [{"type": "tool_use", "id": "replay", "name": name, "input": tool_input}]},
        }
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="replay")
    parser.add_argument("--script", required=True)
    parser.add_argument("--iteration", type=int, required=True)
    parser.add_argument("--tasks", required=True)
    parser.add_argument("--purpose", default="iteration")
    args = parser.parse_args(argv)
    prompt = sys.stdin.read() if not sys.stdin.isatty() else ""
    script = json.loads(Path(args.script).read_text(encoding="utf-8"))
    if args.purpose == "iteration":
        actions = script.get("iterations", {}).get(str(args.iteration), script.get("default", []))
    else:
        section = script.get(args.purpose, {})
        actions = section.get(str(args.iteration), section.get("default", []))
    emit({"type": "system", "subtype": "init", "model": "replay", "tools": [], "prompt_head": prompt[:80]})
    state: dict[str, Any] = {"cost": 0.0, "exit": 0, "said": ""}
    started = time.monotonic()
    for action in actions:
        run_action(action, Path(args.tasks), state)
    if actions:
        emit(
            {
                "type": "result",
                "subtype": "success",
                "is_error": state["exit"] != 0,
                "result": state["said"],
                "num_turns": len(actions),
                "total_cost_usd": state["cost"],
                "duration_ms": int((time.monotonic() - started) * 1000),
            }
        )
    return state["exit"]


if __name__ == "__main__":
    raise SystemExit(main())
