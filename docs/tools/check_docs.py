"""The docs say what runs: every ``a3c-ray ...`` command line in README.md, lab/README.md,
docs/*.md and the experiment logs in docs/log/ parses with the real command-line interface, as
every ``python -m lab ...`` line (the checkout's own measurements) parses with the lab's, and
every link and image path resolves.

    python docs/tools/check_docs.py        # what `make lint` runs; exit 1 with one line per problem

A command line holding a placeholder (``<...>``, ``...``, or an upper-case word such as ``RUN_DIR``
or ``N`` where a value goes) is left out: it is a form, not a command.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKOUT = ROOT
"""The checkout this script is in, whose ``lab`` package parses the ``python -m lab`` lines."""
COMMAND = re.compile(r"^\s*(?:\$\s+)?(?:a3c-ray|python -m a3c_ray|python -m lab)\s")
LAB = ["python", "-m", "lab"]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
PLACEHOLDER = re.compile(r"<[^>]*>|\.\.\.|^[A-Z][A-Z0-9_]*(?:=.*)?$")


def doc_files(root: Path = ROOT) -> list[Path]:
    docs, lab = root / "docs", root / "lab" / "README.md"
    return [
        root / "README.md",
        *([lab] if lab.is_file() else []),
        *sorted(docs.glob("*.md")),
        *sorted(docs.glob("log/*.md")),
    ]


def command_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, command) of each ``a3c-ray`` or ``python -m lab`` line inside the fenced code blocks of ``text``,
    with continuation lines joined and a trailing ``# comment`` removed."""
    lines = text.splitlines()
    fenced = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif fenced and COMMAND.match(line):
            start, joined = i + 1, line
            while joined.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                joined = joined.rstrip()[:-1] + " " + lines[i].strip()
            yield start, _strip_comment(joined.strip().removeprefix("$").strip())
        i += 1


def _strip_comment(line: str) -> str:
    """The line without a ``#`` comment that shlex would see (a ``#`` inside quotes stays)."""
    lex = shlex.shlex(line, posix=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    try:
        return shlex.join(list(lex))
    except ValueError:
        return line


def words(command: str) -> list[str] | None:
    """The arguments after the program, or None when the line is a form with placeholders."""
    try:
        parts = shlex.split(command)
    except ValueError:
        return None
    parts = parts[3:] if parts[:3] in (["python", "-m", "a3c_ray"], LAB) else parts[1:]
    cut = next((k for k, w in enumerate(parts) if w in ("|", "&", "&&", ";", ">", "2>&1")), None)
    parts = parts[:cut] if cut is not None else parts
    if any(PLACEHOLDER.search(w) for w in parts):
        return None
    return parts


def parse_problem(argv: list[str], lab: bool = False) -> str | None:
    """Why the real parser refuses ``argv`` (the lab's with ``lab``), or None when it parses."""
    from a3c_ray.commands.cli import build_parser
    from a3c_ray.errors import UsageError

    command = next((w for w in argv if not w.startswith("-")), None)
    if lab:
        if str(CHECKOUT) not in sys.path:
            sys.path.insert(0, str(CHECKOUT))  # the lab is the checkout's, never installed
        from lab.cli import build_parser as build_lab_parser
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # --help and --version print
            (build_lab_parser() if lab else build_parser(command)).parse_args(argv)
    except UsageError as e:
        return str(e)
    except SystemExit:  # --help and the like print and exit: they parse
        return None
    return None


def link_problems(path: Path, text: str) -> Iterator[str]:
    for n, line in enumerate(text.splitlines(), 1):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL, or an anchor in the same page
            local = (path.parent / target.split("#", 1)[0]).resolve()
            if not local.exists():
                yield f"{path.relative_to(ROOT)}:{n}: {target} does not exist"


def problems(root: Path = ROOT) -> tuple[list[str], int]:
    """Every problem, and how many command lines were checked."""
    found: list[str] = []
    checked = 0
    for path in doc_files(root):
        text = path.read_text()
        found += link_problems(path, text)
        for n, command in command_lines(text):
            argv = words(command)
            if argv is None:
                continue
            checked += 1
            problem = parse_problem(argv, lab=shlex.split(command)[:3] == LAB)
            if problem:
                found.append(f"{path.relative_to(root)}:{n}: `{command}`: {problem}")
    return found, checked


def main() -> int:
    found, checked = problems()
    for line in found:
        print(line)
    print(f"docs: {checked} command lines parse, links and images checked; {len(found)} problems")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
