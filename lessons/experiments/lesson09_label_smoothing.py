"""Label smoothing's trade-off (§5.4), measured: held-out perplexity against accuracy.

Trains the same model on the same batches with ε_ls = 0 and ε_ls = 0.1 (everything else
equal: seed, preset, schedule), and every ``--every`` steps measures on held-out pairs:

* perplexity = exp(mean -log p(correct token)), teacher-forced, *unsmoothed* (what §5.4
  says label smoothing hurts);
* token accuracy: the argmax at each teacher-forced position is the correct token;
* exact match of greedy decodes (``translate.score_translations``), and BLEU for
  translation tasks.

    python lessons/experiments/lesson09_label_smoothing.py --task copy --preset tiny --steps 1500 --seeds 0 1 2

Appends (or replaces) one entry per (task, preset) in lessons/experiments/lesson09_label_smoothing.json,
with the command, date and machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import sys
import time


from minitransformer.data.batching import batch_iterator
from minitransformer.machine import machine_summary
from minitransformer.files import atomic_write_text
from minitransformer.layers.loss import cross_entropy_forward
from minitransformer.layers.parameter import eval_mode
from minitransformer.data.registry import load_task
from minitransformer.train import Trainer, build_model, encode_pairs, settings_for
from minitransformer.translate import score_translations

HERE = pathlib.Path(__file__).resolve().parent



def held_out(model, vocab, pairs) -> dict:
    """Unsmoothed NLL per token -> perplexity, and teacher-forced token accuracy."""
    nll, correct, n = 0.0, 0, 0
    with eval_mode(model):
        for b in batch_iterator(pairs, 100, None, None, shuffle=False, pad_id=vocab.pad_id,
                                bos_id=vocab.bos_id, eos_id=vocab.eos_id):
            logits = model.forward(b.src, b.tgt_in, b.src_mask, b.tgt_mask)
            loss, _ = cross_entropy_forward(logits, b.tgt_out, vocab.pad_id, 0.0)
            valid = b.tgt_out != vocab.pad_id
            nll += loss * b.n_tokens
            correct += int(((logits.argmax(-1) == b.tgt_out) & valid).sum())
            n += b.n_tokens
    return {"perplexity": math.exp(nll / n), "token_accuracy": correct / n}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="copy")
    p.add_argument("--preset", default=None, help="model preset (default: the task's recipe)")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--every", type=int, default=250)
    p.add_argument("--eps", type=float, nargs="+", default=[0.0, 0.1])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--test", type=int, default=500, help="held-out pairs used (the first n of the test split)")
    p.add_argument("--out", default=str(HERE / "lesson09_label_smoothing.json"))
    args = p.parse_args()

    task = load_task(args.task)
    test = task.test[: args.test]
    test_ids = encode_pairs(task.vocab, test)
    runs = []
    for seed in args.seeds:
        for eps_ls in args.eps:
            preset, settings = settings_for(args.task, preset=args.preset, seed=seed, steps=args.every,
                                            valid_every=10**9)
            model = build_model(task, preset, seed=seed, eps_ls=eps_ls)
            trainer = Trainer(model, task.vocab, encode_pairs(task.vocab, task.train), [], settings)
            curve, seconds = [], 0.0
            for stop in range(args.every, args.steps + 1, args.every):
                trainer.settings.steps = stop
                t0 = time.perf_counter()
                history = trainer.run(progress=False)
                seconds += time.perf_counter() - t0
                scores = score_translations(model.eval(), task.vocab, test, task.tgt_level, task.bleu_tokenize)
                model.train()
                point = {"step": stop, "train_loss": history[-1]["loss"], **held_out(model, task.vocab, test_ids),
                         "exact_match": scores["exact_match"], "bleu": scores["bleu"], "train_seconds": round(seconds, 1)}
                curve.append(point)
                print(f"{args.task} {preset} seed {seed} eps {eps_ls}: " + "  ".join(
                    f"{k} {v:.4g}" for k, v in point.items()), flush=True)
            runs.append({"seed": seed, "eps_ls": eps_ls, "curve": curve})

    path = pathlib.Path(args.out)
    results = json.loads(path.read_text()) if path.exists() else []
    entry = {"task": args.task, "preset": preset, "command": "python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
             "date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine_summary(),
             "load_average_at_end": round(os.getloadavg()[0], 2),
             "settings": {k: getattr(settings, k) for k in ("batch_size", "lr_factor", "warmup_steps", "clip_norm")},
             "model": {k: getattr(model.cfg, k) for k in ("d_model", "h", "N", "d_ff", "P_drop")},
             "test_pairs": len(test), "runs": runs}
    results = [r for r in results if (r["task"], r["preset"]) != (args.task, preset)] + [entry]
    atomic_write_text(str(path), json.dumps(results, indent=1) + "\n")
    print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
