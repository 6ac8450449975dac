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

import json
import math
import pathlib
import re
from typing import NamedTuple

__all__ = ["DEFAULT_POINTS", "EXERCISES", "NEEDS", "POINTS", "Exercise", "for_lesson", "lesson_table", "markdown_table",
           "points", "reading_minutes"]

DEFAULT_POINTS = 1
POINTS: dict[str, int] = {}            # exercise number -> points, where it is not DEFAULT_POINTS


class Exercise(NamedTuple):
    number: str       # "1.3": lesson 1, third exercise
    title: str        # as in the lesson's heading "### Exercise 1.3 — <title>"
    checker: str      # "<module of lessonkit.exercises>.<function>"
    minutes: int      # estimated time, for a learner who has read the lesson
    needs: str        # what the exercise builds on
    stub: str = ""    # the learner's name for the answer in the lesson: "my_relu_backward", "my_answer_1"
    # The package's own answer: "module:qualname" of the functions (a class: all its methods) whose call,
    # while the learner's function runs for grading, means the learner did not write it.
    answers: tuple[str, ...] = ()

    @property
    def lesson(self) -> int:
        return int(self.number.split(".")[0])


EXERCISES: tuple[Exercise, ...] = (
    Exercise("0.1", "a numerical gradient", "lessons_0_3.check_numerical_gradient", 10,
             "lesson 0 §3 (the central difference)",
             stub="my_numerical_gradient", answers=("minitransformer.gradcheck:numerical_gradient",)),
    Exercise("0.2", "find and fix the bug", "lessons_0_3.check_linear_backward", 15,
             "lesson 0 §3 (the gradient check that names the tensor)",
             stub="my_linear_backward", answers=(
                 "minitransformer.layers.linear:linear_backward",
                 "minitransformer.layers.linear:Linear.backward")),
    Exercise("1.1", "softmax backward", "lessons_0_3.check_softmax_backward", 15,
             "lesson 1: the softmax Jacobian",
             stub="my_softmax_backward", answers=(
                 "minitransformer.layers.attention:attention_backward",
                 "lessonkit.exercises.lessons_0_3:_softmax_backward_reference")),
    Exercise("1.2", "a causal mask", "lessons_0_3.check_causal_mask", 5, "lesson 1: masks",
             stub="my_causal_mask", answers=("minitransformer.layers.masks:causal_mask",)),
    Exercise("1.3", "attention backward, from the cache", "lessons_0_3.check_attention_backward", 25,
             "Exercise 1.1; lesson 1: the attention backward",
             stub="my_attention_backward", answers=("minitransformer.layers.attention:attention_backward",)),
    Exercise("2.1", "the backward of Concat", "lessons_0_3.check_merge_heads_backward", 10,
             "lesson 2: split and concat as reshapes",
             stub="my_merge_heads_backward", answers=("minitransformer.layers.attention:split_heads",)),
    Exercise("2.2", "FLOPs of the whole layer", "lessons_0_3.check_attention_flops", 15,
             "lesson 2: FLOPs of h heads vs one",
             stub="my_attention_flops", answers=("lessonkit.exercises.lessons_0_3:_mha_flops",)),
    Exercise("2.3", "the decoder's self-attention mask", "lessons_0_3.check_decoder_mask", 10,
             "Exercise 1.2; lesson 2: the three uses and their masks",
             stub="my_decoder_mask", answers=("minitransformer.layers.masks:decoder_mask",)),
    Exercise("2.4", "the backward of the fused projection", "lessons_0_3.check_qkv_projection_backward", 20,
             "lesson 0's linear backward; lesson 2: the fused W_qkv",
             stub="my_qkv_projection_backward", answers=(
                 "minitransformer.layers.attention:MultiHeadAttention.backward",
                 "lessonkit.exercises.lessons_0_3:_qkv_reference")),
    Exercise("3.1", "ReLU backward", "lessons_0_3.check_relu_backward", 5, "lesson 3: ReLU",
             stub="my_relu_backward", answers=("minitransformer.layers.feedforward:relu_backward",)),
    Exercise("3.2", "FFN backward", "lessons_0_3.check_ffn_backward", 20,
             "Exercise 3.1; lesson 0's linear backward",
             stub="my_ffn_backward", answers=(
                 "minitransformer.layers.feedforward:FeedForward.backward",
                 "lessonkit.exercises.lessons_0_3:_ffn_reference")),
    Exercise("4.1", "LayerNorm backward", "lessons_4_7.check_layernorm_backward", 30,
             "lesson 4: the LayerNorm backward derived",
             stub="my_layernorm_backward", answers=(
                 "minitransformer.layers.layernorm:layernorm_backward",
                 "minitransformer.layers.layernorm:LayerNorm.backward")),
    Exercise("4.2", "a post-LN block with a linear sub-layer", "lessons_4_7.check_post_ln_residual_backward", 20,
             "lesson 4: residuals, post-LN",
             stub="my_post_ln_residual_backward", answers=(
                 "minitransformer.layers.residual:Residual.backward",
                 "lessonkit.exercises.lessons_4_7:_residual_reference")),
    Exercise("4.3", "the same block, pre-LN", "lessons_4_7.check_pre_ln_residual_backward", 15,
             "Exercise 4.2; lesson 4: pre-LN",
             stub="my_pre_ln_residual_backward", answers=(
                 "minitransformer.layers.residual:Residual.backward",
                 "lessonkit.exercises.lessons_4_7:_residual_reference")),
    Exercise("5.1", "embedding backward, with repeated tokens", "lessons_4_7.check_embedding_backward", 15,
             "lesson 5: the √d_model scale and scatter-add",
             stub="my_embedding_backward", answers=(
                 "minitransformer.layers.embedding:embedding_backward",
                 "minitransformer.layers.embedding:Embedding.backward")),
    Exercise("5.2", "the tied gradient", "lessons_4_7.check_tied_embedding_grad", 20,
             "Exercise 5.1; lesson 5: three-way tying",
             stub="my_tied_embedding_grad", answers=(
                 "minitransformer.layers.embedding:TiedOutputProjection.backward",
                 "minitransformer.model:Transformer.backward",
                 "lessonkit.exercises.lessons_4_7:_tied_reference")),
    Exercise("6.1", "the table", "lessons_4_7.check_sinusoidal_pe", 10, "lesson 6: the encoding of §3.5",
             stub="my_sinusoidal_pe", answers=("minitransformer.layers.positional:sinusoidal_table",)),
    Exercise("6.2", "similarity in closed form", "lessons_4_7.check_pe_similarity", 20,
             "lesson 6 §4: the closed form of PE(pos)·PE(pos+k)",
             stub="my_pe_similarity", answers=("lessonkit.exercises.lessons_4_7:_pe_similarity_reference",)),
    Exercise("7.1", "shifting the target right", "lessons_4_7.check_shift_right", 15,
             "lesson 7: the decoder's inputs and targets",
             stub="my_shift_right", answers=("minitransformer.data.batching:make_batch",)),
    Exercise("7.2", "parameters of one encoder layer", "lessons_4_7.check_encoder_layer_params", 10,
             "lessons 2-4: the layers an encoder layer holds",
             stub="my_encoder_layer_params", answers=(
                 "minitransformer.model:count_parameters",
                 "lessonkit.exercises.lessons_4_7:_encoder_layer_reference")),
    Exercise("7.3", "parameters of the whole model", "lessons_4_7.check_transformer_params", 15,
             "Exercise 7.2; lesson 5: tying",
             stub="my_transformer_params", answers=("minitransformer.model:count_parameters",)),
    Exercise("8.1", "the backward of additive attention", "lesson_08.check_additive_attention_backward", 40,
             "lesson 1's attention backward; lesson 8 §8: additive attention",
             stub="my_additive_attention_backward", answers=("lessonkit.exercises.lesson_08:_additive_backward",)),
    Exercise("8.2", "how many layers?", "lesson_08.check_layers_needed", 20,
             "lesson 8 §5: maximum path length",
             stub="my_layers_needed", answers=("lessonkit.exercises.lesson_08:layers_needed_by_propagation",)),
    Exercise("8.3", "count the FLOPs", "lesson_08.check_layer_flops", 25,
             "lesson 8 §3: FLOPs counted exactly",
             stub="my_layer_flops", answers=("lessonkit.exercises.lesson_08:_reference_flops",)),
    Exercise("8.4", "remove one head", "lesson_08.check_head_ablation", 15,
             "lesson 2: the heads and W^O; lesson 8 §10: interpretability",
             stub="my_ablate_head", answers=("lessonkit.exercises.lesson_08:_ablated_by_rows",)),
    Exercise("9.1", "the learning-rate schedule", "lesson_09.check_noam_lr", 10,
             "lesson 9 §3: the schedule of Eq. (3)",
             stub="my_lrate", answers=("minitransformer.optim:NoamSchedule",)),
    Exercise("9.2", "one Adam update", "lesson_09.check_adam_step", 15,
             "lesson 9 §2: Adam's update and bias correction",
             stub="my_adam_step", answers=(
                 "minitransformer.optim:Adam.step",
                 "lessonkit.exercises.lesson_09:_adam_variant")),
    Exercise("9.3", "the gradient that starts every backward pass", "lesson_09.check_dlogits", 25,
             "lesson 9 §4: label smoothing's gradient p - q",
             stub="my_dlogits", answers=(
                 "minitransformer.layers.loss:cross_entropy_backward",
                 "minitransformer.layers.loss:LabelSmoothedCrossEntropy.backward",
                 "lessonkit.exercises.lesson_09:_dlogits_variant")),
    Exercise("10.1", "one step of beam search", "lesson_10.check_beam_step", 20, "lesson 10 §3: beam search",
             stub="my_beam_step", answers=(
                 "minitransformer.decoding:beam_search",
                 "lessonkit.exercises.lesson_10:reference_beam_step")),
    Exercise("10.2", "corpus BLEU", "lesson_10.check_corpus_bleu", 25, "lesson 10 §4: BLEU by hand",
             stub="my_corpus_bleu", answers=(
                 "minitransformer.metrics:corpus_bleu",
                 "lessonkit.exercises.lesson_10:reference_bleu")),
    Exercise("10.3", "greedy decoding with the cache", "lesson_10.check_greedy_decode", 25,
             "lesson 10 §1: greedy decoding on encode / KVCache / decode_step",
             stub="my_greedy", answers=(
                 "minitransformer.decoding:greedy_decode",
                 "minitransformer.decoding:decode")),
    Exercise("11.1", "the learned table's backward", "lesson_11.check_learned_pe_backward", 15,
             "lesson 11: the learned positional embedding",
             stub="my_learned_pe_backward",
             answers=("minitransformer.layers.positional:LearnedPositionalEmbedding.backward",)),
    Exercise("11.2", "perplexity", "lesson_11.check_perplexity", 15, "lesson 11: Table 3's PPL column",
             stub="my_perplexity", answers=("lessonkit.exercises.lesson_11:_perplexity_reference",)),
    Exercise("11.3", "the parameter column of a variation", "lesson_11.check_variation_params", 20,
             "Exercise 7.3; lesson 11: rows A-E",
             stub="my_variation_params", answers=(
                 "minitransformer.model:count_parameters",
                 "lessonkit.exercises.lesson_11:_variation_params")),
    Exercise("12.1", "mystery bug 1", "lesson_12.check_mystery", 15,
             "lesson 12 §1-5: what each check compares with",
             stub="my_answer_1", answers=()),
    Exercise("12.2", "mystery bug 2", "lesson_12.check_mystery", 15, "lesson 12 §1-5",
             stub="my_answer_2", answers=()),
    Exercise("12.3", "mystery bug 3", "lesson_12.check_mystery", 15, "lesson 12 §1-5",
             stub="my_answer_3", answers=()),
    Exercise("12.4", "close parity's gap with a property", "lesson_12.check_pe_property", 20,
             "Exercise 12.1; lesson 6: the encoding of §3.5",
             stub="my_pe_property", answers=("lessonkit.exercises.lesson_12:_reference_pe",)),
    Exercise("13.1", "one merge step", "lesson_13.check_merge_step", 15,
             "lesson 13 §1: the merge loop by hand",
             stub="my_merge_step", answers=(
                 "minitransformer.data.bpe:learn_bpe_by_recounting",
                 "minitransformer.data.bpe:learn_bpe",
                 "lessonkit.exercises.lesson_13:reference_merge_step")),
    Exercise("13.2", "a word's pieces", "lesson_13.check_segment", 15,
             "Exercise 13.1; lesson 13 §2: applying the merges, the earliest first",
             stub="my_segment", answers=("minitransformer.data.bpe:BPE.segment",)),
    Exercise("13.3", "averaging two checkpoints", "lesson_13.check_average_two", 10,
             "lesson 13 §6: the element-wise mean of §6.1",
             stub="my_average_two", answers=(
                 "minitransformer.average:average_parameters",
                 "minitransformer.average:average_checkpoints",
                 "lessonkit.exercises.lesson_13:_average_reference")),
    Exercise("14.1", "a ring allreduce", "lesson_14.check_ring_allreduce", 30,
             "lesson 14 §3: allreduce by hand, a ring",
             stub="my_ring_allreduce", answers=("lessonkit.exercises.lesson_14:ring_allreduce",)),
    Exercise("14.2", "the token-weighted gradient", "lesson_14.check_token_weighted", 15,
             "lesson 14 §2 and §4: a batch's gradient is a sum; the token-count trap",
             stub="my_combine", answers=("lessonkit.exercises.lesson_14:_token_weighted_reference",)),
    Exercise("15.1", "a tree as target tokens", "lesson_15.check_linearize", 15,
             "lesson 15 §2: a tree as a sentence",
             stub="my_linearize", answers=("minitransformer.data.trees:linearize",)),
    Exercise("15.2", "bracket F1 of one pair of trees", "lesson_15.check_bracket_f1", 20,
             "lesson 15 §4: bracket F1 by hand",
             stub="my_bracket_f1", answers=(
                 "minitransformer.data.evalb:bracket_f1",
                 "minitransformer.data.evalb:brackets")),
    Exercise("15.3", "repair an ill-formed output", "lesson_15.check_repair", 25,
             "Exercise 15.1; data/trees.py: the repair rule",
             stub="my_repair", answers=("minitransformer.data.trees:read_linearized",)),
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


# What a lesson needs beyond the learner's install (pip install -r requirements.txt), by lesson number.
NEEDS: dict[int, str] = {
    12: "optional: torch 2.13 (`pip install -e '.[dev]'`) for the PyTorch-parity column; without it the column "
        "says *skipped*",
    14: "the MPI extra, `pip install -e '.[mpi]'` (mpi4py and the MPICH wheel, which brings `mpiexec`); on Windows "
        "install Microsoft MPI (MS-MPI) and then `pip install mpi4py`",
}
WORDS_PER_MINUTE = 120      # technical prose with formulas, read to be understood
CODE_LINES_PER_MINUTE = 15  # code read line by line, not skimmed


def reading_minutes(notebook: dict) -> int:
    """An estimate of the time to read a lesson: its prose at WORDS_PER_MINUTE and its code at
    CODE_LINES_PER_MINUTE (solutions excluded), rounded up to 5 minutes; not a measurement."""
    words = lines = 0
    for cell in notebook.get("cells", []):
        if "solution" in cell.get("metadata", {}).get("tags", []):
            continue
        text = "".join(cell.get("source", []))
        if cell.get("cell_type") == "markdown":
            words += len(re.findall(r"[^\s$]+", text))
        elif cell.get("cell_type") == "code":
            lines += sum(1 for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#"))
    return 5 * math.ceil((words / WORDS_PER_MINUTE + lines / CODE_LINES_PER_MINUTE) / 5)


def lesson_table(lessons: pathlib.Path) -> str:
    """docs/teachers.md's table of lessons: reading time (estimated), running time (the build's record),
    exercise time (this catalogue's minutes) and what each needs installed."""
    record = json.loads((lessons / "runtimes.json").read_text(encoding="utf-8")) if \
        (lessons / "runtimes.json").is_file() else {}
    rows = ["| lesson | reading (estimate) | running (last build) | exercises | needs beyond requirements.txt |",
            "| ---: | ---: | ---: | ---: | --- |"]
    for path in sorted(lessons.glob("[0-9][0-9]_*.ipynb")):
        number = int(path.name[:2])
        seconds = record.get("lessons", {}).get(path.name[:2], {}).get("seconds")
        running = f"{math.ceil(seconds / 60)} min" if seconds is not None else "not recorded"
        exercises = sum(e.minutes for e in for_lesson(number))
        notebook = json.loads(path.read_text(encoding="utf-8"))
        rows.append(f"| {number} | {reading_minutes(notebook)} min | {running} | {exercises} min | "
                    f"{NEEDS.get(number, '')} |")
    return "\n".join(rows)
