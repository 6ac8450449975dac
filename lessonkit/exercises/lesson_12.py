"""The planted-bug bench of lesson 12, and the checking cells of its exercises.

Lesson 12 plants known bugs in the package, runs the project's four kinds of check
against each one (float64 gradient check, PyTorch parity, property tests, a short
training run) and tabulates which check catches what. A bug is planted only inside
a ``with plant.planted():`` block, by swapping one module attribute for a small
buggy copy, and is removed when the block ends: the package's default path is never
edited.

Plant                  one planted bug: the swaps that plant it, or a model or
                       optimizer setting it needs; ``planted()`` and ``assert_live()``
swap                   the context manager that plants one swap and counts its calls
CATALOGUE              the defects a mystery bug may be (keys, components, descriptions)
show_catalogue         prints the catalogue as a table
mystery                Exercises 12.1-12.3: a Plant whose bug is not named
check_mystery          Exercises 12.1-12.3: is ``answer`` (a CATALOGUE key) the planted bug?
check_pe_property      Exercise 12.4: a property that catches mystery 1 without PyTorch

The checkers follow the contract of ``_common``: an answer of None prints
``NOT_ATTEMPTED`` and returns a false Verdict; a wrong answer raises WrongAnswer with a
``hint:`` line; a right one prints ``correct`` and returns a true Verdict.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from minitransformer import backend
from minitransformer import model as model_module
from minitransformer.layers import layernorm, positional
from minitransformer.optim import Adam

from ..i18n import tr
from ._common import (
    NOT_ATTEMPTED,
    WrongAnswer,
    case_rng,
    describe,
    drive,
    exercise,
    not_attempted,
    say,
    visible,
)

__all__ = [
    "CATALOGUE",
    "NOT_ATTEMPTED",
    "Plant",
    "check_mystery",
    "check_pe_property",
    "mystery",
    "show_catalogue",
    "swap",
]


# -- planting a bug ----------------------------------------------------------------------

@contextmanager
def swap(owner, name: str, replacement: Callable, calls: dict):
    """Inside the block, ``owner.name`` is ``replacement`` (counting its calls in ``calls[name]``).

    owner: a module (for a function the package calls by its module-level name) or a
    class (for a method). The original is put back when the block ends, even on an
    error. If the package no longer has ``owner.name`` this raises AttributeError at
    once: a plant that silently planted nothing would make every check look clean.
    """
    original = getattr(owner, name)
    if not callable(original):
        raise TypeError(f"swap: {owner.__name__}.{name} is not a function")
    calls.setdefault(name, 0)

    def counted(*args, **kwargs):
        calls[name] += 1
        return replacement(*args, **kwargs)

    setattr(owner, name, counted)
    try:
        yield
    finally:
        setattr(owner, name, original)


@dataclass(eq=False)          # a plant is equal only to itself (and can key a dict)
class Plant:
    """One planted bug.

    name:      a short name for the tables
    where:     the component it lives in, in words
    swaps:     (owner, attribute name, replacement) triples, planted by ``planted()``
    pre_ln:    build the model pre-LN while it is called the paper's post-LN (bug 5)
    optimizer: (params, schedule) -> an optimizer; None means the package's Adam
    """

    name: str
    where: str = ""
    swaps: tuple = ()
    pre_ln: bool = False
    optimizer: Callable | None = None
    calls: dict = field(default_factory=dict, repr=False)

    @contextmanager
    def planted(self):
        """Inside the block the bug is live; outside it the package is untouched."""
        with ExitStack() as stack:
            for owner, name, replacement in self.swaps:
                stack.enter_context(swap(owner, name, replacement, self.calls))
            yield self

    def assert_live(self) -> None:
        """Raise unless some swapped function actually ran (a refactored package can leave a
        plant that replaces a name nobody calls any more, and then every check looks clean)."""
        if self.swaps and sum(self.calls.values()) == 0:
            names = ", ".join(name for _, name, _ in self.swaps)
            raise AssertionError(f"plant {self.name!r}: the swapped {names} never ran; the package no "
                                 "longer calls it by that name, so nothing was planted")

    def make_optimizer(self, params, schedule):
        """The optimizer this plant trains with: its own, or the package's Adam."""
        return self.optimizer(params, schedule) if self.optimizer else Adam(params, lr=schedule)

    def model_config(self, cfg):
        return cfg.with_(pre_ln=True) if self.pre_ln else cfg


# -- the catalogue of defects ----------------------------------------------------------------

class Defect(NamedTuple):
    component: str
    description: str
    kind: str   # "forward": the forward computes a wrong function; "backward": only the backward
                # is wrong; "optimizer": the update; "loop": the training loop


CATALOGUE: dict[str, Defect] = {
    # attention (§3.2)
    "scores-unscaled": Defect("attention", "the scores Q Kᵀ are not divided by √d_k", "forward"),
    "softmax-wrong-axis": Defect("attention", "the softmax normalizes over the queries, not the keys", "forward"),
    "causal-mask-transposed": Defect("attention", "the causal mask is upper- instead of lower-triangular",
                                     "forward"),
    "padding-mask-ignored": Defect("attention", "the source padding mask is never applied", "forward"),
    "attention-backward-no-rowsum": Defect("attention", "the softmax backward drops the row-sum term",
                                           "backward"),
    # residual and LayerNorm (§3.1)
    "pre-ln-as-post-ln": Defect("layer norm", "the model is pre-LN but presented as the paper's post-LN",
                                "forward"),
    "layernorm-unbiased-variance": Defect("layer norm", "the variance divides by d_model − 1, not d_model",
                                          "forward"),
    "layernorm-eps-outside-sqrt": Defect("layer norm", "ε is added to the standard deviation, outside the root",
                                         "forward"),
    "residual-missing": Defect("layer norm", "the sub-layer's input is not added back (no residual)", "forward"),
    # embeddings and positions (§3.4, §3.5)
    "tied-gradient-overwritten": Defect("embedding", "the tied E's gradient is overwritten (=), not summed (+=)",
                                        "backward"),
    "embedding-not-scaled": Defect("embedding", "the embedding is not multiplied by √d_model", "forward"),
    "pe-sin-cos-swapped": Defect("positional encoding", "cos on the even columns and sin on the odd ones",
                                 "forward"),
    "pe-wrong-frequencies": Defect("positional encoding", "the wavelengths use 10000^(i/d_model), not "
                                   "10000^(2i/d_model)", "forward"),
    # feed-forward (§3.3)
    "relu-backward-wrong": Defect("feed-forward", "the ReLU backward passes the gradient where x < 0",
                                  "backward"),
    # dropout (§5.4)
    "dropout-mask-reused": Defect("dropout", "one mask is reused at several sites or steps", "forward"),
    "dropout-not-rescaled": Defect("dropout", "kept units are not scaled by 1/(1 − P_drop)", "forward"),
    # loss (§5.4)
    "label-smoothing-log0": Defect("loss", "the loss takes log of a softmax probability, which can be 0",
                                   "forward"),
    "targets-by-value": Defect("loss", "the backward finds the target by its probability's value", "backward"),
    "loss-mean-over-padding": Defect("loss", "the mean runs over padded positions too", "forward"),
    # optimizer, schedule, loop (§5.3)
    "adam-t-from-layer-index": Defect("optimizer", "Adam's bias correction uses the parameter's index as t",
                                      "optimizer"),
    "warmup-per-tensor": Defect("optimizer", "the schedule's clock ticks once per parameter tensor",
                                "optimizer"),
    "adam-no-bias-correction": Defect("optimizer", "Adam's m and v are used without bias correction",
                                      "optimizer"),
    "gradients-never-zeroed": Defect("optimizer", "the optimizer's zero_grad does nothing, so gradients "
                                     "pile up across steps", "loop"),
}


def show_catalogue() -> None:
    """Print the catalogue: the key to answer with, the component, and what is wrong."""
    width = max(len(k) for k in CATALOGUE)
    last = None
    for key, d in CATALOGUE.items():
        if d.component != last:
            print(f"\n{d.component}")
            last = d.component
        print(f"  {key:<{width}}  {d.description}")


# -- the mystery bugs -------------------------------------------------------------------------
# Don't read on if you want to solve Exercises 12.1-12.3 from the checks alone.

def _table_sin_cos_swapped(max_len, d_model, xp=None, dtype=None):
    """sinusoidal_table with the two functions exchanged: cos on even columns, sin on odd."""
    xp = xp or backend.xp_default()
    dtype = dtype or backend.default_dtype()
    pos = xp.arange(max_len, dtype=xp.float64)[:, None]
    two_i = xp.arange(0, d_model, 2, dtype=xp.float64)[None, :]
    angle = pos / xp.power(10000.0, two_i / d_model)
    pe = xp.zeros((max_len, d_model), dtype=xp.float64)
    pe[:, 0::2] = xp.cos(angle)
    pe[:, 1::2] = xp.sin(angle[:, : d_model // 2])
    return pe.astype(dtype)


def _layernorm_forward_unbiased(x, gamma, beta, eps):
    """layernorm_forward with the variance divided by d - 1 (the backward is left as it was)."""
    xp = backend.get_array_module(x)
    d = x.shape[-1]
    xc = x - x.mean(axis=-1, keepdims=True)
    var = (xc * xc).sum(axis=-1, keepdims=True) / (d - 1)
    rstd = 1.0 / xp.sqrt(var + eps)
    x_hat = xc * rstd
    return x_hat * gamma + beta, layernorm.LayerNormCache(x_hat, rstd, gamma)


def _zero_grad_does_nothing(self):
    """Adam.zero_grad that forgets to zero."""
    return None


def _pe_swaps():
    # The model may take the table from model.py's import or from layers/positional.py:
    # plant it in both, so a refactor between the two cannot unplant it.
    owners = [model_module, positional]
    return tuple((m, "sinusoidal_table", _table_sin_cos_swapped) for m in owners
                 if hasattr(m, "sinusoidal_table"))


def _digest(answer: str) -> str:
    """What the checker compares: a hash of the answer, so that the answer key is not written here
    (the package is no answer key); the lesson's solutions, in the teacher's edition, name the keys."""
    return hashlib.sha256(f"lesson 12, mystery: {answer}".encode()).hexdigest()[:16]


# number: (the digest of the right key, the component it lives in, the swaps that plant it)
_MYSTERIES = {
    1: ("ae48380c8ef936f3", "positional encoding", _pe_swaps),
    2: ("47102104588d1422", "layer norm",
        lambda: ((layernorm, "layernorm_forward", _layernorm_forward_unbiased),)),
    3: ("6d7f24b3cf92da2c", "optimizer", lambda: ((Adam, "zero_grad", _zero_grad_does_nothing),)),
}


def mystery(number: int) -> Plant:
    """Mystery bug ``number`` (1, 2 or 3), as a Plant whose name does not give it away."""
    if number not in _MYSTERIES:
        raise ValueError(f"mystery: there are mystery bugs {sorted(_MYSTERIES)}, got {number!r}")
    _, _, make_swaps = _MYSTERIES[number]
    return Plant(name=f"mystery {number}", where="?", swaps=make_swaps())


# What each mystery's checks show, and so what a wrong guess can be told. Lesson 12's
# Solutions run all four checks on every mystery and assert exactly these signatures.
MYSTERY_SIGNATURES = {
    1: {"gradient check": False, "PyTorch parity": True, "property tests": False, "training run": False},
    2: {"gradient check": True, "PyTorch parity": True, "property tests": True, "training run": False},
    3: {"gradient check": False, "PyTorch parity": False, "property tests": False, "training run": True},
}

def _same_component_hint(number: int) -> str:
    """What to look at when the guess names mystery ``number``'s component but not its bug (in the reader's
    language: built when asked)."""
    return {
        1: tr("Right component: the positional encoding. Which function of pos does §3.5 put on the even "
              "columns, and what does the first row (pos = 0) of the table then have to be?"),
        2: tr("Right component: layer normalization. Look at the variance: what does the post-LN property "
              "measure for the variance of a layer's output, and what should it be?"),
        3: tr("Right component. Optimizer parity and the Adam property feed the optimizer fresh gradients "
              "by hand; only the training run goes through a loop that relies on zero_grad."),
    }[number]


def _generic_hint(number: int) -> str:
    """What mystery ``number``'s checks say, as a pointer towards the bug (in the reader's language)."""
    return {
        1: tr("The gradient check passes and no property fails, but parity fails already in the logits: the "
              "forward computes a different function from the paper's, in a way that breaks none of the stated "
              "invariants. Which part of the forward has no parameters and no backward worth the name?"),
        2: tr("The gradient check fails, so some backward no longer matches its forward; the post-LN property "
              "fails too: the layer outputs are not what a LayerNorm should give."),
        3: tr("Every check that builds a model or feeds the optimizer fixed gradients passes; only training "
              "fails. So the model and one Adam update are right: what else happens between two steps?"),
    }[number]


def _hint(number: int, answer: str) -> str:
    """What the mystery's checks rule out about a wrong answer, then a pointer towards the bug."""
    guess = CATALOGUE[answer]
    if guess.component == _MYSTERIES[number][1]:
        return _same_component_hint(number)
    caught = MYSTERY_SIGNATURES[number]
    reasons = []
    if guess.kind == "backward" and not caught["gradient check"]:
        reasons.append(tr("a backward that disagrees with its forward fails the float64 gradient check, and "
                          "the gradient check passed"))
    if guess.kind in ("optimizer", "loop") and caught["gradient check"]:
        reasons.append(tr("the gradient check failed, and it never runs the optimizer or the loop"))
    if guess.kind in ("optimizer", "loop") and caught["PyTorch parity"] and not caught["gradient check"]:
        reasons.append(tr("parity's first failing comparison is the logits, computed before any optimizer step"))
    if guess.kind in ("forward", "backward") and not (caught["PyTorch parity"] or caught["property tests"]):
        reasons.append(tr("parity and every property passed: on the bench the model computes what PyTorch "
                          "computes, gradients included"))
    return " ".join([r[0].upper() + r[1:] + "." for r in reasons] + [_generic_hint(number)])


@exercise("12.{0}")
def check_mystery(number: int, answer) -> bool:
    """Exercises 12.1-12.3: is ``answer`` (a key of CATALOGUE) the bug planted by mystery(number)?"""
    if number not in _MYSTERIES:
        raise ValueError(f"check_mystery: there are mystery bugs {sorted(_MYSTERIES)}, got {number!r}")
    if not_attempted(answer):
        return False
    if not isinstance(answer, str) or answer not in CATALOGUE:
        raise WrongAnswer(tr(f"mystery {number}: answer with one key of CATALOGUE (show_catalogue() lists "
                                f"them), got {describe(answer)}"))
    if _digest(answer) != _MYSTERIES[number][0]:
        raise WrongAnswer(tr(f"mystery {number}: not {answer!r} ({CATALOGUE[answer].description})\n"
                                f"  hint: {_hint(number, answer)}"))
    caught = [name for name, hit in MYSTERY_SIGNATURES[number].items() if hit]
    say(tr("correct"))
    say(tr(f"  mystery {number} is {answer!r}: {CATALOGUE[answer].description}"))
    say(tr(f"  caught by: {', '.join(caught)}; missed by the others"))
    return True


# -- Exercise 12.4: a property that closes parity's gap -------------------------------------------

def _small_model(d_model: int = 6, max_len: int = 12):
    cfg = model_module.TransformerConfig(vocab_size=8, d_model=d_model, h=2, N=1, d_ff=8, P_drop=0.0,
                                         eps_ls=0.0, max_len=max_len)
    return model_module.Transformer(cfg, seed=0)


def _property_run(fn, d_model: int, max_len: int) -> dict:
    """The learner's property on a float64 model of the package as it is, and on one built and checked
    with mystery 1 planted, run where the property lives: {"clean", "buggy"} as plain data."""
    old = backend.default_dtype()
    backend.set_default_dtype("float64")
    try:
        clean = fn(_small_model(d_model, max_len))
        if clean is None:
            return {"clean": None, "buggy": None}
        with mystery(1).planted():            # the property runs where the bug is, as property tests do
            buggy = fn(_small_model(d_model, max_len))
    finally:
        backend.set_default_dtype(old)
    return {"clean": clean, "buggy": buggy}


@exercise("12.4")
def check_pe_property(fn) -> bool:
    """Exercise 12.4: fn(model) -> True if the model's positional encoding is the one of §3.5.

    The checker builds a small Transformer with the package as it is (fn must say True),
    and one with mystery 1 planted (fn must say False). Read the table the model adds
    with ``model.src_pos.table`` (max_len, d_model), or run ``model.src_pos.forward`` on
    zeros; compare with values you compute from §3.5 yourself.
    """
    d_model, max_len = (6, 12) if visible() else (2 * int(case_rng(124).integers(1, 9)),
                                                   int(case_rng(125).integers(2, 40)))
    run = drive(fn, _property_run, d_model, max_len)
    if not isinstance(run, dict) or set(run) != {"clean", "buggy"}:
        raise WrongAnswer(tr(f"the property did not report back (got {describe(run)})"))
    verdict_clean, verdict_buggy = run["clean"], run["buggy"]
    if not_attempted(verdict_clean):
        return False
    for label, verdict in ((tr("the package's model"), verdict_clean), (tr("mystery 1's model"), verdict_buggy)):
        if not isinstance(verdict, (bool, np.bool_)):
            raise WrongAnswer(tr(f"{label}: expected True or False, got {describe(verdict)}"))
    if not verdict_clean:
        raise WrongAnswer(tr("your property says the package's own model is wrong: a property must pass on "
                                "correct code\n  hint: compare with a tolerance (1e-12), and check the formula: "
                                "PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same angle)"))
    if verdict_buggy:
        raise WrongAnswer(tr("your property passes on mystery 1's model, so it cannot catch it\n  hint: compute "
                                "the expected values yourself; comparing with minitransformer's sinusoidal_table "
                                "compares the bug with itself (mystery 1 swaps that very function)"))
    say(tr("correct"))
    say(tr("  True on the package's model, False on mystery 1's: this property catches the bug without PyTorch"))
    return True


def _reference_pe(max_len: int, d_model: int) -> np.ndarray:
    """§3.5 written out with math.sin and math.cos, one entry at a time (for the tests)."""
    table = np.zeros((max_len, d_model))
    for pos in range(max_len):
        for j in range(d_model):
            angle = pos / 10000 ** (2 * (j // 2) / d_model)
            table[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return table
