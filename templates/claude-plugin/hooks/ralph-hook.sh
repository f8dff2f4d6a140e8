#!/bin/sh
# ralph's hook client, run with the Python that has ralph installed, found when the hook runs: the
# interpreter of the `ralph` command on PATH, else python3.  No path of the machine that exported the
# bundle is written into it, so the bundle works wherever ralph is installed.  Without a Python, or
# without ralph, the action is allowed with a note on stderr: outside a loop a broken hook must never
# wedge a person's session (`ralph run` wires its own hooks, which fail closed).
here=${0%/*}
py=
ralph=$(command -v ralph 2>/dev/null) || ralph=
if [ -n "$ralph" ] && [ -r "$ralph" ]; then
    IFS= read -r first < "$ralph" || first=
    case $first in
        '#!/bin/sh'*)  # pip's form for a long interpreter path: '''exec' "PYTHON" "$0" "$@"
            py=$(sed -n "2s/^'''exec' \"\\(.*\\)\" \"\\\$0\" \"\\\$@\"\$/\\1/p" "$ralph" 2>/dev/null) ;;
        '#!'*) py=${first#??} ;;
    esac
fi
if [ -z "$py" ] || [ ! -x "$py" ]; then
    py=$(command -v python3 2>/dev/null) || py=
fi
if [ -z "$py" ]; then
    echo "ralph hook: no python3 found for ralph's hooks (action allowed): install ralph (pip install ralph-trustloop) so \`ralph\` is on PATH" >&2
    echo '{}'
    exit 0
fi
exec "$py" -S -P "$here/ralph_hook.py"
