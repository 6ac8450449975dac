"""Lesson 12's bench and exercise checkers.

* ``swap`` and ``Plant`` plant a bug only inside their block, put the package back
  afterwards (even after an error), refuse a name the package does not have, and notice a
  plant whose copy never ran;
* each mystery bug really changes what the package computes while planted, and nothing after;
* ``check_mystery`` and ``check_pe_property`` follow the checker contract: None prints
  NOT_ATTEMPTED and returns False, a wrong answer raises with a ``hint:``, a right one
  prints ``correct`` and returns True.

The four checks themselves run in the lesson notebook, which asserts each mystery's
signature (which checks catch it) against ``MYSTERY_SIGNATURES``.
"""

import math

import numpy as np
import pytest

from lessonkit.exercises import lesson_12 as ex
from minitransformer import backend
from minitransformer import model as model_module
from minitransformer.gradcheck import check_layer
from minitransformer.layers import layernorm, positional
from minitransformer.layers.layernorm import LayerNorm
from minitransformer.layers.parameter import Parameter
from minitransformer.model import Transformer, TransformerConfig
from minitransformer.optim import Adam


@pytest.fixture(autouse=True)
def _float64():
    old = backend.default_dtype()
    backend.set_default_dtype("float64")
    yield
    backend.set_default_dtype(old)


# The mysteries' answers (lesson_12 keeps only their hashes: the package is no answer key).
ANSWERS = {1: "pe-sin-cos-swapped", 2: "layernorm-unbiased-variance", 3: "gradients-never-zeroed"}
CFG = TransformerConfig(vocab_size=8, d_model=6, h=2, N=1, d_ff=8, P_drop=0.0, eps_ls=0.1, max_len=12)
SRC = np.array([[3, 4, 5], [6, 3, 0]])
TGT_IN = np.array([[1, 5, 4, 3], [1, 3, 6, 0]])


def logits_of(model):
    return model.forward(SRC, TGT_IN)


# -- swap and Plant ----------------------------------------------------------------------------

def test_swap_plants_inside_the_block_only_and_counts_calls():
    original = positional.sinusoidal_table
    calls = {}
    with ex.swap(positional, "sinusoidal_table", lambda *a, **k: "planted", calls):
        assert positional.sinusoidal_table(4, 2) == "planted"
        assert positional.sinusoidal_table(4, 2) == "planted"
    assert positional.sinusoidal_table is original
    assert calls == {"sinusoidal_table": 2}


def test_swap_restores_after_an_error():
    original = layernorm.layernorm_forward
    with pytest.raises(RuntimeError, match="inside"), ex.swap(layernorm, "layernorm_forward", lambda *a: None, {}):
        raise RuntimeError("inside the block")
    assert layernorm.layernorm_forward is original


def test_swap_refuses_a_name_the_package_does_not_have():
    with pytest.raises(AttributeError), ex.swap(layernorm, "no_such_function", lambda: None, {}):
        pass


def test_assert_live_notices_a_plant_that_never_ran():
    plant = ex.Plant("dead", swaps=((positional, "sinusoidal_table", positional.sinusoidal_table),))
    with plant.planted():
        pass                                             # nothing calls the swapped function
    with pytest.raises(AssertionError, match="never ran"):
        plant.assert_live()
    with plant.planted():
        positional.sinusoidal_table(3, 2)
    plant.assert_live()
    ex.Plant("a setting, no swaps", pre_ln=True).assert_live()      # nothing to check


def test_plant_settings_choose_model_and_optimizer():
    plant = ex.Plant("pre-LN", pre_ln=True)
    assert plant.model_config(CFG).pre_ln and not ex.Plant("clean").model_config(CFG).pre_ln
    p = [Parameter(np.zeros(2))]
    assert isinstance(ex.Plant("clean").make_optimizer(p, 0.1), Adam)
    sentinel = object()
    assert ex.Plant("own", optimizer=lambda params, schedule: sentinel).make_optimizer(p, 0.1) is sentinel


def test_plants_can_key_a_dict():
    a, b = ex.Plant("same"), ex.Plant("same")
    assert a != b and len({a: 1, b: 2}) == 2


# -- the mysteries are live while planted, and gone afterwards ---------------------------------------

def test_mystery_1_swaps_sin_and_cos_in_the_model_table():
    clean = Transformer(CFG, seed=0)
    plant = ex.mystery(1)
    with plant.planted():
        buggy = Transformer(CFG, seed=0)
    plant.assert_live()
    reference = ex._reference_pe(CFG.max_len, CFG.d_model)
    np.testing.assert_allclose(clean.src_pos.table, reference, atol=1e-12)
    assert not np.allclose(buggy.src_pos.table, reference)
    np.testing.assert_allclose(buggy.src_pos.table[:, 0::2], reference[:, 1::2], atol=1e-12)  # cos where sin was
    np.testing.assert_allclose(buggy.src_pos.table[:, 1::2], reference[:, 0::2], atol=1e-12)
    assert not np.allclose(logits_of(clean), logits_of(buggy))
    assert np.allclose(Transformer(CFG, seed=0).src_pos.table, reference, atol=1e-12)   # gone afterwards
    assert model_module.sinusoidal_table is positional.sinusoidal_table


def test_mystery_2_layernorm_uses_the_unbiased_variance_in_the_forward_only():
    rng = np.random.default_rng(7)     # not seed 0: check_layer's upstream gradient comes from seed 0
    x = rng.standard_normal((3, 4, 5)) * 2 + 1
    plant = ex.mystery(2)
    with plant.planted():
        ln = LayerNorm(5)
        y = ln.forward(x)
        report = check_layer(ln, x)                      # the backward still assumes the biased variance
    plant.assert_live()
    np.testing.assert_allclose(y.var(-1), 4 / 5, rtol=1e-4)   # (d-1)/d instead of 1
    assert not report.ok
    assert check_layer(LayerNorm(5), x).ok               # gone afterwards


def test_mystery_3_zero_grad_does_nothing():
    p = Parameter(np.ones(3))
    opt = Adam([p], lr=0.1)
    plant = ex.mystery(3)
    with plant.planted():
        p.grad[...] = 2.0
        opt.zero_grad()
        assert np.all(p.grad == 2.0)
    plant.assert_live()
    opt.zero_grad()
    assert np.all(p.grad == 0.0)                         # gone afterwards


def test_every_mystery_is_in_the_catalogue_with_a_signature():
    for number, key in ANSWERS.items():
        assert key in ex.CATALOGUE
        sig = ex.MYSTERY_SIGNATURES[number]
        assert set(sig) == {"gradient check", "PyTorch parity", "property tests", "training run"}
        assert any(sig.values()), f"mystery {number} would be caught by nothing"
        assert ex._MYSTERIES[number][0] == ex._digest(key) and ex._MYSTERIES[number][1] == ex.CATALOGUE[key].component
        assert key not in repr(ex._MYSTERIES[number])          # only its hash: the module is no answer key
    with pytest.raises(ValueError, match="mystery bugs"):
        ex.mystery(4)


def test_show_catalogue_lists_every_key(capsys):
    ex.show_catalogue()
    out = capsys.readouterr().out
    assert all(key in out for key in ex.CATALOGUE)


# -- check_mystery ------------------------------------------------------------------------------

@pytest.mark.parametrize("number", [1, 2, 3])
def test_check_mystery_not_attempted(number, capsys):
    assert ex.check_mystery(number, None).status == "not attempted"
    assert ex.NOT_ATTEMPTED in capsys.readouterr().out


@pytest.mark.parametrize("number", [1, 2, 3])
def test_check_mystery_right_answer(number, capsys):
    assert ex.check_mystery(number, ANSWERS[number]).correct
    assert capsys.readouterr().out.startswith("correct")


@pytest.mark.parametrize("number, answer, hint", [
    (1, "pe-wrong-frequencies", r"Right component: the positional encoding"),
    (1, "relu-backward-wrong", r"gradient check passed"),
    (1, "warmup-per-tensor", r"first failing comparison is the logits"),
    (1, "scores-unscaled", r"no parameters"),
    (2, "pre-ln-as-post-ln", r"Right component: layer normalization"),
    (2, "adam-no-bias-correction", r"never runs the optimizer"),
    (2, "dropout-mask-reused", r"backward no longer matches"),
    (1, "tied-gradient-overwritten", r"A backward that disagrees with its forward fails"),
    (3, "adam-t-from-layer-index", r"Right component"),
    (3, "tied-gradient-overwritten", r"Parity and every property passed"),
    (3, "causal-mask-transposed", r"between two steps"),
])
def test_check_mystery_wrong_answer_has_a_hint(number, answer, hint):
    with pytest.raises(AssertionError, match=rf"(?s)mystery {number}: not '{answer}'.*hint: .*{hint}"):
        ex.check_mystery(number, answer)


@pytest.mark.parametrize("answer", ["pe sin cos swapped", 1, ("pe-sin-cos-swapped",)])
def test_check_mystery_answer_not_in_the_catalogue(answer):
    with pytest.raises(AssertionError, match="one key of CATALOGUE"):
        ex.check_mystery(1, answer)


def test_check_mystery_rejects_an_unknown_number():
    with pytest.raises(ValueError, match="mystery bugs"):
        ex.check_mystery(9, "pe-sin-cos-swapped")


# -- check_pe_property (Exercise 12.4) ---------------------------------------------------------

def pe_property_ok(model):
    table = np.asarray(model.src_pos.table)
    max_len, d_model = table.shape
    angle = np.arange(max_len)[:, None] / 10000 ** (2 * (np.arange(d_model) // 2) / d_model)
    expected = np.where(np.arange(d_model) % 2 == 0, np.sin(angle), np.cos(angle))
    return bool(np.allclose(table, expected, rtol=0, atol=1e-12))


def pe_property_loops(model):
    """The same, written entry by entry with math.sin/math.cos."""
    table = np.asarray(model.src_pos.table)
    for pos in range(table.shape[0]):
        for j in range(table.shape[1]):
            angle = pos / 10000 ** (2 * (j // 2) / table.shape[1])
            want = math.sin(angle) if j % 2 == 0 else math.cos(angle)
            if abs(table[pos, j] - want) > 1e-12:
                return False
    return True


def test_check_pe_property_right_answers(capsys):
    assert ex.check_pe_property(pe_property_ok).correct
    assert ex.check_pe_property(pe_property_loops).correct
    assert "correct" in capsys.readouterr().out


def test_check_pe_property_not_attempted(capsys):
    assert ex.check_pe_property(lambda model: None).status == "not attempted"
    assert ex.NOT_ATTEMPTED in capsys.readouterr().out


def test_check_pe_property_comparing_with_the_package_compares_the_bug_with_itself():
    def against_package(model):
        table = model.src_pos.table
        return bool(np.allclose(table, positional.sinusoidal_table(*table.shape)))
    with pytest.raises(AssertionError, match=r"(?s)passes on mystery 1.*compares the bug with itself"):
        ex.check_pe_property(against_package)


def test_check_pe_property_wrong_answers():
    with pytest.raises(AssertionError, match=r"(?s)package's own model is wrong.*hint"):
        ex.check_pe_property(lambda model: False)
    with pytest.raises(AssertionError, match="passes on mystery 1"):
        ex.check_pe_property(lambda model: True)
    with pytest.raises(AssertionError, match="expected True or False"):
        ex.check_pe_property(lambda model: "yes")
    # a weak property that still tells the two apart passes: row 0 is (0, 1, 0, 1, ...) in §3.5
    assert ex.check_pe_property(lambda model: bool(np.allclose(model.src_pos.table[0, 1::2], 1.0))).correct
