"""``tasks``: the built-in tasks, each with its description, source and recipe, and what its model reads."""

from __future__ import annotations

from .common import add_common


def register(sub) -> None:
    p = sub.add_parser("tasks", help="list the built-in tasks")
    add_common(p, backend_option=False)
    p.set_defaults(handler=lambda args: run())


def run() -> int:
    from ..data.registry import TASKS  # noqa: PLC0415

    for task in TASKS.values():
        s = task.recipe.settings
        steps = f"until solved, at most {s.steps} steps" if s.stop_when_solved else f"{s.steps} steps"
        bpe = (f"; trains on byte-pair pieces, {task.bpe_merges} merges" if task.train_level == "bpe"
               else f"; --level bpe: {task.bpe_merges} merges" if task.bpe_merges else "")
        print(f"{task.name:<16} {task.description}  [{task.source}{'; ' + task.license if task.license else ''}; "
              f"recipe: preset {task.recipe.preset}, {steps}{bpe}]")
        if task.phrasing:
            print(f"{'':<16} its model reads {task.phrasing}")
    return 0
