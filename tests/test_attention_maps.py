"""Attention weights read back from a forward pass (public API), and the heatmap PNGs drawn from them."""

import os
import warnings

import numpy as np
import pytest

from minitransformer.__main__ import main
from minitransformer.checkpoint import save_checkpoint
from minitransformer.data.vocab import SPACE, Vocab, tokenize
from minitransformer.decoding import GREEDY, Beam, Sample
from minitransformer.model import PRESETS, Transformer
from minitransformer.plot import ATTENTION_KINDS
from minitransformer.translate import attention_maps, display_token, save_attention_maps

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
WORDS = "four thousand three hundred twenty-one quatre mille trois cent vingt et un".split()


def _model(vocab_size, N=2, h=2, max_len=16, seed=0):
    # A random model with 2 layers and 2 heads; max_len 16 keeps decoding short.
    cfg = PRESETS["tiny"].with_(vocab_size=vocab_size, N=N, h=h, max_len=max_len, P_drop=0.1)
    return Transformer(cfg, seed=seed)


@pytest.fixture(scope="module")
def batch():
    # Sentence 0 is padded on both sides (pad id 0); sentence 1 is full length.
    src = np.array([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]])
    tgt_in = np.array([[1, 8, 9, 0], [1, 8, 9, 10]])
    return src, tgt_in


def test_shapes_batched_and_single(batch):
    model = _model(12)
    src, tgt_in = batch
    w = attention_maps(model, src, tgt_in)
    assert set(w) == set(ATTENTION_KINDS)
    N, h, (B, S), T = model.cfg.N, model.cfg.h, src.shape, tgt_in.shape[1]
    assert w["encoder_self"].shape == (N, B, h, S, S)
    assert w["decoder_self"].shape == (N, B, h, T, T)
    assert w["encoder_decoder"].shape == (N, B, h, T, S)
    single = attention_maps(model, [5, 6, 7], [1, 8, 9])
    assert single["encoder_self"].shape == (N, h, 3, 3)
    assert single["decoder_self"].shape == (N, h, 3, 3)
    assert single["encoder_decoder"].shape == (N, h, 3, 3)
    assert all(isinstance(a, np.ndarray) for a in single.values())


def test_rows_sum_to_one_and_masks_hold(batch):
    model = _model(12)
    src, tgt_in = batch
    w = attention_maps(model, src, tgt_in)
    for kind, a in w.items():
        np.testing.assert_allclose(a.sum(axis=-1), 1.0, rtol=0, atol=1e-5, err_msg=kind)
        assert (a >= 0).all()
    # Padded source keys (sentence 0, positions 3 and 4) get exactly zero weight.
    assert (w["encoder_self"][:, 0, :, :, 3:] == 0).all()
    assert (w["encoder_decoder"][:, 0, :, :, 3:] == 0).all()
    assert (w["encoder_decoder"][:, 1] > 0).all()          # nothing masked in sentence 1
    # Decoder self-attention is causal: nothing above the diagonal ...
    dec = w["decoder_self"]
    assert (np.triu(dec, k=1) == 0).all()
    # ... and the padded target key (sentence 0, position 3) is never attended to.
    assert (dec[:, 0, :, :, 3] == 0).all()


def test_padding_does_not_change_the_weights(batch):
    model = _model(12)
    src, tgt_in = batch
    padded = attention_maps(model, src, tgt_in)
    alone = attention_maps(model, [5, 6, 7], [1, 8, 9])
    np.testing.assert_allclose(padded["encoder_self"][:, 0, :, :3, :3], alone["encoder_self"], atol=1e-5)
    np.testing.assert_allclose(padded["decoder_self"][:, 0, :, :3, :3], alone["decoder_self"], atol=1e-5)
    np.testing.assert_allclose(padded["encoder_decoder"][:, 0, :, :3, :3], alone["encoder_decoder"], atol=1e-5)


def test_eval_mode_used_and_modes_restored(batch):
    model = _model(12).train()                  # dropout on: weights would be random if it stayed on
    src, tgt_in = batch
    a = attention_maps(model, src, tgt_in)
    b = attention_maps(model, src, tgt_in)
    for kind in ATTENTION_KINDS:
        np.testing.assert_array_equal(a[kind], b[kind])
    assert all(layer.training for layer in model.modules())


def test_maps_are_the_layers_public_attention_weights(batch):
    # attention_maps reads MultiHeadAttention.attention_weights, the A of Eq. (1)
    # that the forward used: recompute one head's A from Q and K by hand.
    from minitransformer.layers.attention import attention_scores, softmax_lastaxis
    from minitransformer.layers.masks import padding_mask

    model = _model(12)
    src, tgt_in = batch
    maps = attention_maps(model, src, tgt_in)
    attn = model.encoder.layers[0].self_attn
    np.testing.assert_array_equal(maps["encoder_self"][0], attn.attention_weights)
    with_dropout_off = model.eval()
    x = with_dropout_off.src_pos.forward(with_dropout_off.src_embed.forward(src))
    Q, K, _ = attn.project_qkv(x)
    A = softmax_lastaxis(attention_scores(Q, K, padding_mask(src, 0)))
    np.testing.assert_allclose(maps["encoder_self"][0], A, rtol=0, atol=1e-6)


def test_mismatched_inputs_are_refused():
    with pytest.raises(ValueError, match="1-D"):
        attention_maps(_model(12), [5, 6], np.array([[1, 5]]))


def test_display_token_shows_spaces():
    assert display_token(SPACE) == "\u2423"
    assert display_token("vingt") == "vingt"


def _check_pngs(paths, out_dir):
    assert sorted(os.path.basename(p) for p in paths) == sorted(f"{k}.png" for k in ATTENTION_KINDS)
    for path in paths:
        assert os.path.dirname(os.path.abspath(path)) == os.path.abspath(out_dir)
        with open(path, "rb") as f:
            assert f.read(8) == PNG_SIGNATURE
        assert os.path.getsize(path) > 1000


@pytest.mark.slow
@pytest.mark.parametrize("strategy", [GREEDY, Beam(3), Sample(top_k=3, seed=1)], ids=str)
def test_save_attention_maps_word_level(tmp_path, strategy):
    vocab = Vocab.build([WORDS])
    model = _model(len(vocab))
    paths = save_attention_maps(model, vocab, "four thousand three hundred".split(), str(tmp_path / "maps"),
                                "word", "word", strategy=strategy)
    _check_pngs(paths, tmp_path / "maps")


@pytest.mark.slow
def test_save_attention_maps_char_level_with_hangul(tmp_path):
    # Hangul needs a CJK font; without one the labels are boxes but nothing fails or warns.
    text = "grinning face"
    vocab = Vocab.build([tokenize(text, "char"), list("활짝웃는얼굴")])
    model = _model(len(vocab), N=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # no missing-glyph warnings escape
        paths = save_attention_maps(model, vocab, tokenize(text, "char"), str(tmp_path), "char", "char",
                                    strategy=GREEDY)
    _check_pngs(paths, tmp_path)


@pytest.mark.slow
def test_missing_cjk_font_falls_back_and_says_so(tmp_path, monkeypatch):
    # As on a machine without a CJK font: DejaVu Sans alone. Hangul becomes boxes;
    # no warning per glyph, but the figure's title says no CJK font was found.
    from minitransformer import plot

    titles = []
    draw = plot._draw_attention_grid
    monkeypatch.setattr(plot, "_draw_attention_grid", lambda *a: titles.append(a[-1]) or draw(*a))
    monkeypatch.setattr(plot, "_font_cache", ["DejaVu Sans"])
    vocab = Vocab.build([["고양이", "얼굴"]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        paths = save_attention_maps(_model(len(vocab), N=1), vocab, ["고양이", "얼굴"], str(tmp_path),
                                    strategy=GREEDY)
    _check_pngs(paths, tmp_path)
    assert titles and all("no CJK font found" in t for t in titles[:1])
    # With a CJK font, or with no CJK text, no such note.
    titles.clear()
    plot.save_attention_grid(np.zeros((1, 1, 2, 2)), ["a", "b"], ["c", "d"], "latin", str(tmp_path / "x.png"))
    assert titles == ["latin"]


def test_empty_source_is_refused(tmp_path):
    vocab = Vocab.build([WORDS])
    with pytest.raises(ValueError, match="empty"):
        save_attention_maps(_model(len(vocab)), vocab, [], str(tmp_path))


@pytest.mark.slow
def test_translate_cli_writes_heatmaps(tmp_path, capsys):
    vocab = Vocab.build([WORDS])
    model = _model(len(vocab))
    ckpt = tmp_path / "ck.npz"
    save_checkpoint(str(ckpt), model, vocab, extra={"levels": {"src": "word", "tgt": "word",
                                                               "bleu_tokenize": "13a"}})
    out_dir = tmp_path / "attention"
    assert main(["translate", "--checkpoint", str(ckpt), "--beam", "2", "--attention", str(out_dir),
                 "four thousand three hundred twenty-one"]) == 0
    captured = capsys.readouterr()
    assert len(captured.out.strip().splitlines()) == 1      # one translation
    assert "3 attention heatmaps" in captured.err
    _check_pngs([str(out_dir / f"{k}.png") for k in ATTENTION_KINDS], out_dir)


def test_a_packaged_cjk_font_is_found_without_importing_its_package(monkeypatch):
    """The learner's install ships NanumGothic in the koreanize-matplotlib wheel: label_fonts()
    registers that file, so Korean labels render on a machine with no CJK font at all."""
    import importlib.util
    import sys

    from minitransformer import plot

    if importlib.util.find_spec("koreanize_matplotlib") is None:
        pytest.skip("koreanize-matplotlib is not installed (pip install -r requirements.txt)")
    paths = plot._packaged_font_files()
    assert paths and paths[0].endswith("NanumGothic.ttf")
    monkeypatch.setattr(plot, "_font_cache", None)
    assert plot.label_fonts() == ["DejaVu Sans", "NanumGothic"]
    assert "koreanize_matplotlib" not in sys.modules         # its import would restyle matplotlib
