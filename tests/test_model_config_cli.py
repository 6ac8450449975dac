"""The model configuration from the command line: train --set FIELD=VALUE, checked against a resumed
checkpoint; the banner prints the configuration used; a resumed run reports the steps it trained."""

from __future__ import annotations

import json
import zipfile
from dataclasses import fields

import numpy as np
import pytest

from minitransformer.__main__ import main
from minitransformer.checkpoint import load_checkpoint
from minitransformer.cli.resume import config_changes
from minitransformer.model import DATA_FIELDS, TransformerConfig

WORDS = "one two three four five six seven eight".split()


@pytest.fixture()
def data(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{a} {b}\t{b} {a}\n" for a in WORDS for b in WORDS), encoding="utf-8")
    return path


def _train(data, out, *extra):
    return ["train", "--data", str(data), "--level", "word", "--preset", "tiny", "--no-progress",
            "--out", str(out), "--steps", "2", *extra]


# -- the generic route, from the dataclass ----------------------------------------------------------

def test_every_field_but_the_datas_has_a_route():
    settable = [f.name for f in fields(TransformerConfig) if f.name not in DATA_FIELDS]
    base = TransformerConfig()
    for name in settable:
        value = getattr(base, name)
        assert config_changes([f"{name}={value}"]) == {name: value}, name


@pytest.mark.parametrize("text, message", [
    ("nope=1", "unknown model field 'nope'; the fields are: vocab_size, d_model"),
    ("N=two", "N='two' is not a whole number"),
    ("P_drop=nan", "P_drop='nan' is not a finite number"),
    ("P_drop=lots", "P_drop='lots' is not a number"),
    ("pre_ln=maybe", "pre_ln='maybe' is not true or false"),
    ("vocab_size=5", "vocab_size is set by the data"),
    ("pad_id=1", "pad_id is set by the data"),
    ("N", "expected FIELD=VALUE, got 'N'"),
    ("=3", "expected FIELD=VALUE, got '=3'"),
])
def test_a_bad_assignment_names_the_field(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        config_changes([text])


def test_a_field_given_twice_is_refused():
    with pytest.raises(ValueError, match="N is given twice"):
        config_changes(["N=2", "N=3"])


# -- through train -----------------------------------------------------------------------------------

def test_set_reaches_the_model_and_the_banner(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_train(data, out, "--set", "P_drop=0.2", "--set", "positional=learned", "--set", "pre_ln=true")) == 0
    printed = capsys.readouterr().out
    assert "model: preset tiny --set P_drop=0.2 --set positional=learned --set pre_ln=True" in printed
    assert "P_drop=0.2" in printed and "positional=learned" in printed and "pre_ln=True" in printed
    cfg = load_checkpoint(str(out / "checkpoint.npz")).model.cfg
    assert (cfg.P_drop, cfg.positional, cfg.pre_ln, cfg.d_model) == (0.2, "learned", True, 32)


def test_set_activation_gelu_trains_a_gelu_model(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_train(data, out, "--set", "activation=gelu")) == 0
    assert "activation=gelu" in capsys.readouterr().out
    model = load_checkpoint(str(out / "checkpoint.npz")).model
    assert model.cfg.activation == "gelu" and model.encoder.layers[0].ffn.activation == "gelu"


@pytest.mark.parametrize("assignment, message", [
    ("nope=1", "unknown model field 'nope'"),
    ("h=3", "d_model=32 must be divisible by h=3"),
    ("P_drop=1.5", "P_drop must be a probability in [0, 1)"),
    ("max_len=3", "max_len=3 is too small for task 'pairs.tsv'"),
    ("positional=wavy", "positional must be one of 'sinusoidal', 'learned'"),
    ("activation=swish", "activation must be one of 'relu', 'gelu'"),
])
def test_a_bad_set_is_one_line_naming_it(data, tmp_path, capsys, assignment, message):
    assert main(_train(data, tmp_path / "run", "--set", assignment)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
    assert message in err, err
    assert f"--set {assignment}" in err, err
    assert not (tmp_path / "run" / "checkpoint.npz").exists()


@pytest.mark.parametrize("option", [["--level", "word"], ["--header"], ["--max-length", "30"]])
def test_data_options_with_a_named_task_are_refused(option, capsys):
    assert main(["train", "--task", "copy", *option, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{option[0]} applies to --data files only" in err and f"({option[0]})" in err


# -- resuming keeps the model ------------------------------------------------------------------------

@pytest.fixture()
def run(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_train(data, out, "--set", "P_drop=0.2")) == 0
    capsys.readouterr()
    return out / "checkpoint.npz"


def test_resume_refuses_a_conflicting_set(data, run, capsys):
    argv = _train(data, run.parent, "--resume", str(run), "--steps", "4")
    assert main([a for a in argv if a != "tiny" and a != "--preset"] + ["--set", "P_drop=0.3"]) == 2
    err = capsys.readouterr().err
    assert "was trained with P_drop=0.2, not 0.3" in err and "(--set P_drop=0.3)" in err


def test_resume_refuses_another_preset(data, run, capsys):
    argv = ["train", "--data", str(data), "--level", "word", "--preset", "copy", "--no-progress",
            "--out", str(run.parent), "--steps", "4", "--resume", str(run)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "was trained with preset 'tiny', not 'copy'" in err and "(--preset copy)" in err


def test_resume_with_the_same_model_trains_and_reports_the_steps_of_this_run(data, run, capsys):
    argv = _train(data, run.parent, "--resume", str(run), "--steps", "5", "--set", "P_drop=0.2")
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "model: preset tiny --set P_drop=0.2" in out
    assert "trained 3 steps (steps 3-5, resumed at step 2)" in out


def _rewrite_meta(path, change):
    with np.load(path, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    meta = json.loads(str(arrays["meta"]))
    change(meta)
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(path, **arrays)


def test_an_older_checkpoint_without_its_preset_is_compared_field_by_field(data, run, capsys):
    _rewrite_meta(run, lambda meta: meta["extra"].pop("preset"))
    base = ["train", "--data", str(data), "--level", "word", "--no-progress", "--out", str(run.parent),
            "--steps", "4", "--resume", str(run)]
    assert main(base + ["--preset", "copy"]) == 2
    err = capsys.readouterr().err
    assert "has d_model=32, but preset 'copy' has d_model=128" in err and "(--preset copy)" in err
    assert main(base + ["--preset", "tiny"]) == 2                   # the run changed P_drop: say so
    assert "has P_drop=0.2, but preset 'tiny' has P_drop=0.0" in capsys.readouterr().err
    assert main(base + ["--preset", "tiny", "--set", "P_drop=0.2"]) == 0


def test_missing_config_fields_take_their_defaults(run):
    """A checkpoint written before a field existed loads as the model it was: from_json's rule."""
    newest = fields(TransformerConfig)[-1].name
    _rewrite_meta(run, lambda meta: meta["config"].pop(newest))
    with zipfile.ZipFile(run) as z:
        assert newest not in json.loads(np.load(run)["meta"].item())["config"], z.namelist()
    cfg = load_checkpoint(str(run)).model.cfg
    assert getattr(cfg, newest) == getattr(TransformerConfig(), newest)
    assert cfg.P_drop == 0.2
    with pytest.raises(ValueError, match=r"unknown fields \['warp'\]"):
        TransformerConfig.from_json(json.dumps({"warp": 9}))
