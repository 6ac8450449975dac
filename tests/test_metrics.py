"""minitransformer.metrics against sacrebleu, the reference implementation.

Every fixed corpus is scored by both implementations in all three tokenize
modes and must agree to 1e-6 on the score (and on lengths and precisions).
"""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minitransformer.metrics import (
    BleuScore,
    corpus_bleu,
    corpus_chrf,
    exact_match,
    tokenize_13a,
)

sacrebleu = pytest.importorskip(
    "sacrebleu", reason="sacrebleu is not installed (pip install -r requirements-dev.txt): "
                        "it is the reference these metrics are checked against"
)

TOL = 1e-6
MODES = ["13a", "char", "none"]

# name -> (hypotheses, references)
CORPORA = {
    "english": (
        ["The cat sat on the mat.", "It is raining today, isn't it?",
         "He bought 3.5 kg of apples (for $4,000)!"],
        ["The cat sat on a mat.", "It's raining today, isn't it?",
         "He bought 3.5 kg of apples (for $4,000)."],
    ),
    "french_apostrophes": (
        ["L'homme qu'il a vu n'est pas là.", "C’est l’été : « il fait chaud » !",
         "Aujourd'hui, j'ai mangé -- beaucoup."],
        ["L'homme qu’il a vu n'est pas là.", "C’est l’été ; il fait très chaud !",
         "Aujourd'hui j'ai beaucoup mangé."],
    ),
    "german": (
        ["Der schnelle braune Fuchs springt über den faulen Hund.",
         "Zweitausendvierundzwanzig war ein Schaltjahr.",
         "Dienstag, 5. März 2024"],
        ["Der schnelle, braune Fuchs sprang über den faulen Hund.",
         "Zweitausendvierundzwanzig ist ein Schaltjahr.",
         "Dienstag, 5. März 2024"],
    ),
    "korean": (
        ["2024년 3월 5일 화요일", "마스크 낀 얼굴", "하품하는 얼굴입니다."],
        ["2024년 3월 5일 화요일", "마스크를 낀 얼굴", "하품하는 얼굴"],
    ),
    "perfect": (
        ["one two three four five", "a b c d e f g"],
        ["one two three four five", "a b c d e f g"],
    ),
    "no_match": (
        ["alpha beta gamma delta", "epsilon zeta"],
        ["one two three four", "five six seven"],
    ),
    "short_hyps_under_4_tokens": (
        ["the cat", "a dog", "yes"],
        ["the cat sat", "a dog ran away", "yes"],
    ),
    "brevity_penalty": (
        ["the cat sat on the mat", "it is a nice day"],
        ["the cat sat on the mat today in the sun", "it is a really nice day outside"],
    ),
    "longer_than_reference": (
        ["the cat sat on the mat on the mat on the mat", "hello hello hello hello"],
        ["the cat sat on the mat", "hello world"],
    ),
    "unigram_matches_only": (
        ["d c b a", "z y x w"],
        ["a b c d", "w x y z"],
    ),
    "edge_whitespace_and_markup": (
        ["  trailing space   ", "tab\tinside", "x &amp; y &lt;tag&gt;", "hyphen-\n", ""],
        ["trailing space", "tab inside", "x & y <tag>", "hyphen-", "empty hyp"],
    ),
    "numbers_and_dashes": (
        ["1990-2000 was 1,000.5 years?", "pages 10-20, 30.", "v1.2.3-rc"],
        ["1990 - 2000 was 1,000.5 years.", "pages 10-20 , 30 .", "v1.2.3-rc"],
    ),
}


def _sacre_bleu(hyps, refs, tokenize):
    return sacrebleu.corpus_bleu(hyps, [refs], tokenize=tokenize)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(CORPORA))
def test_bleu_matches_sacrebleu(name, mode):
    hyps, refs = CORPORA[name]
    ours = corpus_bleu(hyps, refs, tokenize=mode)
    theirs = _sacre_bleu(hyps, refs, mode)
    assert ours.score == pytest.approx(theirs.score, abs=TOL)
    assert ours.sys_len == theirs.sys_len
    assert ours.ref_len == theirs.ref_len
    assert ours.bp == pytest.approx(theirs.bp, abs=TOL)
    assert ours.precisions == pytest.approx(theirs.precisions, abs=TOL)
    assert list(ours.counts) == list(theirs.counts)
    assert list(ours.totals) == list(theirs.totals)


@pytest.mark.parametrize("name", sorted(CORPORA))
def test_chrf_matches_sacrebleu(name):
    hyps, refs = CORPORA[name]
    assert corpus_chrf(hyps, refs) == pytest.approx(
        sacrebleu.corpus_chrf(hyps, [refs]).score, abs=TOL)


def test_known_values():
    perfect = corpus_bleu(*CORPORA["perfect"])
    assert perfect.score == pytest.approx(100.0)
    assert perfect.bp == 1.0
    assert corpus_bleu(*CORPORA["no_match"]).score == 0.0
    # With no match at all, every precision is reported as 0 (no smoothing).
    assert corpus_bleu(*CORPORA["no_match"]).precisions == [0.0] * 4
    # Hypotheses under 4 tokens have no 4-grams: BLEU is 0 despite matches.
    assert corpus_bleu(*CORPORA["short_hyps_under_4_tokens"]).score == 0.0
    bp_case = corpus_bleu(*CORPORA["brevity_penalty"])
    assert bp_case.bp == pytest.approx(math.exp(1 - 17 / 11))  # 11 hyp vs 17 ref tokens
    assert (bp_case.sys_len, bp_case.ref_len) == (11, 17)
    assert corpus_chrf(*CORPORA["perfect"]) == pytest.approx(100.0)


def test_exp_smoothing_of_zero_orders():
    # Only unigrams match: orders 2, 3, 4 get 100/(2*6), 100/(4*4), 100/(8*2).
    s = corpus_bleu(["d c b a", "z y x w"], ["a b c d", "w x y z"])
    assert s.precisions == pytest.approx([100.0, 100 / 12, 100 / 16, 100 / 16])


def test_max_order():
    hyps, refs = CORPORA["english"]
    for order in (1, 2, 3):
        theirs = sacrebleu.metrics.BLEU(max_ngram_order=order).corpus_score(hyps, [refs])
        ours = corpus_bleu(hyps, refs, max_order=order)
        assert len(ours.precisions) == order
        assert ours.score == pytest.approx(theirs.score, abs=TOL)


def test_bleu_str():
    text = str(corpus_bleu(["the cat sat on the mat"], ["the cat sat on a mat today"]))
    assert text.startswith("BLEU = ")
    assert "p1..p4 = " in text and "BP = " in text
    assert "hyp_len=6" in text and "ref_len=7" in text


def test_bleu_score_is_frozen():
    s = corpus_bleu(["a b c d"], ["a b c d"])
    assert isinstance(s, BleuScore)
    with pytest.raises(AttributeError):
        s.score = 1.0


def test_tokenize_13a_examples():
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a
    theirs = Tokenizer13a()
    for line in ["Hello, world! It's 3.14.", "1990-2000 (approx.)", "a/b:c;d",
                 "x &quot;y&quot;", "l'été, c’est «bien»", "e-mail 1,000,000 3-4"]:
        assert tokenize_13a(line) == theirs(line).split()
    assert tokenize_13a("Hello, world! It's 3.14.") == [
        "Hello", ",", "world", "!", "It's", "3.14", "."]


def test_exact_match():
    assert exact_match(["a b", " c ", "d"], ["a b", "c", "D"]) == pytest.approx(2 / 3)
    assert exact_match(["x"], ["x"]) == 1.0


@pytest.mark.parametrize("fn", [corpus_bleu, corpus_chrf, exact_match])
def test_length_mismatch_and_empty(fn):
    with pytest.raises(ValueError, match=r"3.*2"):
        fn(["a", "b", "c"], ["a", "b"])
    with pytest.raises(ValueError, match="empty"):
        fn([], [])
    with pytest.raises(TypeError):
        fn("a string", "a string")


def test_unknown_tokenize_mode():
    with pytest.raises(ValueError, match="13a"):
        corpus_bleu(["a"], ["a"], tokenize="intl")


# --------------------------------------------------------------------------
# Property tests: random small corpora against sacrebleu
# --------------------------------------------------------------------------

# Whole words from a tiny vocabulary, so that long n-grams do match sometimes.
_words = st.sampled_from(["the", "cat", "sat", "a", "mat", "on", "dog", "l'eau", "3.5", ","])
_sentence = st.lists(_words, min_size=0, max_size=8).map(" ".join)
_word_corpus = st.integers(1, 5).flatmap(
    lambda n: st.tuples(st.lists(_sentence, min_size=n, max_size=n),
                        st.lists(_sentence, min_size=n, max_size=n)))

# Raw strings from a tiny alphabet of letters, digits, punctuation and spaces,
# to exercise the tokenizers' corner cases.
_raw = st.text(alphabet="ab1.,-'& ;:\n", max_size=14)
_raw_corpus = st.integers(1, 4).flatmap(
    lambda n: st.tuples(st.lists(_raw, min_size=n, max_size=n),
                        st.lists(_raw, min_size=n, max_size=n)))


@settings(max_examples=150, deadline=None)
@given(corpus=_word_corpus, mode=st.sampled_from(MODES))
def test_bleu_property_words(corpus, mode):
    hyps, refs = corpus
    ours = corpus_bleu(hyps, refs, tokenize=mode)
    theirs = _sacre_bleu(hyps, refs, mode)
    assert ours.score == pytest.approx(theirs.score, abs=TOL)
    assert (ours.sys_len, ours.ref_len) == (theirs.sys_len, theirs.ref_len)


@settings(max_examples=150, deadline=None)
@given(corpus=_raw_corpus, mode=st.sampled_from(MODES))
def test_bleu_property_raw_text(corpus, mode):
    hyps, refs = corpus
    ours = corpus_bleu(hyps, refs, tokenize=mode)
    theirs = _sacre_bleu(hyps, refs, mode)
    assert ours.score == pytest.approx(theirs.score, abs=TOL)
    assert (ours.sys_len, ours.ref_len) == (theirs.sys_len, theirs.ref_len)


@settings(max_examples=150, deadline=None)
@given(corpus=st.one_of(_word_corpus, _raw_corpus))
def test_chrf_property(corpus):
    hyps, refs = corpus
    assert corpus_chrf(hyps, refs) == pytest.approx(
        sacrebleu.corpus_chrf(hyps, [refs]).score, abs=TOL)
