"""How many steps does the copy recipe need to reach 100% held-out exact match?

Trains the copy task exactly as ``python -m minitransformer train --task copy`` does
(``load_task``, ``settings_for``, ``make_trainer``, ``Trainer.run``) and, every
``--every`` steps, decodes the 1,000 held-out test sequences greedily
(``score_translations``). The schedule of §5.3 does not depend on the total number of
steps, so a run stopped at step n is exactly the first n steps of a longer run: one run
per seed gives the whole curve. Lesson 9 uses the result to choose its step count.

    python lessons/experiments/lesson09_copy_steps.py [--seeds 0 1 2] [--steps 3000] [--every 250]

Writes lessons/experiments/lesson09_copy_steps.json (command, date, machine, results).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

from minitransformer.machine import machine_summary
from minitransformer.files import atomic_write_text
from minitransformer.data.registry import load_task
from minitransformer.train import make_trainer, settings_for
from minitransformer.translate import score_translations

HERE = pathlib.Path(__file__).resolve().parent



def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--every", type=int, default=250)
    p.add_argument("--out", default=str(HERE / "lesson09_copy_steps.json"))
    args = p.parse_args()

    runs = []
    for seed in args.seeds:
        task = load_task("copy", seed=seed)
        preset, settings = settings_for("copy", seed=seed, steps=args.every, valid_every=10**9)
        trainer = make_trainer(task, settings, preset)
        curve, t_train = [], 0.0
        for stop in range(args.every, args.steps + 1, args.every):
            trainer.settings.steps = stop
            t0 = time.perf_counter()
            history = trainer.run(progress=False)
            t_train += time.perf_counter() - t0
            scores = score_translations(trainer.model.eval(), trainer.vocab, task.test, task.tgt_level,
                                        task.bleu_tokenize)
            trainer.model.train()
            curve.append({"step": stop, "exact_match": scores["exact_match"], "train_loss": history[-1]["loss"],
                          "train_seconds": round(t_train, 1)})
            print(f"seed {seed} step {stop}: exact match {100 * scores['exact_match']:.1f}%  "
                  f"loss {history[-1]['loss']:.4f}  {t_train:.0f} s", flush=True)
        runs.append({"seed": seed, "curve": curve})

    result = {"command": "python " + " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
              "date": time.strftime("%Y-%m-%d %H:%M"), "machine": machine_summary(),
              "load_average_at_end": os.getloadavg()[0],
              "recipe": {"preset": preset, **{k: getattr(settings, k) for k in
                                              ("batch_size", "lr_factor", "warmup_steps", "clip_norm")}},
              "test_sequences": len(task.test), "runs": runs}
    atomic_write_text(args.out, json.dumps(result, indent=1) + "\n")
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
