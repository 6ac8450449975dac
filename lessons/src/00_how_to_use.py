# ---
# jupyter:
#   jupytext:
#     formats: ipynb,src//py:percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lesson 0 — How to use these lessons
#
# These notebooks read *Attention Is All You Need* (Vaswani et al., 2017) one section at a
# time, next to the code of **`minitransformer`**: a Transformer whose every forward **and
# backward** pass is written by hand in NumPy (or CuPy, on a GPU). No autograd library is
# involved. Each backward pass is derived in a lesson, written out in the package, and then
# *proved* by comparing it with a numerical gradient.
#
# This lesson is about the tools rather than the paper:
#
# 1. installing, and running the lessons and the tests;
# 2. NumPy or CuPy: how one code base runs on both;
# 3. the gradient checker `minitransformer.gradcheck`, and why it can be trusted;
# 4. stepping through a layer's forward and backward in a debugger: `breakpoint()`, `%debug`, VS Code;
# 5. how the exercises work, with two to try.
#
# Every later lesson has the same shape: the idea in our own words with the paper's section
# and equation numbers, the math, a small worked example, the derivation of the backward
# pass, a gradient check, a picture, and exercises with checking cells (solutions at the end of the full notebook).
#
# The lessons, in reading order (each notebook `lessons/NN_name.ipynb` is built from `lessons/src/NN_name.py`):
#
# | lesson | paper | package |
# | --- | --- | --- |
# | 0 how to use these lessons (this one) | — | `minitransformer.gradcheck`, `minitransformer.backend` |
# | 1 scaled dot-product attention | §3.2.1, Eq. (1) | `minitransformer.layers.attention.attention_forward`, `attention_backward` |
# | 2 multi-head attention | §3.2.2–3.2.3 | `minitransformer.layers.attention.MultiHeadAttention`, `split_heads`, `merge_heads` |
# | 3 position-wise feed-forward network | §3.3, Eq. (2) | `minitransformer.layers.feedforward.FeedForward` |
# | 4 residual connections and LayerNorm | §3.1 | `minitransformer.layers.layernorm`, `minitransformer.layers.residual.Residual` |
# | 5 embeddings and softmax | §3.4 | `minitransformer.layers.embedding`, `minitransformer.layers.loss` |
# | 6 positional encoding | §3.5 | `minitransformer.layers.positional` |
# | 7 the encoder-decoder assembled | §3.1 | `minitransformer.model.Transformer` |
# | 8 why self-attention | §1, §2, §4 | the layers of lessons 1–3 |
# | 9 training | §5 | `minitransformer.optim.Adam`, `NoamSchedule`, `minitransformer.train` |
# | 10 decoding and translation | §6.1 | `minitransformer.decoding.greedy_decode`, `beam_search`; `minitransformer.metrics` |
# | 11 model variations | §6.2, Table 3 | `minitransformer.model.TransformerConfig`, `PRESETS` |
# | 12 planted bugs: which check catches what | — | `minitransformer.gradcheck`, the tests |
# | 13 byte-pair encoding and checkpoint averaging | §5.1, §6.1 | `minitransformer.data.bpe`, `minitransformer.average` |
# | 14 many processes: data-parallel training | §5.2 | `minitransformer.distributed` |
# | 15 constituency parsing as translation | §6.3, Table 4 | `minitransformer.data.pcfg`, `minitransformer.data.trees`, `minitransformer.data.evalb.bracket_f1` |
#
# Every backward pass in the package is derived step by step in [docs/derivations.md](docs/derivations.md); this lesson's
# linear layer is [its §1](docs/derivations.md#1-linear-layer).
#
# **What each lesson costs.** The first cell of every lesson says how long the lesson took to run top
# to bottom, and any cell that takes more than 20 s is flagged just before it. The figures are not
# typed: `python lessons/build.py` times every cell each time it executes a lesson, writes the times
# into `lessons/runtimes.json` with the machine and its load, and the cell renders them from there.
# `python lessons/build.py --table` lists all the lessons with their runtimes. This lesson trains
# nothing.
#
# **Terms:** each term of these lessons, in English and as Korean texts write it, is in [the glossary](docs/glossary.md).

# %%
from lessonkit.runtimes import show_cost

show_cost("00")

# %% [markdown]
# ## 1. Install, run, test
#
# From the root of the repository:
#
# ```bash
# python -m venv .venv && source .venv/bin/activate
# pip install -r requirements.txt         # the package itself (-e .), NumPy, matplotlib and JupyterLab
# jupyter lab lessons/                    # open the lessons
# # to run the tests and rebuild lessons too:   pip install -r requirements-dev.txt
# # on a machine with an NVIDIA GPU, add CuPy:  pip install -r requirements-gpu.txt
# ```
#
# `requirements.txt` installs the package *editable* (`-e .`): Python imports it straight from
# `minitransformer/` in the repository, so a line you change there (a `print`, a
# `breakpoint()`) takes effect the next time the module is imported — in a notebook, after
# *Kernel → Restart*.
#
# * Open the lessons with `jupyter lab lessons/`, or open the `.ipynb` files in VS Code.
#   Each one says in its first cell how long it took to run top to bottom on a 2-core CPU when it
#   was last built (`python lessons/build.py --table` lists them all).
# * After `pip install -r requirements-dev.txt` (pytest, nbmake, torch for the parity tests, ...), run the
#   tests with `python -m pytest` (`-m "not slow"` for the quick ones), and every notebook top to bottom,
#   as CI does, with `python -m pytest --nbmake lessons/`.
# * Each notebook is built from a plain Python file, `lessons/src/NN_name.py`, in
#   jupytext's *percent* format: `# %%` starts a code cell, `# %% [markdown]` a text cell.
#   To change a lesson, edit its `.py` and run `python lessons/build.py NN` (e.g. `03`): it
#   rewrites the notebook and executes it. `python lessons/build.py --check` says whether every
#   notebook still matches its source (a test checks the same). Do not edit an `.ipynb` by
#   hand: the next build overwrites it. (Jupyter with the jupytext extension also opens the
#   `.py` files as notebooks.)

# %%
import numpy as np
import matplotlib.pyplot as plt

from minitransformer import backend

backend.set_default_dtype("float64")   # new parameters in float64: gradient checks need it (lesson 0)
np.set_printoptions(precision=4, suppress=True, linewidth=100)
plt.rcParams.update({"figure.dpi": 80, "axes.grid": True, "grid.alpha": 0.3})

# %%
import sys
import minitransformer

import os
from lessonkit.i18n import tr        # printed prose in the notebook's language (lessons/ko/)

# A path relative to this folder: ../minitransformer/... means the copy in this repository.
print(tr(f"minitransformer {minitransformer.__version__} imported from {os.path.relpath(minitransformer.__file__)}"))
print("numpy", np.__version__, "| python", sys.version.split()[0])

# %% [markdown]
# ## 2. NumPy or CuPy
#
# CuPy copies NumPy's interface on the GPU, so the same layer code can run on either if it
# never names `numpy` directly. Every compute function in the package asks its inputs which
# library they belong to, with CuPy's idiom `xp = backend.get_array_module(x)`, and then calls
# `xp.exp`, `xp.zeros_like`, ... Here is the softmax that attention uses:

# %%
import inspect
from minitransformer.layers.attention import softmax_lastaxis

print(inspect.getsource(softmax_lastaxis))

# %% [markdown]
# Only *new* arrays (parameters, dropout masks, tables) need a decision about where to live.
# `minitransformer.backend` makes it in one place:
#
# | what | how |
# | --- | --- |
# | where new parameters live | `backend.set_backend("numpy" or "cupy")`, or the environment variable `MINITRANSFORMER_BACKEND=cupy` |
# | their float type | `backend.set_default_dtype("float32" or "float64")`, or `MINITRANSFORMER_DTYPE=float64` |
# | which library an array uses | `backend.get_array_module(x)` |
# | back to the host for printing and plotting | `backend.to_numpy(x)` |
#
# float32 is the default (training); the gradient checks use float64, for the reason §3 below
# shows. On a GPU machine the only changes would be:
#
# ```python
# backend.set_backend("cupy")          # parameters are created on the GPU from now on
# x = cupy.asarray(x_host)             # inputs too
# y = layer.forward(x)                 # the very same code; inside, xp is cupy
# plt.plot(backend.to_numpy(y)[0])     # matplotlib wants host arrays
# ```

# %%
x = np.array([[1.0, 2.0, 3.0]])
print(tr(f"x lives in: {backend.get_array_module(x).__name__}"))
print(tr(f"new parameters go to: {backend.backend_name()} as {backend.default_dtype()}"))
print(tr(f"CuPy with a usable GPU here: {backend.cupy_available()}"))

# %% [markdown]
# ## 3. The gradient checker
#
# A backward pass is a claim: *this is $\partial L/\partial x$*. We test the claim against
# the definition of a derivative. For one entry $x_i$ of an input, Taylor's theorem gives
#
# $$f(x \pm h e_i) = f(x) \pm h\,\partial_i f + \tfrac{h^2}{2}\,\partial_i^2 f \pm \tfrac{h^3}{6}\,\partial_i^3 f + O(h^4).$$
#
# Subtracting the two expansions cancels the even terms:
#
# $$\frac{f(x + h e_i) - f(x - h e_i)}{2h} = \partial_i f + \tfrac{h^2}{6}\,\partial_i^3 f + O(h^4),$$
#
# so the **central difference** is off by $O(h^2)$, whereas the one-sided
# $\big(f(x+he_i) - f(x)\big)/h = \partial_i f + \tfrac{h}{2}\partial_i^2 f + \dots$ is off by
# $O(h)$. Making $h$ small is not free: each $f$ is computed with a relative rounding error
# $\varepsilon$ ($2.2\times 10^{-16}$ in float64, $1.2\times 10^{-7}$ in float32), and dividing
# by $h$ magnifies it to about $\varepsilon |f| / h$. The total error
# $\approx \tfrac{h^2}{6}|f'''| + \varepsilon|f|/h$ is smallest near $h \approx \varepsilon^{1/3}$:
# about $10^{-5}$ in float64, where the error is around $10^{-10}$. In float32 the best one can
# count on is around $10^{-5}$ (at $h \approx 10^{-2}$; one lucky $h$ can land lower, as the jagged
# curve shows) — too coarse to tell a right backward from a slightly wrong one.
# The picture shows both effects for $f = \sin$ at $x = 1$:

# %% [markdown]
# **Predict**, before the picture below: the relative error of the one-sided difference $(\sin(1 + h) - \sin 1)/h$ in float64, with $h = 10^{-5}$. A number, such as `1e-10`.

# %% tags=["predict"]
my_prediction_0_1 = None   # a number: the one-sided difference's relative error


# %% [markdown]
# **Predict**: and the central difference $(\sin(1 + h) - \sin(1 - h))/2h$ computed in **float32**, with the same $h = 10^{-5}$?

# %% tags=["predict"]
my_prediction_0_2 = None   # a number: the float32 central difference's relative error


# %% tags=["reveal"]
from lessonkit.predict import reveal

x1, h1 = 1.0, 1e-5
one_sided_err = abs((np.sin(x1 + h1) - np.sin(x1)) / h1 - np.cos(x1)) / np.cos(x1)
x32, h32 = np.float32(1.0), np.float32(1e-5)
central32 = abs(float((np.sin(x32 + h32) - np.sin(x32 - h32)) / (np.float32(2) * h32)) - np.cos(1.0)) / np.cos(1.0)
reveal(my_prediction_0_1, one_sided_err, what="relative error of the one-sided difference, float64, h = 1e-5")
reveal(my_prediction_0_2, central32, what="relative error of the central difference, float32, h = 1e-5")


# %%
hs = np.logspace(-12, -0.5, 60)
fig, ax = plt.subplots(figsize=(7, 3.6))
h_opt, near = {"float32": 1e-2, "float64": 1e-5}, {}      # the best h of the text, and the median error within 3x of it
for dtype, color in ((np.float32, "tab:red"), (np.float64, "tab:blue")):
    x0 = dtype(1.0)
    exact = np.cos(np.float64(1.0))
    central, one_sided = [], []
    for h in hs:
        h = dtype(h)
        central.append(abs(float((np.sin(x0 + h) - np.sin(x0 - h)) / (dtype(2) * h)) - exact) / exact)
        one_sided.append(abs(float((np.sin(x0 + h) - np.sin(x0)) / h) - exact) / exact)
    name = np.dtype(dtype).name
    ax.loglog(hs, np.maximum(central, 1e-17), color=color, label=tr(f"central, {name}"))
    ax.loglog(hs, np.maximum(one_sided, 1e-17), color=color, ls="--", label=tr(f"one-sided, {name}"))
    near[name] = np.median([e for e, h in zip(central, hs) if h_opt[name] / 3 <= h <= h_opt[name] * 3])
ax.axvline(1e-5, color="gray", lw=0.8)
ax.text(1.3e-5, 1e-15, tr("h = 1e-5\n(the package's default)"), fontsize=8, color="gray")
ax.set(xlabel=tr("step h"), ylabel=tr("relative error of d sin(x)/dx at x = 1"), ylim=(1e-17, 10),
       title=tr("Finite differences: truncation error (right) vs rounding error (left)"))
ax.legend(fontsize=8, loc="lower left", ncol=2)
plt.show()

from lessonkit.prose import claim

for name, h in h_opt.items():
    print(tr(f"{name}: median relative error of the central difference for h within 3x of {h:g}: {near[name]:.1e}"))
claim("in float64, at h near 1e-5, the error is around 1e-10 (within a factor of 10)", near["float64"],
      low=1e-11, high=1e-9)
claim("in float32, at h near 1e-2, the error is around 1e-5 (within a factor of 10)", near["float32"],
      low=1e-6, high=1e-4)

# %% [markdown]
# `minitransformer.gradcheck` turns this into three small tools:
#
# * `numerical_gradient(f, x, h=1e-5)` — the central difference of a scalar `f()` with
#   respect to every entry of the float64 array `x` (it perturbs `x` in place and puts it back,
#   so `f` must read `x`). It refuses float32 arrays.
# * `rel_error(a, n)` $= \max_i |a_i - n_i| \,/\, \max_i \max(|a_i|, |n_i|)$: the largest
#   disagreement measured against the size of the gradient. A right backward in float64 gives
#   about $10^{-9}$ or less; a wrong one gives something near 1.
# * `gradcheck(f, wrt, analytic)` and `check_layer(layer, *inputs)` run the comparison for
#   several tensors and return a report, one line per tensor; `report.assert_ok()` raises
#   naming every tensor above the tolerance ($10^{-6}$).
#
# **Cost.** Every entry costs two forward passes, so checks use tiny shapes (tens to a few
# hundred entries); the shapes are small, but every code path is the same as at full size.

# %%
from minitransformer.gradcheck import check_layer, gradcheck, numerical_gradient

try:
    numerical_gradient(lambda: 0.0, np.zeros(3, dtype=np.float32))
except TypeError as err:
    print("TypeError:", err)

# %% [markdown]
# ### A first layer and its backward: `y = x W + b`
#
# The linear layer (`minitransformer.layers.linear.linear_forward` / `linear_backward`, class
# `Linear`) is used by every projection in the model. Fold the batch and position axes
# into one row index $n$ (there are $B \cdot S$ rows). Then
# $y_{nj} = \sum_i x_{ni} W_{ij} + b_j$ and, with $\delta y_{nj} = \partial L/\partial y_{nj}$
# given by the layer above, the chain rule gives
#
# $$\frac{\partial L}{\partial x_{ni}} = \sum_j \delta y_{nj} W_{ij} \;\Rightarrow\; \delta x = \delta y\, W^\top,\qquad
# \frac{\partial L}{\partial W_{ij}} = \sum_n x_{ni}\, \delta y_{nj} \;\Rightarrow\; \delta W = x^\top \delta y,\qquad
# \frac{\partial L}{\partial b_j} = \sum_n \delta y_{nj}.$$
#
# A useful habit: a gradient has the shape of the thing it is the gradient of, and that alone
# nearly fixes where the transposes go ($\delta W$ must be $d_\text{in} \times d_\text{out}$).
# `check_layer` builds the scalar $L = \sum y \odot G$ for a fixed random $G$ (so
# $\partial L/\partial y = G$), runs the layer's backward once, and compares every input and
# parameter gradient with central differences:

# %%
from minitransformer.layers.linear import Linear, linear_forward

rng = np.random.default_rng(0)
layer = Linear(4, 3, rng)                  # W: (4, 3), b: (3,), float64 (set above)
x = rng.standard_normal((2, 5, 4))         # (B, S, d_in)
report = check_layer(layer, x)             # 40 + 12 + 3 entries -> 110 forward passes
print(report)
report.assert_ok()


# %% [markdown]
# ### What a bug looks like
#
# Below is a backward for the same layer with one mistake in it. It runs, it returns arrays of
# the right shapes, and nothing crashes — the kind of bug only a gradient check finds. The
# report points at the guilty tensor (exercise 0.2 asks you to fix it).

# %%
def buggy_linear_backward(dy, x, W, b):
    d_in, d_out = W.shape
    dx = dy @ W.T
    dW = x.reshape(-1, d_in).T @ dy.reshape(-1, d_out)
    db = dy.reshape(-1, d_out).mean(axis=0)
    return dx, dW, db

rng = np.random.default_rng(1)
x, W, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5)), rng.standard_normal(5)
dy = rng.standard_normal((2, 3, 5))
dx, dW, db = buggy_linear_backward(dy, x, W, b)

def loss():                                   # L = sum(y * dy), so dL/dy = dy
    return float((linear_forward(x, W, b)[0] * dy).sum())

report = gradcheck(loss, {"x": x, "W": W, "b": b}, {"x": dx, "W": dW, "b": db})
try:
    report.assert_ok()
except AssertionError as err:
    print("AssertionError:", err)

# %% [markdown]
# ## 4. Stepping through a forward and a backward in a debugger
#
# Reading a derivation is one thing; watching `S`, `A`, `dS` and `dQ` appear one line at a
# time, with their shapes and values, is another. Three ways to do that, from the simplest.
#
# ### 4a. A small script and `breakpoint()`
#
# `lessons/debug_attention.py` runs attention (lesson 1) on one sentence of three positions
# with $d_k = 2$, so every array fits on the screen: forward, backward, gradient check.
# Imported and run as it is, it prints:

# %%
import debug_attention                     # lessons/debug_attention.py, next to this notebook

debug_attention.main()

# %% [markdown]
# Python's built-in `breakpoint()` stops the program on that line and opens the debugger
# `pdb`. The script has one behind a flag: `python lessons/debug_attention.py --break` stops
# just before the forward pass (`--break backward`: just before the backward) and prints the
# walkthrough below. You can also put one **inside the package** — the install is editable,
# so this takes effect at the next import (in a notebook, after *Kernel → Restart*):
#
# ```python
# # minitransformer/layers/attention.py
# def attention_backward(dout, cache: AttentionCache):
#     ...
#     Q, K, V, A, scale = cache
#     breakpoint()                       # temporary: stops here on every call
#     dA = backend.matmul(dout, V.swapaxes(-1, -2))
# ```
#
# The commands you need:
#
# | command | does |
# | --- | --- |
# | `p expr` / `pp expr` | print (pretty-print) any expression: `p A.shape`, `p A.sum(-1)`, `pp cache._asdict().keys()` |
# | `n` | run the current line, stop at the next one in this function (a call on the line runs whole) |
# | `s` | step *into* the function called on this line (pdb first stops on its `def` line: `--Call--`) |
# | `r` | run to the end of the current function |
# | `b FILE:LINE` | a breakpoint: stop each time that line is about to run (`b` alone lists them, numbered) |
# | `b FILE:LINE, cond` | stop there only when `cond` is true in that frame |
# | `tbreak FILE:LINE` | a one-shot breakpoint: it deletes itself the first time it stops |
# | `cl FILE:LINE` / `cl N` | clear the breakpoints on that line / number N (`cl` alone clears all, after asking) |
# | `disable N` / `enable N` / `ignore N count` | switch breakpoint N off / on / let it pass `count` times |
# | `display expr` | print `expr` again at every stop where its value has changed (`undisplay` to stop) |
# | `c` | continue to the next breakpoint (or the end) |
# | `u` / `d` | move up to the caller / back down |
# | `w` | where am I: the call stack |
# | `l` / `ll` | list source around the current line / the whole function |
# | `until N` | run on to line N |
# | `q` | quit |
# | `interact` | a Python prompt with the current variables (Ctrl-D to return) |
#
# **The walkthrough.** It steps into the forward with `s` and `n`, watches the scores turn
# into weights with `display`, jumps to the end of the forward with `b` and `c`, into the
# backward with `tbreak`, and clears the forward's breakpoint before the gradient check runs.
# It is one list, `debug_attention.WALKTHROUGH`, that the script's hint, this lesson and a test
# (`tests/test_debugger_walkthrough.py`: every `p` must print a value) all use. The breakpoint
# lines are looked up in the package's source by their text, so they are right for your copy:

# %%
repo = str(debug_attention.REPO)          # printed as <repo> below
for command, note in debug_attention.WALKTHROUGH:
    print(f"{command.replace(repo, '<repo>'):<54} # {note}")

# %% [markdown]
# Here is the real session: the script runs in a subprocess and the commands are typed at its
# `(Pdb)` prompts for us, so this notebook never waits for a keyboard
# (`debug_attention.run_walkthrough()` does that; type them yourself in a terminal).

# %%
transcript = debug_attention.run_walkthrough()
print(str(transcript).replace(repo, "<repo>"))
assert transcript.returncode == 0, transcript.stderr
assert "it ran attention_forward 36 times" in str(transcript), "the text below counts 36 forward runs: rewrite it"

# %% [markdown]
# What to notice:
#
# * After `s`, pdb stops on the `def` line; `n` then walks the function one statement at a
#   time and steps *over* calls (`attention_scores` ran whole; `s` would have gone inside).
# * `A is S` is `True`: the softmax runs in the scores' own buffer to save memory, so once that
#   line has run the scores are gone, and `display` shows it happen. To keep them, type
#   `p S.copy()` before that line, or call `attention_scores(Q, K, mask)` yourself. The
#   backward does the same with `dA` and `dS` (`dA is dS`): to see `dA`, stop before the
#   softmax backward (`ll` inside `attention_backward` shows where).
# * Row 0 of `dQ` is 0: query 0 may attend to key 0 only, so its weight is 1 whatever `Q` is,
#   and row 0 of `Q` cannot change the output.
# * **`display` and NumPy.** pdb decides whether to show a displayed expression by comparing the
#   old and new values with `!=`. For an array of more than one entry that comparison has no
#   single truth value and raises, which ends the whole debugging session (Python 3.11); for
#   an array changed in place (the same object) it shows nothing. Display a plain Python value:
#   `.tolist()`, `float(...)`, `.shape`.
#
# **A breakpoint in a forward fires again and again.** A gradient check runs the forward twice
# per input entry: 36 times for this tiny example (the script counts them), thousands for a
# layer. A `b` left in `attention_forward` stops at every one of them. Before you `c` into a
# gradient check (or a training loop):
#
# * use `tbreak` instead of `b`: it fires once;
# * or `cl FILE:LINE` (or `cl N`) the breakpoint first, as the walkthrough does, or `disable N`
#   it for a while;
# * or make it conditional: `b FILE:LINE, cond` stops only when `cond` holds in that frame (for
#   example `Q.shape[-2] > 1` skips the one-position steps of cached decoding, lesson 7), and
#   `ignore N 36` lets breakpoint N pass the next 36 times.
#
# To switch every `breakpoint()` off without editing code, set the environment variable
# `PYTHONBREAKPOINT=0` (for example when a forgotten one would hang a test run). Python reads
# it at each call, so it works even inside a running kernel:

# %%
os.environ["PYTHONBREAKPOINT"] = "0"      # breakpoint() now does nothing
debug_attention.main(stop="forward")      # what `python lessons/debug_attention.py --break` runs
print(tr("(ran straight through: the script's breakpoint() was switched off)"))
del os.environ["PYTHONBREAKPOINT"]        # and on again

# %% [markdown]
# ### 4b. `%debug` in Jupyter
#
# In a notebook, `breakpoint()` in a cell (or in package code a cell calls) opens the same
# debugger right under the cell, as `ipdb>`. More often you want to look *after* something
# failed: when a cell raises, type `%debug` alone in the next cell and you land in the frame
# that raised, with every variable still there (`%pdb on` does this automatically for every
# error). For example, a multi-head attention layer fed the wrong width raises with a message
# that names the problem:

# %%
from minitransformer.layers.attention import MultiHeadAttention

mha = MultiHeadAttention(d_model=8, h=2, rng=np.random.default_rng(0))
x_wrong = np.zeros((2, 3, 6))              # last axis should be d_model = 8
try:
    mha.forward(x_wrong)
except ValueError as err:                  # ShapeError is a ValueError
    print(type(err).__name__ + ":", err)

# %% [markdown]
# Without the `try`, the cell would stop with that traceback, and this is what you would type
# (debuggers are interactive, so this notebook only shows it):
#
# ```text
# In [ ]: %debug
# > <repo>/minitransformer/errors.py(…)check_last_dim()
# ipdb> p shape                      # what arrived
# (2, 3, 6)
# ipdb> u                            # up one frame: check_input, every layer's input check
# ipdb> u                            # up again: MultiHeadAttention._check_input
# ipdb> p x_q.shape, self.d_model
# ((2, 3, 6), 8)
# ipdb> u                            # and again: the wrapper that runs the checks before the forward's math
# ipdb> q
# ```
#
# The same post-mortem works in the terminal: `python -m pdb lessons/debug_attention.py`,
# or `pytest --pdb` to stop inside the first failing test (`pytest --trace` stops at the
# start of each test).
#
# ### 4c. VS Code
#
# The repository has a ready `.vscode/launch.json`. Open the repository folder in VS Code
# (with the Python extension), choose *Run and Debug*, pick a configuration, and press F5.
# Click left of a line number for a breakpoint (a red dot) — in the script, in a test, or in
# the package — and use F10 (step over), F11 (step into) and the *Variables* panel, which shows
# a cache's fields by name. The configurations (`justMyCode` is off, so you can step into
# anything; they use the debugger type `"debugpy"` of the current Python Debugger extension —
# very old versions of the Python extension called it `"python"`):

# %%
import json

launch = json.loads((debug_attention.REPO / ".vscode" / "launch.json").read_text())
for cfg in launch["configurations"]:
    target = cfg.get("program") or "python -m " + cfg["module"]
    print(f"{cfg['name']:<66} {target} {' '.join(cfg.get('args', []))}")


# %% [markdown]
# To step into the forward, pick *debug_attention.py --break: step into the forward*: it stops
# at the script's `breakpoint()` just before `attention_forward(...)`. Press F11 to go inside,
# then F10 line by line, and watch `S` turn into `A` in the *Variables* panel (one buffer, as
# in 4a). The *backward* configuration does the same for `attention_backward`. The same
# warning holds: a red dot in a forward stops at every call of the gradient check, so remove it
# (or right-click it: *Edit Condition*, *Hit Count*) before you continue past the backward.
# The exercise checkers of lessons 0–3 and 4–7 have a configuration each that runs their
# tests under the debugger: a red dot in `lessonkit/exercises/` shows what a checker
# compares.
#
# In a notebook, VS Code also offers *Debug Cell* (the arrow next to *Run* on each cell).
#
# **A habit that pays:** every backward in the package reads its inputs from a small named
# cache (`AttentionCache`, `LinearCache`, ...). In a debugger, `p cache._asdict().keys()`, or
# the *Variables* panel, shows exactly what the backward pass has to work with.

# %% [markdown]
# ## Exercises
#
# Each exercise has a cell with a stub to fill in and a checking cell below it. The checker
# runs your function on fixed random inputs and compares it with the package's answer **and**,
# for a gradient, with a numerical gradient. While the stub still returns `None` it prints
# *not attempted yet*; a wrong answer raises a `WrongAnswer` (an `AssertionError`) that says what is wrong (a
# shape, or how far off the values are, with one tolerance, $10^{-6}$, in every lesson) and,
# when your answer matches a common mistake, a `hint:` line naming it; a right one prints
# `correct` with the measured errors. The checkers live in `lessonkit.exercises.lessons_0_3`.
# Exercises are numbered *lesson.exercise*. In the full notebook the solutions follow at the very
# end, if you want to peek; the student edition a teacher hands out leaves them out.

# %% [markdown]
# ### Exercise 0.1 — a numerical gradient
#
# Write the central difference of §3 yourself. `f()` takes no arguments and reads `x`; return an
# array shaped like `x` whose entry `i` is $\big(f(x + h e_i) - f(x - h e_i)\big)/(2h)$.
# Change `x` in place one entry at a time, and put each entry back afterwards.
# (`np.ndindex(x.shape)` visits every index of an array of any shape.)

# %% tags=["stub"]
def my_numerical_gradient(f, x, h=1e-5):
    # YOUR CODE HERE: return the central-difference gradient of f() with respect to x
    return None


# %% tags=["check"]
from lessonkit.exercises.lessons_0_3 import check_numerical_gradient

check_numerical_gradient(my_numerical_gradient)


# %% [markdown]
# ### Exercise 0.2 — find and fix the bug
#
# `buggy_linear_backward` in §3 has one mistake, and the gradient check named the tensor.
# Write a correct `my_linear_backward(dy, x, W, b)` returning `(dx, dW, db)` for $y = xW + b$
# with `x` of shape `(B, S, d_in)`. (Tip: the derivation in §3; if you are stuck, put a
# `breakpoint()` in your function and compare shapes and values in the debugger.)

# %% tags=["stub"]
def my_linear_backward(dy, x, W, b):
    # YOUR CODE HERE: return (dx, dW, db)
    return None


# %% tags=["check"]
from lessonkit.exercises.lessons_0_3 import check_linear_backward

check_linear_backward(my_linear_backward)


# %% [markdown] tags=["solution"]
# ---
# ## Solutions
#
# Try the exercises first. Each solution is followed by the checking cell that proves it.

# %% tags=["solution"]
def solution_numerical_gradient(f, x, h=1e-5):
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + h
        f_plus = f()
        x[i] = old - h
        f_minus = f()
        x[i] = old                           # put it back
        grad[i] = (f_plus - f_minus) / (2 * h)
    return grad

check_numerical_gradient(solution_numerical_gradient)


# %% tags=["solution"]
def solution_linear_backward(dy, x, W, b):
    d_in, d_out = W.shape
    dx = dy @ W.T                                        # (B, S, d_in)
    dW = x.reshape(-1, d_in).T @ dy.reshape(-1, d_out)   # (d_in, d_out)
    db = dy.reshape(-1, d_out).sum(axis=0)               # the bug was .mean: L adds over every row
    return dx, dW, db

check_linear_backward(solution_linear_backward)
