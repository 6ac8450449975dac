"""Every exercise of the lessons, in one table: its number, title, checker, points, the time it
takes and what to have read first.

``python -m minitransformer grade`` scores each exercise with ``points(number)``: the entry in
POINTS, or DEFAULT_POINTS (1) for an exercise POINTS does not list. A teacher who wants other
weights passes ``--points FILE`` (a JSON object such as ``{"1.3": 2, "12.4": 3}``) instead of
editing this file. ``minutes`` is an estimate for a learner who has worked through the lesson
up to the exercises, not a measurement; ``needs`` names what the exercise builds on.

tests/test_exercise_catalogue.py keeps this table, the checkers' ``@exercise`` numbers, the
``### Exercise L.n — title`` headings of the lessons and docs/teachers.md in agreement.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["DEFAULT_POINTS", "EXERCISES", "POINTS", "Exercise", "for_lesson", "markdown_table", "points"]

DEFAULT_POINTS = 1
POINTS: dict[str, int] = {}            # exercise number -> points, where it is not DEFAULT_POINTS


class Exercise(NamedTuple):
    number: str       # "1.3": lesson 1, third exercise
    title: str        # as in the lesson's heading "### Exercise 1.3 — <title>"
    checker: str      # "<module of lessonkit.exercises>.<function>"
    minutes: int      # estimated time, for a learner who has read the lesson
    needs: str        # what the exercise builds on

    @property
    def lesson(self) -> int:
        return int(self.number.split(".")[0])


EXERCISES: tuple[Exercise, ...] = (
    Exercise("0.1", "a numerical gradient", "lessons_0_3.check_numerical_gradient", 10,
             "lesson 0 §3 (the central difference)"),
    Exercise("0.2", "find and fix the bug", "lessons_0_3.check_linear_backward", 15,
             "lesson 0 §3 (the gradient check that names the tensor)"),
    Exercise("1.1", "softmax backward", "lessons_0_3.check_softmax_backward", 15,
             "lesson 1: the softmax Jacobian"),
    Exercise("1.2", "a causal mask", "lessons_0_3.check_causal_mask", 5, "lesson 1: masks"),
    Exercise("1.3", "attention backward, from the cache", "lessons_0_3.check_attention_backward", 25,
             "Exercise 1.1; lesson 1: the attention backward"),
    Exercise("2.1", "the backward of Concat", "lessons_0_3.check_merge_heads_backward", 10,
             "lesson 2: split and concat as reshapes"),
    Exercise("2.2", "FLOPs of the whole layer", "lessons_0_3.check_attention_flops", 15,
             "lesson 2: FLOPs of h heads vs one"),
    Exercise("2.3", "the decoder's self-attention mask", "lessons_0_3.check_decoder_mask", 10,
             "Exercise 1.2; lesson 2: the three uses and their masks"),
    Exercise("2.4", "the backward of the fused projection", "lessons_0_3.check_qkv_projection_backward", 20,
             "lesson 0's linear backward; lesson 2: the fused W_qkv"),
    Exercise("3.1", "ReLU backward", "lessons_0_3.check_relu_backward", 5, "lesson 3: ReLU"),
    Exercise("3.2", "FFN backward", "lessons_0_3.check_ffn_backward", 20,
             "Exercise 3.1; lesson 0's linear backward"),
    Exercise("4.1", "LayerNorm backward", "lessons_4_7.check_layernorm_backward", 30,
             "lesson 4: the LayerNorm backward derived"),
    Exercise("4.2", "a post-LN block with a linear sub-layer", "lessons_4_7.check_post_ln_residual_backward", 20,
             "lesson 4: residuals, post-LN"),
    Exercise("4.3", "the same block, pre-LN", "lessons_4_7.check_pre_ln_residual_backward", 15,
             "Exercise 4.2; lesson 4: pre-LN"),
    Exercise("5.1", "embedding backward, with repeated tokens", "lessons_4_7.check_embedding_backward", 15,
             "lesson 5: the √d_model scale and scatter-add"),
    Exercise("5.2", "the tied gradient", "lessons_4_7.check_tied_embedding_grad", 20,
             "Exercise 5.1; lesson 5: three-way tying"),
    Exercise("6.1", "the table", "lessons_4_7.check_sinusoidal_pe", 10, "lesson 6: the encoding of §3.5"),
    Exercise("6.2", "similarity in closed form", "lessons_4_7.check_pe_similarity", 20,
             "lesson 6 §4: the closed form of PE(pos)·PE(pos+k)"),
    Exercise("7.1", "shifting the target right", "lessons_4_7.check_shift_right", 15,
             "lesson 7: the decoder's inputs and targets"),
    Exercise("7.2", "parameters of one encoder layer", "lessons_4_7.check_encoder_layer_params", 10,
             "lessons 2-4: the layers an encoder layer holds"),
    Exercise("7.3", "parameters of the whole model", "lessons_4_7.check_transformer_params", 15,
             "Exercise 7.2; lesson 5: tying"),
    Exercise("8.1", "the backward of additive attention", "lesson_08.check_additive_attention_backward", 40,
             "lesson 1's attention backward; lesson 8 §8: additive attention"),
    Exercise("8.2", "how many layers?", "lesson_08.check_layers_needed", 20,
             "lesson 8 §5: maximum path length"),
    Exercise("8.3", "count the FLOPs", "lesson_08.check_layer_flops", 25,
             "lesson 8 §3: FLOPs counted exactly"),
    Exercise("8.4", "remove one head", "lesson_08.check_head_ablation", 15,
             "lesson 2: the heads and W^O; lesson 8 §10: interpretability"),
    Exercise("9.1", "the learning-rate schedule", "lesson_09.check_noam_lr", 10,
             "lesson 9 §3: the schedule of Eq. (3)"),
    Exercise("9.2", "one Adam update", "lesson_09.check_adam_step", 15,
             "lesson 9 §2: Adam's update and bias correction"),
    Exercise("9.3", "the gradient that starts every backward pass", "lesson_09.check_dlogits", 25,
             "lesson 9 §4: label smoothing's gradient p - q"),
    Exercise("10.1", "one step of beam search", "lesson_10.check_beam_step", 20, "lesson 10 §3: beam search"),
    Exercise("10.2", "corpus BLEU", "lesson_10.check_corpus_bleu", 25, "lesson 10 §4: BLEU by hand"),
    Exercise("10.3", "greedy decoding with the cache", "lesson_10.check_greedy_decode", 25,
             "lesson 10 §1: greedy decoding on encode / KVCache / decode_step"),
    Exercise("11.1", "the learned table's backward", "lesson_11.check_learned_pe_backward", 15,
             "lesson 11: the learned positional embedding"),
    Exercise("11.2", "perplexity", "lesson_11.check_perplexity", 15, "lesson 11: Table 3's PPL column"),
    Exercise("11.3", "the parameter column of a variation", "lesson_11.check_variation_params", 20,
             "Exercise 7.3; lesson 11: rows A-E"),
    Exercise("12.1", "mystery bug 1", "lesson_12.check_mystery", 15,
             "lesson 12 §1-5: what each check compares with"),
    Exercise("12.2", "mystery bug 2", "lesson_12.check_mystery", 15, "lesson 12 §1-5"),
    Exercise("12.3", "mystery bug 3", "lesson_12.check_mystery", 15, "lesson 12 §1-5"),
    Exercise("12.4", "close parity's gap with a property", "lesson_12.check_pe_property", 20,
             "Exercise 12.1; lesson 6: the encoding of §3.5"),
    Exercise("13.1", "one merge step", "lesson_13.check_merge_step", 15,
             "lesson 13 §1: the merge loop by hand"),
    Exercise("13.2", "a word's pieces", "lesson_13.check_segment", 15,
             "Exercise 13.1; lesson 13 §2: applying the merges, the earliest first"),
    Exercise("13.3", "averaging two checkpoints", "lesson_13.check_average_two", 10,
             "lesson 13 §6: the element-wise mean of §6.1"),
    Exercise("14.1", "a ring allreduce", "lesson_14.check_ring_allreduce", 30,
             "lesson 14 §3: allreduce by hand, a ring"),
    Exercise("14.2", "the token-weighted gradient", "lesson_14.check_token_weighted", 15,
             "lesson 14 §2 and §4: a batch's gradient is a sum; the token-count trap"),
    Exercise("15.1", "a tree as target tokens", "lesson_15.check_linearize", 15,
             "lesson 15 §2: a tree as a sentence"),
    Exercise("15.2", "bracket F1 of one pair of trees", "lesson_15.check_bracket_f1", 20,
             "lesson 15 §4: bracket F1 by hand"),
    Exercise("15.3", "repair an ill-formed output", "lesson_15.check_repair", 25,
             "Exercise 15.1; data/trees.py: the repair rule"),
)


def points(number: str, overrides: dict[str, int] | None = None) -> int:
    """The points Exercise ``number`` is worth: ``overrides``, then POINTS, then DEFAULT_POINTS."""
    for table in (overrides or {}, POINTS):
        if number in table:
            return table[number]
    return DEFAULT_POINTS


def for_lesson(lesson: int) -> list[Exercise]:
    """The exercises of one lesson, in order."""
    return [e for e in EXERCISES if e.lesson == lesson]


def markdown_table() -> str:
    """The table of docs/teachers.md: one row per exercise (a test keeps the page in step)."""
    rows = ["| exercise | lesson's title | points | minutes | builds on |", "| --- | --- | --- | --- | --- |"]
    for e in EXERCISES:
        rows.append(f"| {e.number} | {e.title} | {points(e.number)} | {e.minutes} | {e.needs} |")
    total = sum(e.minutes for e in EXERCISES)
    rows.append(f"| all {len(EXERCISES)} | | {sum(points(e.number) for e in EXERCISES)} | {total} | |")
    return "\n".join(rows)
