"""Tokenization and the vocabulary: strings of text <-> lists of integer ids.

The Transformer never sees text. Its first layer (the embedding of §3.4) looks
up one row of a (V, d_model) table per token id, and its last layer predicts a
distribution over the same V ids. This module makes those ids:

    text --tokenize--> tokens --Vocab.encode--> ids --model--> ids --Vocab.decode--> tokens --detokenize--> text

Four tokenization levels, one function each way (``tokenize``, ``detokenize``):
characters; words, with punctuation split off as a person reads it (``split_words``,
the rule below); whitespace-separated tokens taken as they are ("space": symbols,
linearized trees); and the byte-pair pieces of §5.1 (``data/bpe.py``), which need
the merges learned on the training text.

Four special tokens always have the same ids, in every vocabulary:

    id 0  <pad>  fills the short sentences of a batch up to the longest one;
                 the masks (batching.py) make attention and the loss ignore it.
    id 1  <bos>  "begin of sentence": the decoder's first input (§3.1, the
                 output is "shifted right" by one position).
    id 2  <eos>  "end of sentence": the decoder predicts it to say "done".
    id 3  <unk>  stands for any token the vocabulary does not contain.

Fixing them (pad = 0 in particular) means a checkpoint, a batch and a mask all
agree without having to pass the vocabulary around.
"""

from __future__ import annotations

import operator
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence

from .. import backend
from ..errors import TokenIdError
from . import bpe as _bpe

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS: tuple[str, ...] = (PAD, BOS, EOS, UNK)
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3

# The visible stand-in for a space in character-level tokens. A plain " " token
# would work for the model, but is invisible when a token list is printed; the
# "lower one eighth block" is the marker SentencePiece uses for the same job.
SPACE = "\u2581"  # "▁"

# "char", "word" and "space" need nothing but the text; "bpe" (byte-pair pieces, §5.1) needs
# the merges learned on a training text, a data.bpe.BPE, passed as ``bpe=``.
PLAIN_LEVELS: tuple[str, ...] = ("char", "word", "space")
LEVELS: tuple[str, ...] = (*PLAIN_LEVELS, "bpe")

# -- the word rule ----------------------------------------------------------------------------
# A person writes "Tuesday, March 5, 2024" and "Dienstag, 5. März 2024"; a model that splits on
# spaces alone would know "5," but not "5", and "March" but not "March,". So at level "word" every
# punctuation mark (Unicode category P*) is a token of its own, except inside a word or a number:
KEEP_BETWEEN_LETTERS = "-\u2010'\u2019"    # twenty-one, quatre-vingt-dix, l'heure, don't
KEEP_BETWEEN_DIGITS = "-.,:/"              # 1,234  3.14  10:30  2037-12-25  12/25
# Detokenizing joins tokens with spaces, except before a closing mark and after an opening one,
# so that "Tuesday , March 5 , 2024" prints as "Tuesday, March 5, 2024" and "5 . März" as "5. März".
NO_SPACE_BEFORE = frozenset(".,;:!?)]}%\u2019\u201d\u00bb\u2026")
NO_SPACE_AFTER = frozenset("([{\u2018\u201c\u00ab\u00bf\u00a1")


def _is_punctuation(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P")


def _kept_inside(chunk: str, i: int) -> bool:
    """Whether the punctuation mark chunk[i] stays inside its token (the exceptions of the rule)."""
    if not 0 < i < len(chunk) - 1:
        return False
    before, ch, after = chunk[i - 1], chunk[i], chunk[i + 1]
    if ch in KEEP_BETWEEN_DIGITS and before.isdigit() and after.isdigit():
        return True
    return ch in KEEP_BETWEEN_LETTERS and before.isalnum() and after.isalnum()


def split_words(text: str) -> list[str]:
    """The word rule: split at whitespace, then make every punctuation mark a token of its own,
    except a hyphen or apostrophe between two letters or digits ("twenty-one", "l'heure") and
    "-", ".", ",", ":" or "/" between two digits ("1,234", "3.14", "2037-12-25").

        "Tuesday, March 5, 2024"  -> ["Tuesday", ",", "March", "5", ",", "2024"]
        "Dienstag, 5. März 2024"  -> ["Dienstag", ",", "5", ".", "März", "2024"]
        "one thousand, two hundred and thirty-four" -> [..., "thousand", ",", ..., "thirty-four"]

    Training data and new input go through this one function, so a word is the same token
    whether or not a comma follows it. ``join_words`` is its inverse for text written this way.
    """
    tokens: list[str] = []
    for chunk in text.split():
        start = 0
        for i, ch in enumerate(chunk):
            if _is_punctuation(ch) and not _kept_inside(chunk, i):
                if i > start:
                    tokens.append(chunk[start:i])
                tokens.append(ch)
                start = i + 1
        if start < len(chunk):
            tokens.append(chunk[start:])
    return tokens


def join_words(tokens: Sequence[str]) -> str:
    """Word tokens back to text as a person writes it: single spaces, none before a closing mark
    (, . ; : ! ? ) ...) and none after an opening one (( [ ...). ``split_words`` of the result gives
    the same tokens back."""
    out: list[str] = []
    for tok in tokens:
        if out and tok not in NO_SPACE_BEFORE and out[-1] not in NO_SPACE_AFTER:
            out.append(" ")
        out.append(tok)
    return "".join(out)


# A checkpoint's tokenization (``extra["levels"]``) says which word rule its "word" level means.
# Checkpoints written before this rule split words at whitespace alone, which is level "space"
# now: ``saved_levels`` reads them that way, so an old model still gets the tokens it knows.
WORD_RULE_KEY, WORD_RULE = "word_rule", "punctuation split"


def saved_levels(levels: dict) -> dict:
    """A checkpoint's ``extra["levels"]`` as this version reads it: "word" becomes "space" in one
    saved before the word rule split punctuation (no ``word_rule`` entry)."""
    if levels.get(WORD_RULE_KEY) == WORD_RULE:
        return levels
    old = {side: "space" if levels.get(side) == "word" else levels[side] for side in ("src", "tgt") if side in levels}
    return {**levels, **old, WORD_RULE_KEY: WORD_RULE}


def _check_level(level: str) -> None:
    if level not in LEVELS:
        raise ValueError(f"tokenization level must be one of {LEVELS}, got {level!r}")


def tokenize(text: str, level: str, bpe: _bpe.BPE | None = None) -> list[str]:
    """Split ``text`` into tokens.

    level="char": one token per character; a space becomes the visible token
        "▁" (``SPACE``) so that ``detokenize(tokenize(t, "char"), "char") == t``
        exactly, spaces included. Text that already contains "▁" is refused,
        since it would come back as a space.
    level="word": ``split_words(text)``: runs of whitespace separate words and are
        not kept, and punctuation marks are tokens of their own ("March 5, 2024" ->
        "March", "5", ",", "2024"), except inside a word or a number ("twenty-one",
        "1,234"). Detokenizing joins them as a person writes them (``join_words``).
        A token spelled like a special token ("<eos>", ...) is refused: it would be
        read as that token (an "<eos>" in a source would end it early).
    level="space": ``text.split()``: the whitespace-separated tokens as they are, for
        text that is already tokens (the synthetic symbols, the parser's "(NP" and ")NP");
        detokenizing joins them with single spaces. Specials are refused as for "word".
    level="bpe": the byte-pair pieces of ``bpe`` (the learned merges, ``data.bpe.BPE``),
        "@@" ending every piece but a word's last: "viertausend" -> ["vier@@", "tausend"].
        Words are separated by single spaces; spaces at either end or several in a
        row are refused (``bpe.BPETextError``), since they would not come back.
    """
    _check_level(level)
    if not isinstance(text, str):
        raise TypeError(f"tokenize expects a str, got {type(text).__name__}")
    if (bpe is not None) != (level == "bpe"):
        raise ValueError("level 'bpe' needs the learned merges (bpe=data.bpe.BPE(...))" if bpe is None else
                         f"bpe= (learned merges) applies to level 'bpe' only, not {level!r}")
    if level == "bpe":
        return bpe.tokens(text)
    if level in ("word", "space"):
        words = split_words(text) if level == "word" else text.split()
        reserved = sorted(set(words) & set(SPECIALS))
        if reserved:
            raise ValueError(
                f"{level}-level text may not contain {reserved[0]!r}: the special tokens "
                f"{', '.join(SPECIALS)} are reserved for the vocabulary"
            )
        return words
    if SPACE in text:
        raise ValueError(
            f"character-level text may not contain {SPACE!r} (U+2581): it is the token "
            "that stands for a space, so the text could not be detokenized exactly"
        )
    return [SPACE if ch == " " else ch for ch in text]


def detokenize(tokens: Iterable[str], level: str) -> str:
    """The inverse of :func:`tokenize`: tokens back to one string.

    For "bpe" no merges are needed: a piece ending in "@@" joins the next one.
    """
    _check_level(level)
    tokens = list(tokens)
    if level == "bpe":
        return _bpe.detokenize(tokens)
    if level == "word":
        return join_words(tokens)
    if level == "space":
        return " ".join(tokens)
    return "".join(" " if tok == SPACE else tok for tok in tokens)


class Vocab:
    """A fixed list of tokens; a token's id is its position in the list.

    ``Vocab(tokens)`` puts the four specials first (ids 0..3), then ``tokens``
    in the order given. Specials inside ``tokens`` and repeated tokens are
    skipped (first occurrence wins), so ``Vocab(v.tokens) == v``.
    """

    def __init__(self, tokens: Iterable[str]):
        if isinstance(tokens, str):
            # list("abc") would quietly make a vocabulary of characters.
            raise TypeError("Vocab expects a list of token strings, got one str")
        self._itos: list[str] = list(SPECIALS)
        self._stoi: dict[str, int] = {tok: i for i, tok in enumerate(SPECIALS)}
        for tok in tokens:
            if not isinstance(tok, str):
                raise TypeError(f"Vocab tokens must be str, got {type(tok).__name__}: {tok!r}")
            if tok not in self._stoi:
                self._stoi[tok] = len(self._itos)
                self._itos.append(tok)

    @classmethod
    def build(cls, token_lists: Iterable[Iterable[str]], min_freq: int = 1) -> Vocab:
        """Count tokens over a corpus (a list of token lists) and keep the frequent ones.

        Order: most frequent first, ties broken alphabetically, so the same
        corpus always gives the same ids (the checkpoint depends on it).
        Tokens seen fewer than ``min_freq`` times are left out; at encode time
        they become <unk>.
        """
        if isinstance(min_freq, bool) or not isinstance(min_freq, int) or min_freq < 1:
            raise ValueError(f"min_freq must be an integer >= 1, got {min_freq!r}")
        counts: Counter[str] = Counter()
        for tokens in token_lists:
            if isinstance(tokens, str):
                raise TypeError(
                    "Vocab.build expects a list of token *lists*; got a str "
                    "(tokenize each sentence first)"
                )
            counts.update(tokens)
        kept = [tok for tok, c in counts.items() if c >= min_freq and tok not in SPECIALS]
        kept.sort(key=lambda tok: (-counts[tok], tok))
        return cls(kept)

    # -- sizes and the special ids ------------------------------------------------
    def __len__(self) -> int:
        return len(self._itos)

    def __contains__(self, token: object) -> bool:
        return token in self._stoi

    @property
    def tokens(self) -> list[str]:
        """All tokens, specials first; ``tokens[i]`` has id ``i`` (a copy)."""
        return list(self._itos)

    @property
    def pad_id(self) -> int:
        return PAD_ID

    @property
    def bos_id(self) -> int:
        return BOS_ID

    @property
    def eos_id(self) -> int:
        return EOS_ID

    @property
    def unk_id(self) -> int:
        return UNK_ID

    # -- single lookups -------------------------------------------------------------
    def id(self, token: str) -> int:
        """The id of ``token``; the <unk> id if the vocabulary does not have it."""
        return self._stoi.get(token, UNK_ID)

    def token(self, id: int) -> str:
        """The token with id ``id``; TokenIdError if no token has that id."""
        return self._itos[self._check_id(id)]

    def _check_id(self, i) -> int:
        try:
            i = operator.index(i)  # accepts int and NumPy integers, refuses 2.0
        except TypeError:
            raise TypeError(f"token ids must be integers, got {type(i).__name__}: {i!r}") from None
        # Check explicitly: Python would happily read _itos[-1].
        if not 0 <= i < len(self._itos):
            raise TokenIdError(
                f"token id {i} is outside the vocabulary of size {len(self._itos)} "
                f"(valid ids are 0..{len(self._itos) - 1})"
            )
        return i

    # -- whole sequences ----------------------------------------------------------
    def encode(self, tokens: Sequence[str], add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Token strings -> ids. Unknown tokens become the <unk> id.

        ``add_bos``/``add_eos`` wrap the ids in <bos> ... <eos>. (The batcher
        adds them itself when it builds decoder inputs and targets, so the
        usual call leaves both False.)
        """
        if isinstance(tokens, str):
            raise TypeError(
                "Vocab.encode expects a list of tokens, got a str; call tokenize(text, level) first"
            )
        ids = [self._stoi.get(tok, UNK_ID) for tok in tokens]
        if add_bos:
            ids.insert(0, BOS_ID)
        if add_eos:
            ids.append(EOS_ID)
        return ids

    def decode(self, ids, strip_special: bool = True) -> list[str]:
        """Ids (a list or a 1-D array) -> token strings.

        With ``strip_special`` (the default), reading stops at the first <eos>
        (whatever the model produced after it is not part of the sentence), and
        <pad> and <bos> are dropped. <unk> is kept: it *is* part of the output.
        Every id is checked, even ones after <eos>; an id outside the
        vocabulary raises TokenIdError.
        """
        if hasattr(ids, "shape"):  # a NumPy or CuPy array
            if len(ids.shape) != 1:
                raise ValueError(f"Vocab.decode expects a 1-D sequence of ids, got shape {tuple(ids.shape)}")
            ids = backend.to_numpy(ids).tolist()
        checked = [self._check_id(i) for i in ids]
        if not strip_special:
            return [self._itos[i] for i in checked]
        out: list[str] = []
        for i in checked:
            if i == EOS_ID:
                break
            if i in (PAD_ID, BOS_ID):
                continue
            out.append(self._itos[i])
        return out

    # -- saving ---------------------------------------------------------------------
    def to_dict(self) -> dict:
        """A JSON-able description, stored in checkpoints next to the weights."""
        return {"tokens": list(self._itos)}

    @classmethod
    def from_dict(cls, d: dict) -> Vocab:
        """Rebuild a Vocab saved by :meth:`to_dict`, checking it is one."""
        tokens = d.get("tokens") if isinstance(d, dict) else None
        if not isinstance(tokens, list):
            raise ValueError("Vocab.from_dict expects a dict with a 'tokens' list (from Vocab.to_dict)")
        if tuple(tokens[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(
                f"Vocab.from_dict: the saved tokens must start with the specials {list(SPECIALS)}, "
                f"got {tokens[: len(SPECIALS)]}"
            )
        if len(set(tokens)) != len(tokens):
            raise ValueError("Vocab.from_dict: the saved tokens contain duplicates")
        return cls(tokens[len(SPECIALS):])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocab):
            return NotImplemented
        return self._itos == other._itos

    __hash__ = None  # mutable-looking container with value equality: not hashable

    def __repr__(self) -> str:
        preview = ", ".join(repr(t) for t in self._itos[len(SPECIALS): len(SPECIALS) + 5])
        more = ", ..." if len(self._itos) > len(SPECIALS) + 5 else ""
        return f"Vocab(size={len(self)}, tokens=[{preview}{more}])"


def bpe_vocab(bpe: _bpe.BPE) -> Vocab:
    """The one vocabulary of a byte-pair encoded task, shared by source and target (§5.1):
    the specials, then every piece the merges can make (``BPE.vocabulary``: the initial
    symbols, then one piece per merge), so its size is 4 + symbols + merges.

    A piece spelled like a special token is refused (``bpe.BPETextError``): a training
    text with many words ending in "<eos>" would teach a merge whose piece is "<eos>",
    and every such word would then end the sentence.
    """
    pieces = bpe.vocabulary()
    reserved = [piece for piece in pieces if piece in SPECIALS]
    if reserved:
        raise _bpe.BPETextError(
            f"the merges make the piece {reserved[0]!r}, spelled like the special token; the training text "
            f"has words ending in {reserved[0]!r} (the special tokens {', '.join(SPECIALS)} are reserved)")
    return Vocab(pieces)
