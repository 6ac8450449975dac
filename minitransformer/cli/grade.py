"""``grade``: score lesson notebooks with the lessons' own checkers. The grader lives with the
teaching harness; this module only gives it its place on the command line."""

from __future__ import annotations

from .common import add_common


def register(sub) -> None:
    from lessonkit.grade import add_arguments  # noqa: PLC0415  (the teaching harness, beside the package)

    p = sub.add_parser("grade", help="score lesson notebooks with the lessons' own checkers (this runs them)",
                       description="Run each notebook top to bottom in a fresh kernel, in a private folder, and "
                                   "judge its exercises in this process, on the notebook's inputs and on hidden ones "
                                   "(docs/teachers.md). This runs the notebooks' code with your permissions: grade in "
                                   "a container or under a throwaway account.")
    add_arguments(p)
    add_common(p, backend_option=False)
    p.set_defaults(handler=run)


def run(args) -> int:
    """The grader's own options (``grade.add_arguments``) are its request."""
    from lessonkit.grade import run as grade  # noqa: PLC0415  (the teaching harness)

    return grade(args)
