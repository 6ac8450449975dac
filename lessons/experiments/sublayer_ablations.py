"""What each part of a Transformer layer does, removed one at a time (lessons 4, 5 and 7).

    python lessons/experiments/sublayer_ablations.py            # every variant, seeds 0 1 2
    python lessons/experiments/sublayer_ablations.py --variants base "no residual" --seeds 0

Writes lessons/experiments/sublayer_ablations.json (through ``_record``). The paper reports no such
ablations: §3.1 states the design (a residual connection around each sub-layer, then layer
normalization; self-attention and a feed-forward network in each encoder layer, a third sub-layer
in each decoder layer) and §3.4 the tied embeddings, without measuring what each one is worth.
Common explanations of the paper make claims about them (a model without residuals "drops
sharply"; LayerNorm speeds up and steadies training; tying makes learning more efficient; trained
embeddings put words of similar meaning close together; a residual block learns an increment).
This script measures them at toy scale, on lesson 11's Table 3 task and model:

* task numbers-en-fr, lesson 11's toy base model (d_model 64, h 8, N 2, d_ff 256, P_drop 0.1,
  eps_ls 0.1) and its training settings (``table3.PINNED_SETTINGS``: batches of 128, learning-rate
  factor 0.5, 400 warm-up steps, gradient norm clipped at 1), ``STEPS`` steps, float32, one BLAS
  thread; evaluated as ``table3.run_one`` evaluates (teacher-forced perplexity and token accuracy,
  greedy exact match on the test split);
* the variants change the built model and nothing else (``VARIANTS``); the package is untouched:

  - "no residual": every sub-layer computes LayerNorm(Dropout(Sublayer(x))), the skip path removed;
  - "no LayerNorm": x + Dropout(Sublayer(x)), the normalization removed (its gain and bias unused);
  - "neither": Dropout(Sublayer(x));
  - "no FFN": the feed-forward sub-layer (with its residual and norm) removed from every layer;
  - "no cross-attention": the decoder's encoder-decoder attention sub-layer removed (the decoder no
    longer reads the source; a control for what that sub-layer carries);
  - "untied": three separate matrices for the source embedding, the target embedding and the
    pre-softmax projection, each initialized as the tied one is;
  - the base model and "no LayerNorm" again at learning-rate factors 0.25 and 1.0 (is LayerNorm's
    benefit only at the one learning rate?);

* per run, besides the scores: the training loss and gradient-norm curve, the ratio
  ||Sublayer(x)|| / ||x|| at every residual connection on the dev set before and after training
  (how large an increment each block adds), the size of the encoder's output, and, for the base
  and untied models, how close translation pairs ("seven"/"sept") sit in embedding space before and
  after training.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
import types

import _record
import numpy
import table3

from minitransformer import runsetup, train
from minitransformer.data.batching import make_batch
from minitransformer.data.registry import load_task
from minitransformer.layers.embedding import Embedding, TiedOutputProjection
from minitransformer.layers.parameter import Parameter, checked_backward, checked_forward, eval_mode
from minitransformer.layers.residual import Residual, _split
from minitransformer.translate import score_translations

HERE = pathlib.Path(__file__).resolve().parent
OUT = HERE / "sublayer_ablations.json"

TASK = table3.TASK
STEPS = table3.STEPS
SEEDS = (0, 1, 2)
BASE = table3.TOY_BASE | table3.PINNED_MODEL
SETTINGS = table3.PINNED_SETTINGS[TASK]
# (label, what changes, learning-rate factor or None for the pinned one)
VARIANTS = [
    ("base", "nothing: lesson 11's toy base model", None),
    ("no residual", "LayerNorm(Dropout(Sublayer(x))) at every sub-layer", None),
    ("no LayerNorm", "x + Dropout(Sublayer(x)) at every sub-layer", None),
    ("neither", "Dropout(Sublayer(x)) at every sub-layer", None),
    ("no FFN", "the feed-forward sub-layer removed from every encoder and decoder layer", None),
    ("no cross-attention", "the encoder-decoder attention sub-layer removed from every decoder layer", None),
    ("untied", "separate source embedding, target embedding and pre-softmax matrices", None),
    ("base, lr x0.5", "the base model at half the learning-rate factor", 0.25),
    ("base, lr x2", "the base model at twice the learning-rate factor", 1.0),
    ("no LayerNorm, lr x0.5", "no LayerNorm at half the learning-rate factor", 0.25),
    ("no LayerNorm, lr x2", "no LayerNorm at twice the learning-rate factor", 1.0),
]


# -- the variants: each rewires a built model, its parameters untouched ------------------------

@checked_forward()
def _residual_without_skip(self, x, sublayer):
    y = self.norm.forward(self.dropout.forward(sublayer(x)))
    return y


@checked_backward
def _residual_without_skip_backward(self, dy, sublayer_backward):
    dsub_in, extras = _split(sublayer_backward(self.dropout.backward(self.norm.backward(dy))))
    return (dsub_in, *extras) if extras else dsub_in


@checked_forward()
def _residual_without_norm(self, x, sublayer):
    y = x + self.dropout.forward(sublayer(x))
    return y


@checked_backward
def _residual_without_norm_backward(self, dy, sublayer_backward):
    dsub_in, extras = _split(sublayer_backward(self.dropout.backward(dy)))
    return (dy + dsub_in, *extras) if extras else dy + dsub_in


@checked_forward()
def _sublayer_only(self, x, sublayer):
    y = self.dropout.forward(sublayer(x))
    return y


@checked_backward
def _sublayer_only_backward(self, dy, sublayer_backward):
    dsub_in, extras = _split(sublayer_backward(self.dropout.backward(dy)))
    return (dsub_in, *extras) if extras else dsub_in


def _rewire_residuals(model, forward, backward) -> None:
    for m in model.modules():
        if isinstance(m, Residual):
            m.forward = types.MethodType(forward, m)
            m.backward = types.MethodType(backward, m)


def _drop_ffn(model) -> None:
    """Every layer without its wrapped FFN: the encoder layer is self-attention alone, the decoder's its
    two attentions."""
    for layer in model.encoder.layers:
        def enc_forward(self, x, src_mask):
            return self.res_attn.forward(x, lambda z: self.self_attn.forward(z, mask=src_mask))

        def enc_backward(self, dy):
            return self.res_attn.backward(dy, self.self_attn.backward)

        layer.forward, layer.backward = types.MethodType(enc_forward, layer), types.MethodType(enc_backward, layer)
        del layer.ffn, layer.res_ffn
    for layer in model.decoder.layers:
        def dec_forward(self, y, memory, src_mask, tgt_mask):
            y = self.res_self.forward(y, lambda z: self.self_attn.forward(z, mask=tgt_mask))
            return self.res_cross.forward(y, lambda z: self.cross_attn.forward(z, memory, mask=src_mask))

        def dec_backward(self, dy):
            dy, dmemory = self.res_cross.backward(dy, self.cross_attn.backward)
            return self.res_self.backward(dy, self.self_attn.backward), dmemory

        def dec_step(self, y_t, t, self_kv, cross_kv, src_mask):
            y_t = self.res_self.forward(y_t, lambda z: self.self_attn.step(z, *self_kv, t=t))
            return self.res_cross.forward(y_t, lambda z: self.cross_attn.step(z, *cross_kv, mask=src_mask))

        layer.forward, layer.backward = types.MethodType(dec_forward, layer), types.MethodType(dec_backward, layer)
        layer.step = types.MethodType(dec_step, layer)
        del layer.ffn, layer.res_ffn


def _drop_cross_attention(model) -> None:
    """Every decoder layer without its encoder-decoder attention: the decoder never reads the source.
    (The encoder still runs; it receives no gradient, so its weights stay where they started. The
    attention's weights stay in the model, unused, because decoding's key/value cache projects the
    memory for every decoder layer; ``used_parameters`` leaves them out.)"""
    for layer in model.decoder.layers:
        def dec_forward(self, y, memory, src_mask, tgt_mask):
            self._memory_shape = memory.shape
            y = self.res_self.forward(y, lambda z: self.self_attn.forward(z, mask=tgt_mask))
            return self.res_ffn.forward(y, self.ffn.forward)

        def dec_backward(self, dy):
            dy = self.res_ffn.backward(dy, self.ffn.backward)
            dy = self.res_self.backward(dy, self.self_attn.backward)
            return dy, numpy.zeros(self._memory_shape, dtype=dy.dtype)

        def dec_step(self, y_t, t, self_kv, cross_kv, src_mask):
            y_t = self.res_self.forward(y_t, lambda z: self.self_attn.step(z, *self_kv, t=t))
            return self.res_ffn.forward(y_t, self.ffn.forward)

        layer.forward, layer.backward = types.MethodType(dec_forward, layer), types.MethodType(dec_backward, layer)
        layer.step = types.MethodType(dec_step, layer)


def _untie(model, seed: int) -> None:
    """Three matrices where the paper shares one (§3.4), each drawn as the shared one is."""
    V, d = model.E.shape
    rng = numpy.random.default_rng([seed, 34])
    model.src_embed = Embedding(V, d, rng, name="src_embed")
    model.tgt_embed = Embedding(V, d, rng, name="tgt_embed")
    model.output_projection = TiedOutputProjection(Parameter(Embedding(V, d, rng).E.data, "output_projection.W"))
    model.E = model.src_embed.E            # the model's E now names the source embedding (the backend follows it)


def make_variant(model, label: str, seed: int):
    """Rewire ``model`` (built as the base) into the variant ``label``; return it."""
    kind = label.split(",")[0]
    if kind == "no residual":
        _rewire_residuals(model, _residual_without_skip, _residual_without_skip_backward)
    elif kind == "no LayerNorm":
        _rewire_residuals(model, _residual_without_norm, _residual_without_norm_backward)
    elif kind == "neither":
        _rewire_residuals(model, _sublayer_only, _sublayer_only_backward)
    elif kind == "no FFN":
        _drop_ffn(model)
    elif kind == "no cross-attention":
        _drop_cross_attention(model)
    elif kind == "untied":
        _untie(model, seed)
    elif kind != "base":
        raise KeyError(f"no variant {label!r}")
    return model


def used_parameters(model, label: str) -> int:
    """Parameters the variant trains: the norms' gain and bias do not count where no norm runs."""
    n = model.num_parameters()
    kind = label.split(",")[0]
    if kind in ("no LayerNorm", "neither"):
        n -= sum(m.norm.gamma.data.size + m.norm.beta.data.size for m in model.modules() if isinstance(m, Residual))
    if kind == "no cross-attention":                  # present for the decoding cache, never used
        n -= sum(p.data.size for layer in model.decoder.layers
                 for p in layer.cross_attn.parameters() + layer.res_cross.parameters())
    return int(n)


# -- what is measured besides the scores ------------------------------------------------------------

def increments(model, batch) -> list[dict]:
    """||Sublayer(x)|| / ||x|| at every residual connection, per position, on one batch (eval mode): the
    median and the 90th percentile over the real positions. Measured by wrapping each Residual's sub-layer."""
    found = []
    originals = {}
    for name, m in [(n, m) for n, m in _named_modules(model) if isinstance(m, Residual)]:
        def measured(self, x, sublayer, _name=name, _orig=m.forward):
            fx = sublayer(x)
            r = numpy.linalg.norm(fx, axis=-1) / numpy.maximum(numpy.linalg.norm(x, axis=-1), 1e-12)
            found.append((_name, r))
            return _orig(x, lambda _: fx)
        originals[name] = (m, m.forward)
        m.forward = types.MethodType(measured, m)
    try:
        with eval_mode(model):
            model.forward(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
    finally:
        for m, fwd in originals.values():
            m.forward = fwd
    src_real = numpy.asarray(batch.src != model.cfg.pad_id)
    tgt_real = numpy.asarray(batch.tgt_in != model.cfg.pad_id)
    out = []
    for name, r in found:
        real = src_real if name.startswith("encoder") else tgt_real
        vals = r[real]
        out.append({"where": name, "median": round(float(numpy.median(vals)), 4),
                    "p90": round(float(numpy.percentile(vals, 90)), 4)})
    return out


def _named_modules(layer, prefix=""):
    yield prefix.rstrip("."), layer
    for key, value in vars(layer).items():
        if key.startswith("_"):
            continue
        items = [(f"{key}.{i}", v) for i, v in enumerate(value)] if isinstance(value, list) else [(key, value)]
        for name, v in items:
            if hasattr(v, "modules") and hasattr(v, "training"):
                yield from _named_modules(v, f"{prefix}{name}.")


def translation_pairs(vocab) -> list[tuple[int, int]]:
    """(English id, French id) for every number 0-99 whose name is one token in both languages."""
    from num2words import num2words
    pairs = []
    for n in range(100):
        en, fr = num2words(n, lang="en"), num2words(n, lang="fr")
        if " " not in en and " " not in fr and en in vocab and fr in vocab:
            pairs.append((vocab.id(en), vocab.id(fr)))
    return pairs


def embedding_closeness(src_E, tgt_E, pairs) -> dict:
    """How close each English number word's (source-side) embedding sits to its French translation's
    (target-side) among all the French words of the pairs: the share whose nearest French word (cosine)
    is its translation, the mean cosine of the translation pairs, and of all other English-French pairs."""
    en = numpy.array([e for e, _ in pairs])
    fr = numpy.array([f for _, f in pairs])
    a = src_E[en] / numpy.linalg.norm(src_E[en], axis=1, keepdims=True)
    b = tgt_E[fr] / numpy.linalg.norm(tgt_E[fr], axis=1, keepdims=True)
    cos = a @ b.T                                                         # (pairs, pairs)
    off = ~numpy.eye(len(pairs), dtype=bool)
    return {"pairs": len(pairs), "nearest_is_translation": round(float((cos.argmax(axis=1) == numpy.arange(len(pairs))).mean()), 4),
            "mean_cos_translation": round(float(numpy.diag(cos).mean()), 4),
            "mean_cos_other": round(float(cos[off].mean()), 4)}


def side_matrices(model):
    """(source embedding, target embedding) as host arrays: the same matrix when tied."""
    return numpy.asarray(model.src_embed.E.data), numpy.asarray(model.tgt_embed.E.data)


# -- one run -------------------------------------------------------------------------------------------

def run_one(label: str, seed: int, steps: int = STEPS, task=None) -> dict:
    task = task or load_task(TASK)
    factor = next(f for lab, _, f in VARIANTS if lab == label)
    settings_kw = dict(SETTINGS) | ({"lr_factor": factor} if factor is not None else {})
    preset, settings = runsetup.settings_for(TASK, preset=table3.PRESET, steps=steps, seed=seed, valid_every=10**9,
                                          log_every=25, **settings_kw)
    model = make_variant(runsetup.build_model(task, preset, seed=seed, **BASE), label, seed)
    v = task.vocab
    dev = train.encode_pairs(v, task.valid)[:200]
    dev_batch = make_batch([s for s, _ in dev], [t for _, t in dev], v.pad_id, v.bos_id, v.eos_id, numpy)
    pairs = translation_pairs(v)
    record = {"label": label, "seed": seed, "steps": steps, "lr_factor": settings.lr_factor,
              "params": used_parameters(model, label), "increments_at_init": increments(model, dev_batch)}
    if label in ("base", "untied"):
        record["embeddings_at_init"] = embedding_closeness(*side_matrices(model), pairs)
    trainer = train.Trainer(model, v, train.encode_pairs(v, task.train), [], settings)
    t0, cpu0 = time.perf_counter(), time.process_time()
    history = trainer.run(progress=False)
    record["train_seconds"] = round(time.perf_counter() - t0, 1)
    record["train_cpu_seconds"] = round(time.process_time() - cpu0, 1)
    record["train_curve"] = [[r["step"], round(r["loss"], 4), round(r["grad_norm"], 4)] for r in history if "loss" in r]
    record["increments_trained"] = increments(model, dev_batch)
    with eval_mode(model):
        memory = model.encode(dev_batch.src, dev_batch.src_mask)
    real = numpy.asarray(dev_batch.src != v.pad_id)
    record["encoder_output_norm_median"] = round(float(numpy.median(numpy.linalg.norm(memory, axis=-1)[real])), 4)
    if label in ("base", "untied"):
        record["embeddings_trained"] = embedding_closeness(*side_matrices(model), pairs)
    test = train.encode_pairs(v, task.test)
    record |= table3.teacher_forced(model, v, test)
    with eval_mode(model):
        scores = score_translations(model, v, task.test, task.tgt_level, task.bleu_tokenize)
    record |= {k: scores[k] for k in ("exact_match", "bleu", "chrf")}
    return record


def _line(rec) -> str:
    return (f"{rec['label']:22s} seed {rec['seed']}: exact {rec['exact_match']:.3f} ppl {rec['ppl']:.3f} "
            f"tok {rec['token_acc']:.3f}  final train loss {rec['train_curve'][-1][1]:.3f}  "
            f"{rec['train_cpu_seconds']:.0f} CPU s")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", nargs="*", default=None, help="labels to run (default: all)")
    ap.add_argument("--seeds", nargs="*", type=int, default=list(SEEDS))
    args = ap.parse_args(argv)
    prov = _record.start(threads=1, argv=None if argv is None else [sys.argv[0], *argv])
    data = json.loads(OUT.read_text(encoding="utf-8")) if OUT.exists() else {}
    data.setdefault("provenance", [])
    data.setdefault("runs", [])
    data |= {"task": TASK, "steps": STEPS, "base_model": BASE, "settings": SETTINGS,
             "variants": [{"label": lab, "what": what, "lr_factor": f} for lab, what, f in VARIANTS]}
    task = load_task(TASK)
    labels = args.variants or [lab for lab, _, _ in VARIANTS]
    done = {(r["label"], r["seed"]) for r in data["runs"]}
    for seed in args.seeds:
        for label in labels:
            if (label, seed) in done:
                continue
            rec = run_one(label, seed, task=task)
            data["runs"].append(rec)
            _record.write(OUT, data)                  # after every run: a crash loses only the run in progress
            print(_line(rec), flush=True)
    data["provenance"].append(_record.finish(prov, wrote="runs"))
    _record.write(OUT, data)


if __name__ == "__main__":
    main()
