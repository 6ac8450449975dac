"""§1 and §6.1 of the paper, at toy scale: does the Transformer train faster than a recurrent model?

    python lessons/experiments/lesson08_rnn_vs_transformer.py --pilot       # the learning-rate grid, seed 0
    python lessons/experiments/lesson08_rnn_vs_transformer.py               # both models, seeds 0 1 2
    python lessons/experiments/lesson08_rnn_vs_transformer.py --live-check  # the short live row's tolerance

Writes lessons/experiments/lesson08_rnn_vs_transformer.json (through ``_record``: commit, command,
dates, machine, BLAS threads, load). Lesson 8 plots it and re-runs ``LIVE`` (a few steps of each
model) live.

What is compared, and how it is kept fair:

* the same task: numbers-en-fr (English number words to French, lesson 11's Table 3 task), the
  same training pairs in the same batches (``batch_plan`` with the same seed: batches of 128
  pairs grouped by length), the same dev and test sentences;
* the same size: the Transformer is lesson 11's toy base model (d_model 64, h 8, N 2, d_ff 256,
  P_drop 0.1); the recurrent model (``rnn_seq2seq.RNNSeq2Seq``: 2 LSTM layers reading the source,
  2 reading the target, one attention on top) gets the width whose parameter count is closest to
  the Transformer's. Both tie one embedding matrix three ways and scale it by sqrt(d);
* the same loss and optimizer: the package's label-smoothed cross-entropy (eps_ls 0.1), Adam
  (0.9, 0.98, 1e-9) on the warm-up schedule of §5.3 (400 warm-up steps) with the gradient norm
  clipped at 1; each model gets its own learning-rate factor, the best of the same grid (``--pilot``:
  lowest dev loss after ``STEPS`` steps, seed 0);
* the same arithmetic: float32, NumPy, one BLAS thread, one process; time is the CPU time of the
  training steps alone (``time.process_time``; evaluation excluded), which the load of a shared
  machine moves far less than wall time.

Not the same, and said so: the recurrent model has no dropout (the Transformer keeps its
P_drop = 0.1; a third model, "transformer-p0", is the same Transformer without dropout, at the
Transformer's learning-rate factor, so that dropout's share of the difference shows); the recurrent
model's attention has one head. Both are reference implementations in NumPy on one
CPU core, so this measures the arithmetic of each model and its loop, not the parallel hardware the
paper trained on (8 P100 GPUs, §5.2), where the recurrent loop's steps cannot be spread out and the
Transformer's can.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import _record
import numpy
import rnn_seq2seq

from minitransformer import backend, runsetup, train
from minitransformer.data.batching import batch_plan, make_batch
from minitransformer.data.registry import load_task
from minitransformer.layers.loss import LabelSmoothedCrossEntropy
from minitransformer.layers.parameter import eval_mode
from minitransformer.model import count_parameters
from minitransformer.optim import Adam, NoamSchedule
from minitransformer.translate import score_translations

HERE = pathlib.Path(__file__).resolve().parent
OUT = HERE / "lesson08_rnn_vs_transformer.json"

TASK = "numbers-en-fr"
STEPS = 800
BATCH = 128
WARMUP = 400
CLIP = 1.0
EPS_LS = 0.1
FACTORS = (0.5, 1.0, 2.0)           # the learning-rate grid both models choose from (--pilot)
EVAL_EVERY = 50
DEV_PAIRS = 500                     # the task's whole dev split
TARGET = 0.98                       # dev token accuracy the "time to reach" is measured at (set before any run)
SEEDS = (0, 1, 2)
# lesson 11's toy base model (table3.TOY_BASE and PINNED_MODEL)
TRANSFORMER = {"d_model": 64, "h": 8, "N": 2, "d_ff": 256, "P_drop": 0.1, "eps_ls": EPS_LS,
               "positional": "sinusoidal", "max_len": 64, "pre_ln": False, "ln_eps": 1e-5, "activation": "relu"}
RNN_LAYERS = 2
LIVE = {"steps": 40, "seed": 0}      # what lesson 8 re-runs live: both models, LIVE["steps"] steps


def rnn_width(vocab_size: int) -> int:
    return rnn_seq2seq.width_for(transformer_params(vocab_size), vocab_size, RNN_LAYERS)


def transformer_params(vocab_size: int) -> int:
    from minitransformer.model import TransformerConfig
    return count_parameters(TransformerConfig(vocab_size=vocab_size, **TRANSFORMER))


MODELS = ("transformer", "transformer-p0", "rnn")     # the main runs; the pilot tunes the first and the last


def build(kind: str, task, seed: int):
    """The model of ``kind`` (one of MODELS) for ``task``, float32 parameters."""
    backend.set_default_dtype("float32")
    if kind.startswith("transformer"):
        preset, _ = runsetup.settings_for(TASK, preset="copy")
        return runsetup.build_model(task, preset, seed=seed, **TRANSFORMER | ({"P_drop": 0.0} if kind == "transformer-p0" else {}))
    v = task.vocab
    return rnn_seq2seq.RNNSeq2Seq(len(v), rnn_width(len(v)), RNN_LAYERS, seed=seed, pad_id=v.pad_id)


def batches(pairs, vocab, seed: int):
    """Endless training batches: the epochs of ``batch_plan`` with the Trainer's seeding, (seed, epoch)."""
    epoch = 0
    while True:
        for idx in batch_plan(pairs, BATCH, None, numpy.random.default_rng([seed, epoch]), by_length=True):
            yield make_batch([pairs[i][0] for i in idx], [pairs[i][1] for i in idx], vocab.pad_id, vocab.bos_id,
                             vocab.eos_id, numpy)
        epoch += 1


def forward(model, kind: str, b):
    if kind.startswith("transformer"):
        return model.forward(b.src, b.tgt_in, b.src_mask, b.tgt_mask)
    return model.forward(b.src, b.tgt_in, b.src_mask[:, 0, 0, :])


class Run:
    """One model's training loop: the package's Trainer.train_step for the Transformer (dropout masks
    reseeded per step as in every run of the package), the same step written out for the recurrent model."""

    def __init__(self, kind: str, task, seed: int, factor: float):
        self.kind, self.task, self.seed = kind, task, seed
        self.model = build(kind, task, seed)
        v = task.vocab
        self.train_pairs = train.encode_pairs(v, task.train)
        self.dev = [make_batch([s for s, _ in part], [t for _, t in part], v.pad_id, v.bos_id, v.eos_id, numpy)
                    for part in chunks(train.encode_pairs(v, task.valid)[:DEV_PAIRS], 100)]
        d = self.model.cfg.d_model if kind.startswith("transformer") else self.model.d
        if kind.startswith("transformer"):
            _, settings = runsetup.settings_for(TASK, preset="copy", steps=STEPS, seed=seed, batch_size=BATCH,
                                                lr_factor=factor, warmup_steps=WARMUP, clip_norm=CLIP,
                                                batch_by_length=True, valid_every=10**9, stop_when_solved=0)
            self.trainer = train.Trainer(self.model, v, self.train_pairs, [], settings)
        else:
            self.criterion = LabelSmoothedCrossEntropy(v.pad_id, EPS_LS)
            self.optimizer = Adam(self.model.parameters(), lr=NoamSchedule(d, WARMUP, factor), clip_norm=CLIP)
        self.batches = batches(self.train_pairs, v, seed)

    def step(self) -> float:
        b = next(self.batches)
        if self.kind.startswith("transformer"):
            return self.trainer.train_step(b)
        self.optimizer.zero_grad()
        loss = self.criterion.forward(forward(self.model, "rnn", b), b.tgt_out)
        self.model.backward(self.criterion.backward())
        self.optimizer.step()
        return loss

    def dev_scores(self) -> dict:
        """Teacher-forced, unsmoothed: dev loss (nats per token) and token accuracy."""
        nll = LabelSmoothedCrossEntropy(self.task.vocab.pad_id, 0.0)
        total, correct, n = 0.0, 0, 0
        with eval_mode(self.model):
            for b in self.dev:
                logits = forward(self.model, self.kind, b)
                total += nll.forward(logits, b.tgt_out) * b.n_tokens
                correct += int(((logits.argmax(-1) == b.tgt_out) & (b.tgt_out != self.task.vocab.pad_id)).sum())
                n += b.n_tokens
        return {"dev_loss": total / n, "dev_token_acc": correct / n}

    def test_exact_match(self) -> float:
        v, pairs = self.task.vocab, self.task.test
        with eval_mode(self.model):
            if self.kind.startswith("transformer"):
                return score_translations(self.model, v, pairs, self.task.tgt_level, self.task.bleu_tokenize)[
                    "exact_match"]
            right = 0
            for part in chunks(train.encode_pairs(v, pairs), 100):
                b = make_batch([s for s, _ in part], [t for _, t in part], v.pad_id, v.bos_id, v.eos_id, numpy)
                out = self.model.greedy(b.src, b.tgt_out.shape[1] + 10, v.bos_id, v.eos_id)
                for row, (_, tgt) in zip(out.tolist(), part):
                    hyp = row[:row.index(v.eos_id)] if v.eos_id in row else row
                    right += hyp == list(tgt)
            return right / len(pairs)


def chunks(items, size):
    return [items[i:i + size] for i in range(0, len(items), size)]


def train_one(kind: str, seed: int, factor: float, steps: int = STEPS, evaluate: bool = True) -> dict:
    """Train ``kind`` for ``steps`` steps; the curve every EVAL_EVERY steps (train CPU seconds so far,
    mean train loss of the window, dev loss and token accuracy); at the end the test exact match."""
    task = load_task(TASK)
    run = Run(kind, task, seed, factor)
    curve, cpu, window, step_cpu = [], 0.0, [], []
    for step in range(1, steps + 1):
        t0 = time.process_time()
        window.append(float(run.step()))
        dt = time.process_time() - t0
        cpu += dt
        step_cpu.append(dt)
        if evaluate and (step % EVAL_EVERY == 0 or step == steps):
            curve.append({"step": step, "train_cpu_s": round(cpu, 3), "train_loss": round(float(numpy.mean(window)), 5),
                          **{k: round(v, 5) for k, v in run.dev_scores().items()}})
            window = []
    record = {"model": kind, "seed": seed, "lr_factor": factor, "steps": steps,
              "params": run.model.num_parameters(),
              "width": run.model.cfg.d_model if kind.startswith("transformer") else run.model.d,
              "train_cpu_s": round(cpu, 2), "step_cpu_ms_median": round(1e3 * float(numpy.median(step_cpu)), 3),
              "curve": curve}
    if evaluate:
        record["test_exact_match"] = run.test_exact_match()
    else:
        record |= run.dev_scores()
    return record


def time_to_target(record: dict, target: float = TARGET) -> dict | None:
    """The first evaluation at which the dev token accuracy reached ``target``: its step and train CPU seconds."""
    for point in record["curve"]:
        if point["dev_token_acc"] >= target:
            return {"step": point["step"], "train_cpu_s": point["train_cpu_s"]}
    return None


def _line(rec: dict) -> str:
    last = rec["curve"][-1] if rec["curve"] else rec
    reached = time_to_target(rec) if rec["curve"] else None
    return (f"{rec['model']:11s} seed {rec['seed']} factor {rec['lr_factor']:g}: dev loss {last['dev_loss']:.4f} "
            f"token acc {last['dev_token_acc']:.4f} exact {rec.get('test_exact_match', float('nan')):.3f}; "
            f"{rec['train_cpu_s']:.0f} CPU s, {rec['step_cpu_ms_median']:.1f} ms/step; "
            f"{'reached ' + str(TARGET) + ' at step ' + str(reached['step']) if reached else 'target not reached'}")


def load(path=OUT) -> dict:
    return json.loads(pathlib.Path(path).read_text(encoding="utf-8")) if pathlib.Path(path).exists() else {}


def factor_for(data: dict, kind: str) -> float:
    """The pilot's choice for ``kind``; transformer-p0 takes the Transformer's."""
    return data["chosen_factor"]["rnn" if kind == "rnn" else "transformer"]


def live_value(kind: str, data: dict | None = None) -> float:
    """The live row: dev loss after LIVE['steps'] steps, with the record's chosen factor for ``kind``."""
    return train_one(kind, LIVE["seed"], factor_for(data or load(), kind), LIVE["steps"], evaluate=False)["dev_loss"]


def live_values(data: dict) -> dict:
    """What lesson 8's live check compares: model -> its live dev loss (the record's chosen factors)."""
    return {kind: live_value(kind, data) for kind in ("transformer", "rnn")}


def check_live(data: dict, values: dict) -> list[str]:
    """Assert the record's live checks on lesson 8's live values; one line per check, for the lesson to print.
    40 steps are too few for another processor's rounding to grow: the checks are of the arithmetic."""
    return _record.assert_checks(data["live_check"], values)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pilot", action="store_true", help="the learning-rate grid, seed 0")
    ap.add_argument("--live-check", action="store_true", help="re-run the live rows on the processors _record plays")
    ap.add_argument("--seeds", nargs="*", type=int, default=list(SEEDS))
    ap.add_argument("--live-row", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.live_row:
        _record.limit_blas_threads(args.threads)
        _record.emit(live_value(args.live_row))
        return
    prov = _record.start(threads=1, argv=None if argv is None else [sys.argv[0], *argv])
    data = load()
    data.setdefault("provenance", [])
    task = load_task(TASK)
    V = len(task.vocab)
    data |= {"task": TASK, "steps": STEPS, "batch": BATCH, "warmup": WARMUP, "clip": CLIP, "eps_ls": EPS_LS,
             "factors": list(FACTORS), "eval_every": EVAL_EVERY, "dev_pairs": DEV_PAIRS, "target_dev_token_acc": TARGET,
             "transformer": TRANSFORMER, "rnn": {"layers": RNN_LAYERS, "width": rnn_width(V),
                                                 "params": rnn_seq2seq.count_parameters(V, rnn_width(V), RNN_LAYERS)},
             "transformer_params": transformer_params(V), "vocab_size": V, "live": LIVE}
    if args.pilot:
        runs = []
        for kind in ("transformer", "rnn"):
            for factor in FACTORS:
                rec = train_one(kind, 0, factor)
                runs.append(rec)
                print("pilot", _line(rec), flush=True)
        best = {kind: min((r for r in runs if r["model"] == kind), key=lambda r: r["curve"][-1]["dev_loss"])["lr_factor"]
                for kind in ("transformer", "rnn")}
        data["pilot"] = {"seed": 0, "runs": runs, "rule": "the factor with the lowest dev loss after STEPS steps"}
        data["chosen_factor"] = best
        data["provenance"].append(_record.finish(prov, wrote="pilot"))
    elif args.live_check:
        checks, reruns = [], {}
        for kind in ("transformer", "rnn"):
            recorded = train_one(kind, LIVE["seed"], factor_for(data, kind), LIVE["steps"], evaluate=False)["dev_loss"]
            # The record's own conditions, then every machine _record plays, seed LIVE["seed"] (a check of the
            # arithmetic: 40 steps are too few for another processor's rounding to grow).
            values = {v["name"]: _record.rerun(__file__, ["--live-row", kind], v)
                      for v in _record.variants((LIVE["seed"],), LIVE["seed"])}
            reruns[kind] = {"recorded": recorded, **values}
            checks.append(_record.measured_check(
                f"{kind}, seed {LIVE['seed']}, {LIVE['steps']} steps, lr factor {factor_for(data, kind):g}",
                f"{kind}: dev loss (nats per token, teacher-forced, unsmoothed) after the live steps (relative)",
                recorded, values, "rel", 0.002, 0.001,
                f"re-runs of lesson08_rnn_vs_transformer.live_value({kind!r}) in fresh processes, one BLAS thread",
                fails_when="the first steps differ: the arithmetic of one of the models is not the one that made "
                           "the record", model=kind, key=kind))
            print(kind, reruns[kind], flush=True)
        data["live_check"], data["live_check_reruns"] = checks, reruns
        data["live_check_machines"] = _record.played()
        data["provenance"].append(_record.finish(prov, wrote="live_check"))
    else:
        if "chosen_factor" not in data:
            raise SystemExit("error: run --pilot first: it chooses each model's learning-rate factor")
        runs = []
        for seed in args.seeds:
            for kind in MODELS:
                rec = train_one(kind, seed, factor_for(data, kind))
                runs.append(rec)
                print(_line(rec), flush=True)
        data["runs"] = runs
        data["provenance"].append(_record.finish(prov, wrote="runs"))
    _record.write(OUT, data)


if __name__ == "__main__":
    main()
