"""train's checks against the checkpoint it resumes from, and its tokenization options: a resumed
run keeps its model, its seed and its tokenization, and an option that disagrees is refused."""

from __future__ import annotations

import shlex

from .common import CliError, about


def config_changes(assignments) -> dict:
    """``["P_drop=0", "positional=learned"]`` -> ``{"P_drop": 0.0, "positional": "learned"}``: the
    TransformerConfig fields of ``train --set FIELD=VALUE`` (``options.assign``, from the dataclass), each
    value parsed as its field's type. An unknown field, a field the data decides (``model.DATA_FIELDS``),
    a malformed assignment or a field given twice is a ValueError naming it; the values are checked
    together when the config is built (``TransformerConfig.__post_init__``)."""
    from ..model import DATA_FIELDS, TransformerConfig  # noqa: PLC0415
    from ..options import assign  # noqa: PLC0415

    return assign(TransformerConfig, assignments, noun="model field",
                  exclude=dict.fromkeys(DATA_FIELDS, "is set by the data (the vocabulary), not by hand"))


def model_changes(assignments) -> dict:
    """``config_changes`` of the --set options, a bad one named (``--set TEXT``)."""
    changes: dict = {}
    for text in assignments:
        with about(f"--set {text}"):
            ((name, value),) = config_changes([text]).items()
            if name in changes:
                raise ValueError(f"{name} is given twice")
            changes[name] = value
    return changes


def check_resumed_model(ckpt, preset: str | None, changes: dict, path: str) -> None:
    """A resumed run keeps its model: a --preset or --set that disagrees with the checkpoint is refused."""
    from ..data.registry import PRESETS  # noqa: PLC0415
    from ..model import DATA_FIELDS  # noqa: PLC0415

    cfg = ckpt.model.cfg
    for name, value in changes.items():
        if getattr(cfg, name) != value:
            raise CliError(f"the checkpoint {path} was trained with {name}={getattr(cfg, name)!r}, not {value!r}; "
                           "a resumed run keeps its model (leave --set out, or start a new run)",
                           f"--set {name}={value}")
    if preset is None:
        return
    saved = ckpt.extra.get("preset")
    if saved is not None:
        if saved != preset:
            raise CliError(f"the checkpoint {path} was trained with preset {saved!r}, not {preset!r} (leave "
                           "--preset out when resuming)", f"--preset {preset}")
        return
    # Older checkpoints do not name their preset: compare the fields a preset decides.
    for name, value in vars(PRESETS[preset]).items():
        if name not in DATA_FIELDS and name != "max_len" and name not in changes and getattr(cfg, name) != value:
            raise CliError(f"the checkpoint {path} has {name}={getattr(cfg, name)!r}, but preset {preset!r} has "
                           f"{name}={value!r} (leave --preset out when resuming)", f"--preset {preset}")


def _resumed_tokenization(ckpt, level: str | None, merges: int | None):
    """The tokenization of a resumed run: its saved merges as they are, or None if it is not byte-pair encoded
    (a --level bpe or --bpe-merges then refused); a --level or --bpe-merges that disagrees is refused."""
    from ..data.loading import bpe_of  # noqa: PLC0415

    levels = ckpt.extra.get("levels", {})
    saved = bpe_of(levels)                         # checked when the checkpoint was loaded
    if saved is not None:
        if level not in (None, "bpe"):
            raise CliError(f"the checkpoint {ckpt.path} byte-pair encodes its text, not {level}-level "
                           "(leave --level out when resuming)", f"--level {level}")
        if merges is not None and merges != len(saved.merges):
            raise CliError(f"the checkpoint {ckpt.path} has {len(saved.merges)} BPE merges, not {merges} "
                           "(leave --bpe-merges out when resuming)", f"--bpe-merges {merges}")
        return {"level": "bpe", "bpe": saved}
    if level == "bpe" or merges is not None:
        which = "--level bpe" if level == "bpe" else f"--bpe-merges {merges}"
        raise CliError(f"the checkpoint {ckpt.path} was trained on {levels.get('tgt', 'word')}-level text, not "
                       "byte-pair encoded (leave the option out when resuming)", which)
    return None


def train_tokenization(req, ckpt) -> dict:
    """``load_task``'s level / bpe_merges / bpe for train's options (checked here, before anything runs).

    --bpe-merges N needs --level bpe; --level bpe needs --bpe-merges (the right number depends
    on the corpus, so there is no general default) unless the task has a measured one (its
    registry entry's ``bpe_merges``). A new run of a task without --level trains on the task's
    ``train_level`` (the emoji tasks: pieces); --level with the task's own level (char for
    emoji) trains on that. A resumed run keeps the checkpoint's tokenization: its
    merges are used as saved (not learned again), and a --level or --bpe-merges that
    disagrees with them is refused.
    """
    from ..data.registry import get_task  # noqa: PLC0415

    level, merges = req.level, req.bpe_merges
    if ckpt is not None:
        resumed = _resumed_tokenization(ckpt, level, merges)
        if resumed is not None:
            return resumed
        levels = ckpt.extra.get("levels", {})
        if level is None and req.data is not None and levels.get("src") == levels.get("tgt"):
            level = levels.get("src")                  # a --data run resumes at its own level
    task = None
    if req.task is not None:
        with about(f"--task {req.task}"):
            task = get_task(req.task)
        if level is None and ckpt is None:
            level = task.train_level                   # None (its own tokenization) or a measured "bpe"
        elif level is not None and level == task.own_level:
            level = None                               # the task's own level, named
    if merges is not None and level != "bpe":
        raise CliError("--bpe-merges applies to byte-pair encoding; add --level bpe", f"--bpe-merges {merges}")
    if level == "bpe" and merges is None:
        merges = task.bpe_merges if task is not None else None   # a measured default
        if merges is None:
            raise CliError("--level bpe needs --bpe-merges N, the number of merges to learn on the training split "
                           "(a few hundred for a small task; the paper's vocabulary had about 37,000 pieces)",
                           "--level bpe")
    return {"level": level, "bpe_merges": merges}


def resume_command(argv: list[str], checkpoint: str, ranks: int = 1) -> str:
    """The command line that continues an interrupted run: the same options, with --resume CHECKPOINT
    (under ``mpiexec -n ranks`` if it ran on several; a checkpoint resumes on any number)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--resume":
            skip = True
        elif not arg.startswith("--resume="):
            kept.append(arg)
    launcher = ["mpiexec", "-n", str(ranks)] if ranks > 1 else []
    return shlex.join([*launcher, "python", "-m", "minitransformer", *kept, "--resume", checkpoint])
