"""Tokenization and Vocab: exact round trips, fixed special ids, clear errors."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitransformer.data.bpe import BPE
from minitransformer.data.vocab import (
    BOS,
    EOS,
    PAD,
    SPACE,
    UNK,
    Vocab,
    detokenize,
    tokenize,
)
from minitransformer.errors import TokenIdError

# -- tokenize / detokenize ------------------------------------------------------------


def test_char_tokens_keep_spaces_visible():
    assert tokenize("ab c", "char") == ["a", "b", SPACE, "c"]
    assert SPACE == "\u2581"


def test_word_tokens_split_on_whitespace():
    assert tokenize("  the  cat\tsat\n", "word") == ["the", "cat", "sat"]
    assert detokenize(["the", "cat", "sat"], "word") == "the cat sat"


@pytest.mark.parametrize("text, tokens", [
    ("Tuesday, March 5, 2024", ["Tuesday", ",", "March", "5", ",", "2024"]),
    ("Dienstag, 5. März 2024", ["Dienstag", ",", "5", ".", "März", "2024"]),
    ("one thousand, two hundred and thirty-four", ["one", "thousand", ",", "two", "hundred", "and", "thirty-four"]),
    ("quatre-vingt-dix-neuf", ["quatre-vingt-dix-neuf"]),
    ("l'heure d’été", ["l'heure", "d’été"]),
    ("1,234.5 at 10:30 on 2037-12-25", ["1,234.5", "at", "10:30", "on", "2037-12-25"]),
    ("(the 25th of December)!", ["(", "the", "25th", "of", "December", ")", "!"]),
    ("well-- no", ["well", "-", "-", "no"]),
    ("¿Qué? «oui»", ["¿", "Qué", "?", "«", "oui", "»"]),
])
def test_word_level_splits_punctuation_from_words_and_prints_it_back(text, tokens):
    assert tokenize(text, "word") == tokens
    assert tokenize(text, "space") == text.split()           # level space: whitespace only
    if text != "well-- no":                                   # written with a dash a person would space
        assert detokenize(tokens, "word") == text


@given(st.text(alphabet="ab1 ,.-'’()?:/\t", max_size=30))
def test_word_tokens_come_back_from_their_detokenized_text(text):
    tokens = tokenize(text, "word")
    assert tokenize(detokenize(tokens, "word"), "word") == tokens
    assert all(tok.strip() == tok and tok for tok in tokens)


def test_every_word_level_task_sentence_prints_back_as_generated():
    from minitransformer.data.registry import TASKS

    for task in TASKS.values():
        if "word" not in (task.src_level, task.tgt_level) or task.name.startswith("emoji"):
            continue
        for src, tgt in task.splits(0)["test"][:300]:
            for text, level in ((src, task.src_level), (tgt, task.tgt_level)):
                assert detokenize(tokenize(text, level), level) == text, (task.name, text)


@given(st.text(alphabet=st.characters(blacklist_characters=SPACE)))
def test_char_round_trip_is_exact(text):
    assert detokenize(tokenize(text, "char"), "char") == text


@given(st.lists(st.text(alphabet="abcxyz", min_size=1), max_size=8))
def test_word_round_trip(words):
    text = " ".join(words)
    assert detokenize(tokenize(text, "word"), "word") == text


@pytest.mark.parametrize("fn", [lambda lv: tokenize("abc", lv), lambda lv: detokenize(["a"], lv)])
def test_bad_level_names_the_valid_ones(fn):
    with pytest.raises(ValueError, match=r"one of \('char', 'word', 'space', 'bpe'\), got 'sentencepiece'"):
        fn("sentencepiece")


def test_bpe_level_needs_its_merges_and_only_it_takes_them():
    with pytest.raises(ValueError, match="level 'bpe' needs the learned merges"):
        tokenize("abc", "bpe")
    with pytest.raises(ValueError, match="applies to level 'bpe' only, not 'word'"):
        tokenize("abc", "word", BPE([]))
    bpe = BPE.learn(["viertausend dreitausend"] * 2, 10)
    tokens = tokenize("viertausend drei", "bpe", bpe)
    # "viertausend" was learned whole; "drei" never occurred, so no merge joins its letters
    assert tokens == ["viertausend", "d@@", "r@@", "e@@", "i"]
    assert detokenize(tokens, "bpe") == "viertausend drei"       # no merges needed to detokenize


def test_char_text_with_the_space_marker_is_refused():
    with pytest.raises(ValueError, match="U\\+2581"):
        tokenize(f"a{SPACE}b", "char")


def test_tokenize_wants_a_str():
    with pytest.raises(TypeError, match="expects a str"):
        tokenize(["a"], "char")


# -- Vocab ---------------------------------------------------------------------------------


def test_specials_have_fixed_ids():
    v = Vocab(["a", "b"])
    assert v.tokens[:4] == [PAD, BOS, EOS, UNK]
    assert (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (0, 1, 2, 3)
    assert [v.id(t) for t in (PAD, BOS, EOS, UNK)] == [0, 1, 2, 3]
    assert len(v) == 6


def test_no_duplicates_and_specials_not_repeated():
    v = Vocab(["a", "b", "a", EOS, "c"])
    assert v.tokens == [PAD, BOS, EOS, UNK, "a", "b", "c"]
    assert Vocab(v.tokens) == v


def test_build_orders_by_frequency_then_token():
    corpus = [["b", "a", "c"], ["c", "a"], ["a", "d", "c"], [EOS]]
    v = Vocab.build(corpus)
    # a: 3, c: 3 (tie -> alphabetical), b: 1, d: 1; the <eos> in the data is not re-added
    assert v.tokens[4:] == ["a", "c", "b", "d"]
    # the same corpus in another order gives the same vocabulary
    assert Vocab.build(list(reversed(corpus))) == v


def test_build_min_freq():
    v = Vocab.build([["a", "a", "b"]], min_freq=2)
    assert v.tokens[4:] == ["a"]
    assert v.encode(["b"]) == [v.unk_id]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_build_bad_min_freq(bad):
    with pytest.raises(ValueError, match="min_freq must be an integer >= 1"):
        Vocab.build([["a"]], min_freq=bad)


def test_build_refuses_untokenized_strings():
    with pytest.raises(TypeError, match="tokenize each sentence first"):
        Vocab.build(["hello world"])


def test_vocab_refuses_a_single_str():
    with pytest.raises(TypeError, match="got one str"):
        Vocab("abc")


def test_vocab_refuses_non_str_tokens():
    with pytest.raises(TypeError, match="must be str, got int"):
        Vocab(["a", 5])


def test_encode_decode():
    v = Vocab(["a", "b"])
    assert v.encode(["a", "b", "zzz"]) == [4, 5, 3]
    assert v.encode(["a"], add_bos=True, add_eos=True) == [1, 4, 2]
    assert v.decode([1, 4, 5, 3, 2, 4, 0]) == ["a", "b", UNK]  # stops at EOS, drops BOS, keeps UNK
    assert v.decode([1, 4, 2, 0], strip_special=False) == [BOS, "a", EOS, PAD]
    assert v.decode(np.array([4, 0, 5])) == ["a", "b"]  # arrays and NumPy ints work


def test_encode_refuses_a_str():
    with pytest.raises(TypeError, match="call tokenize"):
        Vocab(["a"]).encode("a")


def test_token_and_id():
    v = Vocab(["a"])
    assert v.token(4) == "a"
    assert v.token(np.int64(0)) == PAD
    assert v.id("a") == 4
    assert v.id("never seen") == v.unk_id
    assert "a" in v and "b" not in v


@pytest.mark.parametrize("bad", [6, 100, -1])
def test_decode_out_of_range_names_id_and_size(bad):
    v = Vocab(["a", "b"])  # size 6
    with pytest.raises(TokenIdError, match=rf"token id {bad} is outside the vocabulary of size 6"):
        v.decode([4, bad])
    with pytest.raises(TokenIdError, match=rf"token id {bad} .* size 6"):
        v.token(bad)


def test_decode_checks_ids_after_eos_too():
    v = Vocab(["a"])
    with pytest.raises(TokenIdError, match="token id 99"):
        v.decode([4, 2, 99])


def test_decode_refuses_float_ids_and_2d_arrays():
    v = Vocab(["a"])
    with pytest.raises(TypeError, match="must be integers"):
        v.decode([4.0])
    with pytest.raises(ValueError, match="1-D"):
        v.decode(np.zeros((2, 2), dtype=np.int64))


def test_dict_round_trip_through_json():
    v = Vocab.build([tokenize("hello world", "char")])
    d = json.loads(json.dumps(v.to_dict()))
    assert Vocab.from_dict(d) == v
    assert Vocab.from_dict(d).tokens == v.tokens


def test_eq():
    assert Vocab(["a", "b"]) == Vocab(["a", "b"])
    assert Vocab(["a", "b"]) != Vocab(["b", "a"])
    assert Vocab(["a"]) != ["a"]


@pytest.mark.parametrize(
    "d, message",
    [
        ({}, "expects a dict with a 'tokens' list"),
        ({"tokens": ["a", "b"]}, "must start with the specials"),
        ({"tokens": [PAD, BOS, EOS, UNK, "a", "a"]}, "duplicates"),
    ],
)
def test_from_dict_bad_input(d, message):
    with pytest.raises(ValueError, match=message):
        Vocab.from_dict(d)
