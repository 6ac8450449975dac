"""Write lessons 4-7 as notebooks and execute them, so they are committed with outputs.

    python lessons/build_lessons_4_7.py            # all four
    python lessons/build_lessons_4_7.py 05 07      # only lessons 5 and 7

Lesson 4  Residual connections and LayerNorm   (§3.1)
Lesson 5  Embeddings and softmax               (§3.4)
Lesson 6  Positional encoding                  (§3.5)
Lesson 7  The encoder-decoder assembled        (§3.1)

The notebook text lives here, cell by cell; edit it here and rebuild rather
than editing the .ipynb files by hand. Each notebook imports the package and
never re-implements it; exercise checkers live in
``minitransformer/exercises/lessons_4_7.py``.
"""

from __future__ import annotations

import pathlib
import sys
import time

import nbformat
from nbclient import NotebookClient

HERE = pathlib.Path(__file__).resolve().parent


def md(text: str):
    return nbformat.v4.new_markdown_cell(text.strip("\n"))


def code(text: str):
    return nbformat.v4.new_code_cell(text.strip("\n"))


SETUP = r'''
%matplotlib inline
import numpy as np
import matplotlib.pyplot as plt

from minitransformer import backend

plt.rcParams.update({"figure.dpi": 80, "savefig.dpi": 80, "font.size": 9})
np.set_printoptions(precision=4, suppress=True, linewidth=110)
backend.set_default_dtype("float64")   # new parameters in float64: gradient checks need it
'''

NOT_ATTEMPTED_NOTE = (
    "Each checking cell prints *not attempted yet* until you fill in the function above it; "
    "a wrong answer raises an `AssertionError` that says what is wrong."
)


# ====================================================================================
# Lesson 4
# ====================================================================================

def lesson_4():
    return [
        md(r"""
# Lesson 4 — Residual connections and layer normalization (§3.1)

Every sub-layer of the Transformer (each self-attention, each encoder–decoder attention, each
feed-forward network) sits inside the same wrapper. Section 3.1 describes it: add the sub-layer's
output back onto its input, then layer-normalize the sum. With the dropout of §5.4 ("Residual
Dropout", applied to the sub-layer output before the addition), one wrapped sub-layer computes

$$ y = \mathrm{LayerNorm}\big(x + \mathrm{Dropout}(\mathrm{Sublayer}(x))\big). $$

In this lesson:

1. LayerNorm's forward pass, and its backward pass derived by hand;
2. the residual wrapper's backward, where the skip connection shows up as a plain "$+\,\partial L/\partial z$";
3. an experiment: the gradient norm at every layer of a deep stack, with and without residual connections;
4. post-LN (the paper) against pre-LN (a later variant).

| what | where in the package |
| --- | --- |
| LayerNorm forward / backward | `minitransformer.layers.layernorm.layernorm_forward`, `layernorm_backward`, class `LayerNorm` |
| the wrapper (post-LN by default) | `minitransformer.layers.residual.Residual(d_model, P_drop, pre_ln=False)` |
| a stack of wrapped layers | `minitransformer.model.Encoder`, `Decoder`; `TransformerConfig(pre_ln=...)` |
| the gradient checker | `minitransformer.gradcheck.check_layer`, `gradcheck`, `rel_error` |
"""),
        code(SETUP),
        md(r"""
## 1. LayerNorm, forward

Layer normalization (Ba et al., 2016) works on one position at a time: it takes the $n = d_\text{model}$
features of that position, removes their mean, divides by their standard deviation, and then applies a
learned gain $\gamma$ and bias $\beta$ (one per feature):

$$\mu = \frac1n\sum_{j=1}^n x_j,\qquad \sigma^2 = \frac1n\sum_{j=1}^n (x_j-\mu)^2,\qquad
\hat x_j = \frac{x_j-\mu}{\sqrt{\sigma^2+\epsilon}},\qquad y_j = \gamma_j\,\hat x_j + \beta_j .$$

Two details that are easy to get wrong: the variance is the *biased* one (divide by $n$, not $n-1$), and
$\epsilon$ sits *inside* the square root. Nothing is averaged over the batch, so training and inference
compute exactly the same function. `layernorm_forward(x, gamma, beta, eps)` returns $y$ and a cache with
what the backward needs.
"""),
        code(r'''
from minitransformer.layers.layernorm import LayerNorm, layernorm_forward, layernorm_backward

x = np.array([[1.0, 2.0, 3.0, 10.0],
              [-5.0, 0.0, 0.5, 0.5]])              # two positions, d_model = 4
y, cache = layernorm_forward(x, gamma=np.ones(4), beta=np.zeros(4), eps=1e-5)
print("y =\n", y)
print("mean of each row     :", y.mean(axis=-1))
print("biased var of each row:", y.var(axis=-1))   # np.var divides by n: 1 - (tiny eps effect)
print("the cache keeps      :", cache._fields)
'''),
        md(r"""
## 2. LayerNorm, backward — the derivation

Work with one position; the batch and sequence axes just come along. Write
$r = (\sigma^2+\epsilon)^{-1/2}$ (the cache calls it `rstd`), so $\hat x_j = (x_j-\mu)\,r$, and let
$g_j = \partial L/\partial \hat x_j = \gamma_j\,\partial L/\partial y_j$.

**Gain and bias.** From $y_j = \gamma_j\hat x_j + \beta_j$:
$\;\partial L/\partial\gamma_j = \sum \frac{\partial L}{\partial y_j}\,\hat x_j$ and
$\partial L/\partial\beta_j = \sum \frac{\partial L}{\partial y_j}$, where the sums run over every batch
element and position, because the same $\gamma$ and $\beta$ are used at all of them.

**Input.** Three small derivatives first:

$$\frac{\partial \mu}{\partial x_k} = \frac1n,\qquad
\frac{\partial\sigma^2}{\partial x_k} = \frac2n\,(x_k-\mu),\qquad
\frac{\partial r}{\partial x_k} = -\frac12\,r^3\,\frac{\partial\sigma^2}{\partial x_k} = -\frac{r^2}{n}\,\hat x_k .$$

(In $\partial\sigma^2/\partial x_k$ the term coming through $\mu$ drops out, because $\sum_j (x_j-\mu) = 0$.)
The product rule on $\hat x_j = (x_j-\mu)\,r$ then gives

$$\frac{\partial\hat x_j}{\partial x_k} = r\Big(\delta_{jk} - \frac1n\Big) + (x_j-\mu)\,\frac{\partial r}{\partial x_k}
= r\Big(\delta_{jk} - \frac1n - \frac1n\,\hat x_j\hat x_k\Big),$$

and the chain rule $\partial L/\partial x_k = \sum_j g_j\,\partial\hat x_j/\partial x_k$ gives

$$\boxed{\;\frac{\partial L}{\partial x} = r\,\Big(g - \overline{g} - \hat x\;\overline{g\odot\hat x}\Big)\;}$$

with the bars meaning "mean over the $n$ features". This is, line for line, `layernorm_backward`:
`g = dy * gamma; dx = rstd * (g - g.mean(-1) - x_hat * (g * x_hat).mean(-1))`.

**What the formula says.** The Jacobian is $J = r\,(I - \tfrac1n\mathbf 1\mathbf 1^\top - \tfrac1n\hat x\hat x^\top)$.
Because $\hat x \perp \mathbf 1$ and $\|\hat x\|^2 = n\,\sigma^2/(\sigma^2+\epsilon)\approx n$, it is (up to
$\epsilon$) $r$ times a projection that removes two directions: $\mathbf 1$ (shifting every feature by the
same amount) and $\hat x$ (scaling the centred vector). Those are exactly the two things the forward pass
normalizes away, so the gradient reaching $x$ has no component along them. A numerical look:
"""),
        code(r'''
rng = np.random.default_rng(0)
n = 6
x = rng.standard_normal(n) * 3 + 1
gamma, beta, dy = rng.standard_normal(n), rng.standard_normal(n), rng.standard_normal(n)
y, cache = layernorm_forward(x, gamma, beta, 1e-5)
dx, dgamma, dbeta = layernorm_backward(dy, cache)
x_hat, r = cache.x_hat, cache.rstd

print("sum(dx)     =", dx.sum())          # no component along 1
g = gamma * dy
print(f"dx · x_hat  = {dx @ x_hat:.3e}   predicted from eps alone: {float(r[0] * (g @ x_hat) * (1 - x_hat @ x_hat / n)):.3e}")
J = r * (np.eye(n) - np.ones((n, n)) / n - np.outer(x_hat, x_hat) / n)
print("eigenvalues of J / r:", np.sort(np.linalg.eigvalsh(J / r)).round(8))
print("max |dx - J (gamma*dy)| =", np.abs(dx - J @ (gamma * dy)).max())
'''),
        md(r"""
Two eigenvalues are (almost) zero and the rest are one: a projection, scaled by $r$. The second "zero"
is really $1-\|\hat x\|^2/n = \epsilon/(\sigma^2+\epsilon)$, tiny but not exactly zero, and it is also why
$dx\cdot\hat x$ above is small rather than zero: it equals $r\,(g\cdot\hat x)\,\epsilon/(\sigma^2+\epsilon)$, as printed.

### Gradient check

`check_layer` from `minitransformer.gradcheck` draws a fixed random upstream gradient $G$, runs
`backward(G)`, and compares every input and parameter gradient with central differences of
$L = \sum y\odot G$, in float64. We give $\gamma$ and $\beta$ random values so the check does not hide
behind $\gamma = 1$.
"""),
        code(r'''
from minitransformer.gradcheck import check_layer, gradcheck, numerical_gradient, rel_error

ln = LayerNorm(8, name="ln")
ln.gamma.data[:] = rng.standard_normal(8)
ln.beta.data[:] = rng.standard_normal(8)
report = check_layer(ln, rng.standard_normal((2, 3, 8)) * 2 + 1)
print(report)
report.assert_ok()
'''),
        md(r"""
## 3. The residual wrapper, forward and backward

The skip connection comes from residual networks (He et al., 2016). For $x + \mathrm{Sublayer}(x)$ to make
sense, every sub-layer (and the embedding layer) produces vectors of the same width $d_\text{model}$ (§3.1).

**Post-LN, the paper.** Forward, with $z$ the sum and $m$ the dropout mask:

$$ z = x + m\odot F(x),\qquad y = \mathrm{LN}(z).$$

Backward, undoing one line at a time:

$$ \frac{\partial L}{\partial z} = J_{\mathrm{LN}}^\top\,\frac{\partial L}{\partial y},\qquad
\frac{\partial L}{\partial x} = \underbrace{\frac{\partial L}{\partial z}}_{\text{skip connection}}
\;+\; J_F(x)^\top\Big(m\odot\frac{\partial L}{\partial z}\Big).$$

The first term is the point of the residual: the gradient of the sum arrives at $x$ without being
multiplied by the sub-layer's Jacobian $J_F$, whatever the sub-layer does. In `Residual.backward` it is the
line `return dz + sublayer_backward(self.dropout.backward(dz))`.

**Pre-LN, a later variant.** The norm moves inside the branch, $y = x + m\odot F(\mathrm{LN}(x))$, so

$$\frac{\partial L}{\partial x} = \frac{\partial L}{\partial y} + J_{\mathrm{LN}}^\top J_F^\top\Big(m\odot\frac{\partial L}{\partial y}\Big):$$

here the skip path carries $\partial L/\partial y$ through the whole stack without passing through any
LayerNorm (apart from the one final LayerNorm that a pre-LN stack ends with, section 5).

Both are checked below with a real feed-forward sub-layer (`FeedForward`, §3.3, Eq. 2) and dropout
switched on. `Residual` takes the sub-layer as callables, so a four-line `Block` ties the two together for
`check_layer`; re-seeding the dropout generator before each forward keeps the mask fixed while the checker
perturbs the inputs one entry at a time.

One trap when checking anything with a ReLU inside: the ReLU has a kink at 0. If some pre-activation lies
within the finite-difference step ($h=10^{-5}$) of zero, the central difference straddles the kink and the
check reports a large error that is not a bug. (With the random state this notebook had reached at this
point, exactly that happened: a pre-activation of $1.3\times10^{-5}$ made `ffn.linear1.W` fail at $5\times10^{-3}$.
The cell below therefore draws from its own seed. When a check of a ReLU network fails on one tensor only,
look at the smallest |pre-activation| before looking for a bug.)
"""),
        code(r'''
from minitransformer.layers.feedforward import FeedForward
from minitransformer.layers.parameter import Layer
from minitransformer.layers.residual import Residual


class Block(Layer):
    """One residual-wrapped feed-forward sub-layer: x -> Residual(x, FFN)."""

    def __init__(self, d_model, d_ff, rng, pre_ln, P_drop=0.0, name="block"):
        super().__init__()
        self.ffn = FeedForward(d_model, d_ff, rng, f"{name}.ffn")
        self.res = Residual(d_model, P_drop, rng=None, pre_ln=pre_ln, name=f"{name}.res")

    def forward(self, x):
        return self.res.forward(x, self.ffn.forward)

    def backward(self, dy):
        return self.res.backward(dy, self.ffn.backward)


rng = np.random.default_rng(1)
x = rng.standard_normal((2, 3, 8))
for pre_ln in (False, True):
    block = Block(8, 16, rng, pre_ln, P_drop=0.1)

    def same_mask(block=block):
        block.res.dropout.rng = np.random.default_rng(7)     # the same dropout mask at every call

    report = check_layer(block, x, before_forward=same_mask)
    print(f"pre_ln={pre_ln!s:5}  {len(report.errors)} tensors checked, max rel error {report.max_error:.1e}")
    report.assert_ok()
print(report)
'''),
        md(r"""
## 4. Do residual connections keep gradients alive? An experiment

Without a skip connection, the gradient at layer $\ell$ of an $L$-layer stack is the top gradient multiplied
by $L-\ell$ Jacobians, and a product of many matrices tends to shrink or grow geometrically. With a skip
connection each factor becomes "identity plus something", which is much better behaved.

The test: a stack of 64 feed-forward sub-layers ($d_\text{model}=32$, $d_\text{ff}=128$, the package's
`FeedForward` with its own initialization), wired four ways with the *same weights*:

| name | one layer |
| --- | --- |
| plain | $x_{\ell+1} = F_\ell(x_\ell)$ |
| LN, no residual | $x_{\ell+1} = \mathrm{LN}(F_\ell(x_\ell))$ |
| post-LN residual (the paper) | $x_{\ell+1} = \mathrm{LN}(x_\ell + F_\ell(x_\ell))$ |
| pre-LN residual | $x_{\ell+1} = x_\ell + F_\ell(\mathrm{LN}(x_\ell))$ |

The loss is $L=\sum x_{64}\odot G$ for a fixed random $G$, so every stack receives the same gradient at the
top, and we record $\|\partial L/\partial x_\ell\|$ at every layer for 8 independently drawn stacks.
Dropout is off.
"""),
        code(r'''
d, d_ff, depth, n_stacks = 32, 128, 64, 8


class Plain(Layer):                       # x -> F(x)
    def __init__(self, ffn):
        super().__init__(); self.ffn = ffn
    def forward(self, x):
        return self.ffn.forward(x)
    def backward(self, dy):
        return self.ffn.backward(dy)


class NormNoResidual(Layer):              # x -> LN(F(x))
    def __init__(self, ffn):
        super().__init__(); self.ffn, self.norm = ffn, LayerNorm(d)
    def forward(self, x):
        return self.norm.forward(self.ffn.forward(x))
    def backward(self, dy):
        return self.ffn.backward(self.norm.backward(dy))


class WithResidual(Layer):                # post-LN: LN(x + F(x));  pre-LN: x + F(LN(x))
    def __init__(self, ffn, pre_ln):
        super().__init__(); self.ffn, self.res = ffn, Residual(d, 0.0, pre_ln=pre_ln)
    def forward(self, x):
        return self.res.forward(x, self.ffn.forward)
    def backward(self, dy):
        return self.res.backward(dy, self.ffn.backward)


KINDS = {
    "plain F(x)": Plain,
    "LN(F(x)), no residual": NormNoResidual,
    "post-LN: LN(x + F(x))": lambda f: WithResidual(f, pre_ln=False),
    "pre-LN: x + F(LN(x))": lambda f: WithResidual(f, pre_ln=True),
}


def run_stack(blocks, x0, G):
    """Forward through the stack, backward from G; return ||dL/dx_l|| and ||x_l|| for l = 0..depth."""
    xs = [x0]
    for b in blocks:
        xs.append(b.forward(xs[-1]))
    grads = [G]
    for b in reversed(blocks):
        grads.append(b.backward(grads[-1]))
    grads = grads[::-1]                                    # grads[l] = dL/dx_l
    return np.array([np.linalg.norm(g) for g in grads]), np.array([np.linalg.norm(v) for v in xs])


grad_norm = {k: [] for k in KINDS}
act_norm = {k: [] for k in KINDS}
for s in range(n_stacks):
    r = np.random.default_rng(100 + s)
    ffns = [FeedForward(d, d_ff, r, f"ffn{i}") for i in range(depth)]
    x0, G = r.standard_normal((4, 10, d)), r.standard_normal((4, 10, d))
    for kind, make in KINDS.items():
        g, a = run_stack([make(f) for f in ffns], x0, G)
        grad_norm[kind].append(g / g[-1])                  # relative to the gradient at the top
        act_norm[kind].append(a / a[0])

fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
colors = dict(zip(KINDS, ["tab:gray", "tab:orange", "tab:blue", "tab:green"]))
for kind in KINDS:
    for i, (g, a) in enumerate(zip(grad_norm[kind], act_norm[kind])):
        label = kind if i == 0 else None
        axes[0].semilogy(g, color=colors[kind], lw=1, alpha=0.7, label=label)
        if kind != "plain F(x)":
            axes[1].semilogy(g, color=colors[kind], lw=1, alpha=0.7, label=label)
        axes[2].semilogy(a, color=colors[kind], lw=1, alpha=0.7, label=label)
axes[0].set(xlabel="layer $\\ell$ (0 = input of the stack)", ylabel="$\\|\\partial L/\\partial x_\\ell\\|$ / top gradient",
            title="gradient norm, 8 random stacks each", ylim=(1e-18, 1e3))
axes[1].set(xlabel="layer $\\ell$", title="the same, without 'plain', zoomed", ylim=(3e-2, 3e1))
axes[2].set(xlabel="layer $\\ell$", ylabel="$\\|x_\\ell\\|$ / $\\|x_0\\|$", title="activation norm", ylim=(1e-18, 1e3))
axes[0].legend(fontsize=7, loc="lower right")
plt.tight_layout(); plt.show()

print(f"{'stack':<24}{'median':>10}{'smallest':>11}{'largest':>10}   of ||dL/dx_0|| / ||dL/dx_64||")
for kind, g in grad_norm.items():
    g0 = np.array([gg[0] for gg in g])
    print(f"{kind:<24}{np.median(g0):10.2e}{g0.min():11.2e}{g0.max():10.2e}")
'''),
        md(r"""
What the plot shows, for these stacks at initialization:

* **plain**: the signal and the gradient both shrink by a roughly constant factor per layer; after 64
  layers the gradient at the input is about sixteen orders of magnitude smaller than at the top (table
  above). Nothing below the top few layers would learn.
* **LN, no residual**: LayerNorm rescues the *forward* signal (its norm is reset every layer), but the
  gradient is still a product of 64 Jacobians. Its size after 64 layers depends on the draw: the spread
  over the 8 stacks is wide (two orders of magnitude at the input), and it widens with every layer the
  gradient passes through.
* **post-LN residual** (the paper): the gradient stays within a small factor of the top gradient at every
  depth, and its spread over the 8 stacks is much narrower than without the residual.
* **pre-LN residual**: the gradient *grows* gently toward the input, because every layer adds its branch's
  gradient onto the skip path's $\partial L/\partial y$; the activations grow too (right panel), since the
  residual stream is a sum of 64 branch outputs that is never normalized.

This is one toy setting at initialization, not a training run; it shows the mechanism (a skip path that
carries the gradient past the sub-layer's Jacobian), not how well each variant trains.

## 5. Post-LN (the paper) and pre-LN

The paper normalizes *after* the residual sum (post-LN), and that is the package's default. Moving the
norm to the start of the branch (pre-LN) is a later change; Xiong et al. (2020) analysed it and report that
it trains without the learning-rate warm-up that post-LN needs. One consequence of pre-LN is visible in the
right panel above: the stack's output is an un-normalized sum, so a pre-LN `Encoder` and `Decoder` add one
final LayerNorm after their last layer (`TransformerConfig(pre_ln=True)` does this).
"""),
        code(r'''
from minitransformer.model import Transformer, TransformerConfig, count_parameters

base = TransformerConfig()                              # the paper's base model, post-LN
print(f"post-LN base model: {count_parameters(base):,} parameters")
print(f"pre-LN  base model: {count_parameters(base.with_(pre_ln=True)):,} parameters "
      f"(+{count_parameters(base.with_(pre_ln=True)) - count_parameters(base)} = 2 stacks x (gamma, beta) x d_model)")

tiny = TransformerConfig(vocab_size=12, d_model=16, h=2, N=2, d_ff=32, P_drop=0.0, max_len=16)
for pre_ln in (False, True):
    m = Transformer(tiny.with_(pre_ln=pre_ln), seed=0)
    res = m.encoder.layers[0].res_attn
    print(f"pre_ln={pre_ln!s:5}: Residual.pre_ln={res.pre_ln}, encoder final norm: {type(m.encoder.final_norm).__name__}, "
          f"parameters {m.num_parameters():,} (formula {count_parameters(m.cfg):,})")
'''),
        md(r"""
## Exercises

""" + NOT_ATTEMPTED_NOTE + r"""

### Exercise 4.1 — LayerNorm backward

Write `my_layernorm_backward(dy, x, gamma, eps)` returning `(dx, dgamma, dbeta)` for $y = \gamma\odot\hat x + \beta$,
with `x`, `dy` of shape `(B, S, d)` and `gamma` of shape `(d,)`. You get `x`, not a cache: recompute $\mu$,
$r$ and $\hat x$ first. Do not call `layernorm_backward`.
"""),
        code(r'''
def my_layernorm_backward(dy, x, gamma, eps=1e-5):
    """dy, x: (B, S, d); gamma: (d,) -> dx: (B, S, d), dgamma: (d,), dbeta: (d,)."""
    # your code here
    return None
'''),
        code(r'''
from minitransformer.exercises.lessons_4_7 import (
    check_layernorm_backward, check_post_ln_residual_backward, check_pre_ln_residual_backward)

check_layernorm_backward(my_layernorm_backward)
'''),
        md(r"""
### Exercise 4.2 — a post-LN block with a linear sub-layer

For $y = \mathrm{LN}(x + xW)$ (γ = 1, β = 0, no dropout; `x`: `(B, S, d)`, `W`: `(d, d)`), return
`(dx, dW)` given `dy`. You may call the package's `layernorm_forward` and `layernorm_backward`. Which term
does the skip connection contribute to `dx`?
"""),
        code(r'''
def my_post_ln_residual_backward(dy, x, W, eps=1e-5):
    """y = LayerNorm(x + x @ W). Returns dx: (B, S, d), dW: (d, d)."""
    # your code here
    return None
'''),
        code(r'''
check_post_ln_residual_backward(my_post_ln_residual_backward)
'''),
        md(r"""
### Exercise 4.3 — the same block, pre-LN

Now $y = x + \mathrm{LN}(x)\,W$ (γ = 1, β = 0). Return `(dx, dW)`.
"""),
        code(r'''
def my_pre_ln_residual_backward(dy, x, W, eps=1e-5):
    """y = x + LayerNorm(x) @ W. Returns dx: (B, S, d), dW: (d, d)."""
    # your code here
    return None
'''),
        code(r'''
check_pre_ln_residual_backward(my_pre_ln_residual_backward)
'''),
        md(r"""
## Solutions

Try the exercises first. Each solution is followed by its checker.
"""),
        code(r'''
def layernorm_backward_solution(dy, x, gamma, eps=1e-5):
    d = x.shape[-1]
    mu = x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)   # biased variance, eps inside
    x_hat = (x - mu) * rstd
    g = dy * gamma                                                             # dL/dx_hat
    dx = rstd * (g - g.mean(axis=-1, keepdims=True) - x_hat * (g * x_hat).mean(axis=-1, keepdims=True))
    dgamma = (dy * x_hat).reshape(-1, d).sum(axis=0)                           # summed over batch and position
    dbeta = dy.reshape(-1, d).sum(axis=0)
    return dx, dgamma, dbeta

check_layernorm_backward(layernorm_backward_solution)
'''),
        code(r'''
def post_ln_residual_backward_solution(dy, x, W, eps=1e-5):
    d = x.shape[-1]
    z = x + x @ W                                               # the residual sum
    _, cache = layernorm_forward(z, np.ones(d), np.zeros(d), eps)
    dz, _, _ = layernorm_backward(dy, cache)                    # back through the norm
    dW = x.reshape(-1, d).T @ dz.reshape(-1, d)                 # the sub-layer's weight
    dx = dz + dz @ W.T                                          # skip connection + sub-layer path
    return dx, dW

check_post_ln_residual_backward(post_ln_residual_backward_solution)
'''),
        code(r'''
def pre_ln_residual_backward_solution(dy, x, W, eps=1e-5):
    d = x.shape[-1]
    n, cache = layernorm_forward(x, np.ones(d), np.zeros(d), eps)   # the branch's normalized input
    dW = n.reshape(-1, d).T @ dy.reshape(-1, d)
    dn = dy @ W.T
    dx = dy + layernorm_backward(dn, cache)[0]                      # skip connection + branch
    return dx, dW

check_pre_ln_residual_backward(pre_ln_residual_backward_solution)
'''),
    ]


# ====================================================================================
# Lesson 5
# ====================================================================================

def lesson_5():
    return [
        md(r"""
# Lesson 5 — Embeddings and softmax (§3.4)

Token ids enter the model at the bottom of both stacks and leave it at the top. §3.4: learned embeddings
map every input and output token to a vector of width $d_\text{model}$; at the top, a learned linear map
followed by a softmax turns the decoder's output into probabilities for the next token. The section adds
two details:

* the **same weight matrix** serves all three: the source embedding, the target embedding and the
  pre-softmax linear map (the paper points to Press & Wolf, 2016, for the idea);
* in the embedding layers the weights are **multiplied by $\sqrt{d_\text{model}}$**.

With one matrix $E\in\mathbb R^{V\times d_\text{model}}$:

$$\mathrm{emb}(t) = \sqrt{d_\text{model}}\;E_{t,:},\qquad \text{logits} = y\,E^\top,\qquad p = \mathrm{softmax}(\text{logits}),$$

where $y$ is the decoder output at one position. No bias, and no $\sqrt{d_\text{model}}$ on the output side.

| what | where in the package |
| --- | --- |
| lookup × $\sqrt{d_\text{model}}$ | `minitransformer.layers.embedding.embedding_forward`, class `Embedding` |
| its backward (scatter-add) | `embedding_backward`, which calls `minitransformer.backend.scatter_add` |
| logits $= yE^\top$ and its backward | `TiedOutputProjection` |
| softmax (as log-softmax, inside the loss) | `minitransformer.layers.loss.log_softmax`, `LabelSmoothedCrossEntropy` |
| the three-way tie | `minitransformer.model.Transformer`: one `Parameter` `E` held by `src_embed`, `tgt_embed`, `generator` |
"""),
        code(SETUP),
        md(r"""
## 1. Lookup and scale

An embedding is a table lookup: row $t$ of $E$ for token $t$, times $\sqrt{d_\text{model}}$. With
$d_\text{model}=4$ the scale is 2:
"""),
        code(r'''
from minitransformer.layers.embedding import (
    Embedding, TiedOutputProjection, embedding_backward, embedding_forward, init_embedding)

rng = np.random.default_rng(0)
emb = Embedding(6, 4, rng)                  # V = 6 tokens, d_model = 4
ids = np.array([[2, 5, 2]])                 # (B, S) = (1, 3): token 2 appears twice
out = emb.forward(ids)                      # (1, 3, 4)
print("out shape:", out.shape, "  scale:", emb.scale)
print("out[0, 0] == 2 * E[2]:", np.allclose(out[0, 0], 2.0 * emb.E.data[2]))
print("out[0, 0] == out[0, 2]:", np.allclose(out[0, 0], out[0, 2]))
'''),
        md(r"""
## 2. Why multiply by $\sqrt{d_\text{model}}$?

The paper states the factor without giving a reason. Here is what it does *in this package*: `init_embedding`
draws $E$ with entries $\mathcal N(0, 1/d_\text{model})$, so each row has norm about 1. That is the right size
for the output side: the decoder output $y$ leaves a LayerNorm with entries of size about 1, so
$\text{logits}_t = y\cdot E_{t,:}$ has a standard deviation of about 1 whatever $d_\text{model}$ is. On the input
side the same rows have entries of size $d_\text{model}^{-1/2}$, while the positional encoding added to them
(lesson 6) has entries of root-mean-square $1/\sqrt2$ at every width. Multiplying by $\sqrt{d_\text{model}}$
lifts the token part to entries of size about 1, so neither the token nor the position swamps the other in
the sum. (This is our reading with our initialization; other implementations initialize differently.)
"""),
        code(r'''
from minitransformer.layers.layernorm import layernorm_forward
from minitransformer.layers.positional import sinusoidal_table

def rms(a):
    return np.sqrt((a ** 2).mean())

V = 1000
print(f"{'d_model':>7} {'rms E':>8} {'rms sqrt(d)*E':>14} {'rms PE':>7} {'std of logits y E^T':>20}")
for d in (64, 512):
    E = init_embedding(V, d, rng, np, np.float64)
    pe = sinusoidal_table(200, d, np, np.float64)
    y, _ = layernorm_forward(3 * rng.standard_normal((50, d)), np.ones(d), np.zeros(d), 1e-5)  # a LayerNorm output
    print(f"{d:7d} {rms(E):8.4f} {rms(np.sqrt(d) * E):14.4f} {rms(pe):7.4f} {(y @ E.T).std():20.4f}")

fig, ax = plt.subplots(figsize=(7, 2.8))
bins = np.linspace(-3, 3, 121)
ax.hist(E.ravel(), bins=bins, density=True, alpha=0.6, label="entries of E (d_model = 512)")
ax.hist((np.sqrt(d) * E).ravel(), bins=bins, density=True, alpha=0.6, label=r"entries of $\sqrt{d_{model}}\,E$")
ax.hist(pe.ravel(), bins=bins, density=True, alpha=0.6, label="entries of PE")
ax.set(xlabel="value", ylabel="density", title="what gets added at the bottom of the stack", ylim=(0, 3))
ax.legend(fontsize=8); plt.tight_layout(); plt.show()
'''),
        md(r"""
The histogram of $E$ is cut off at the top: it is a spike of width about $512^{-1/2}\approx0.044$. The
positional encoding piles up near $\pm1$ like any sinusoid, and extra at $+1$ because over the first 200
positions the slowest cosine columns have hardly moved from $\cos 0 = 1$.

## 3. The backward of each use

**Embedding.** $\text{out}_{b,s,:} = \sqrt{d_\text{model}}\,E_{\text{ids}_{b,s},:}$, so row $v$ of the gradient collects
every position where token $v$ was looked up:

$$\frac{\partial L}{\partial E_{v,:}} = \sqrt{d_\text{model}}\sum_{(b,s)\,:\,\text{ids}_{b,s}=v}\frac{\partial L}{\partial\,\text{out}_{b,s,:}} .$$

That is a *scatter-add* (`backend.scatter_add`). Rows of tokens that did not occur get nothing, and no
$(B\cdot S)\times V$ one-hot matrix is ever built. The trap is NumPy's fancy-index `+=`, which for repeated
indices keeps only one of the additions:
"""),
        code(r'''
d = 4
ids = np.array([[2, 5, 2]])                 # token 2 twice
dout = np.ones((1, 3, d))
wrong = np.zeros((6, d))
wrong[ids.reshape(-1)] += dout.reshape(-1, d) * np.sqrt(d)          # buffered: row 2 gets ONE update
right = np.zeros((6, d))
embedding_backward(dout, embedding_forward(ids, np.zeros((6, d)), np.sqrt(d))[1], right)
print("row 2, fancy-index += :", wrong[2])
print("row 2, scatter-add    :", right[2])
'''),
        md(r"""
**Output projection.** $\text{logits} = y\,E^\top$ with $y$ of shape $(B,T,d_\text{model})$, so, summing over all
$(b,t)$:

$$\frac{\partial L}{\partial E} = \Big(\frac{\partial L}{\partial\,\text{logits}}\Big)^{\!\top} y \;\;(V\times d_\text{model}),\qquad
\frac{\partial L}{\partial y} = \frac{\partial L}{\partial\,\text{logits}}\,E .$$

This gradient is dense: the softmax pushes on every vocabulary entry's logit, so every row of $E$ gets
something. Gradient checks of both layers (the embedding's input is integer ids, so only $E$ is checked
there):
"""),
        code(r'''
from minitransformer.gradcheck import check_layer, gradcheck, numerical_gradient, rel_error

emb = Embedding(7, 4, rng)
print(check_layer(emb, np.array([[1, 3, 3], [6, 1, 0]])))
proj = TiedOutputProjection(emb.E)          # the same Parameter object
print(check_layer(proj, rng.standard_normal((2, 3, 4))))
'''),
        md(r"""
## 4. Three-way tying: one matrix, three gradients, summed

Let $\ell(A, B, C)$ be the loss of a model that uses $A$ for the source embedding, $B$ for the target
embedding and $C$ for the output projection. Tying means evaluating it at $A=B=C=E$, and the multivariable
chain rule gives

$$\frac{dL}{dE} = \frac{\partial\ell}{\partial A} + \frac{\partial\ell}{\partial B} + \frac{\partial\ell}{\partial C}\Bigg|_{A=B=C=E}.$$

In the package this sum happens by itself: the three layers hold the *same* `Parameter`, and every backward
adds (`+=`) into its `.grad`. We verify it on a tiny real model in two ways:

* (a) run the body of `Transformer.backward` step by step and read off what `E.grad` gained at each of the
  three uses;
* (b) untie: give one use at a time its own copy of $E$ and take the numerical gradient with respect to
  that copy alone. Each should match its piece from (a), and the three together should match the
  numerical gradient of the tied $E$.
"""),
        code(r'''
from minitransformer.layers.loss import LabelSmoothedCrossEntropy
from minitransformer.layers.parameter import Parameter
from minitransformer.model import Transformer, TransformerConfig, count_parameters

cfg = TransformerConfig(vocab_size=12, d_model=8, h=2, N=1, d_ff=16, P_drop=0.0, max_len=16)
model = Transformer(cfg, seed=0)
E = model.E
print("one Parameter, three uses:", model.src_embed.E is E and model.tgt_embed.E is E and model.generator.E is E)

# 0 = <pad>, 1 = <bos>, 2 = <eos>; the task: reverse the source
src     = np.array([[3, 4, 5, 6, 7], [8, 9, 3, 0, 0]])
tgt_in  = np.array([[1, 7, 6, 5, 4], [1, 3, 9, 8, 0]])
tgt_out = np.array([[7, 6, 5, 4, 2], [3, 9, 8, 2, 0]])
loss_fn = LabelSmoothedCrossEntropy(cfg.pad_id, eps_ls=0.1)

def loss_value():
    return loss_fn.forward(model.forward(src, tgt_in), tgt_out)

# (a) the body of Transformer.backward, reading E.grad after each use
model.zero_grad()
loss_value()
dlogits = loss_fn.backward()
dout = model.generator.backward(dlogits)                                          # use 1: logits = y E^T
g_out = E.grad.copy()
dy, dmemory = model.decoder.backward(dout)
model.tgt_embed.backward(model.tgt_pos.backward(model.tgt_dropout.backward(dy)))  # use 2: target embedding
g_tgt = E.grad - g_out
dx = model.encoder.backward(dmemory)
model.src_embed.backward(model.src_pos.backward(model.src_dropout.backward(dx)))  # use 3: source embedding
g_src = E.grad - g_out - g_tgt
g_total = E.grad.copy()

model.zero_grad(); loss_value(); model.backward(loss_fn.backward())
print("step by step == Transformer.backward:", np.abs(E.grad - g_total).max())
'''),
        code(r'''
# (b) untie one use at a time and differentiate numerically with respect to its private copy
uses = {"src_embed": (model.src_embed, g_src), "tgt_embed": (model.tgt_embed, g_tgt), "generator": (model.generator, g_out)}
numeric = {}
for name, (layer, _) in uses.items():
    layer.E = Parameter(E.data.copy(), f"{name}.E")        # this use alone reads the copy
    numeric[name] = numerical_gradient(loss_value, layer.E.data)
    layer.E = E                                            # tie it back

for name, (_, analytic) in uses.items():
    print(f"use {name:<9}: analytic piece vs numerical gradient of its own copy: rel error {rel_error(analytic, numeric[name]):.1e}")
report = gradcheck(loss_value, {"E (tied)": E.data}, {"E (tied)": g_total})
print(f"sum of the three numerical pieces vs analytic tied gradient:   rel error {rel_error(g_total, sum(numeric.values())):.1e}")
print(report)
report.assert_ok()
'''),
        md(r"""
Which rows of $E$ does each use touch? The embedding uses only reach the rows of tokens that appear in
their input (and not even all of those: a padding position's embedding never influences a non-padding
output, so row 0 gets nothing from them); the output projection reaches every row, including `<pad>` and
`<eos>`, which never appear as inputs.
"""),
        code(r'''
fig, ax = plt.subplots(figsize=(8, 2.8))
rows = np.arange(cfg.vocab_size)
for k, (name, g) in enumerate([("source embedding", g_src), ("target embedding", g_tgt), ("output projection", g_out)]):
    ax.bar(rows + (k - 1) * 0.27, np.linalg.norm(g, axis=1), width=0.27, label=name)
ax.set_xticks(rows, ["<pad>", "<bos>", "<eos>"] + [str(t) for t in rows[3:]])
ax.set(xlabel="row of E (token)", ylabel="norm of the row's gradient", title="what each of the three uses adds to E.grad")
ax.legend(fontsize=8); plt.tight_layout(); plt.show()
print("tokens in src:", sorted(set(src.ravel().tolist()) - {0}), "  in tgt_in:", sorted(set(tgt_in.ravel().tolist()) - {0}))
'''),
        md(r"""
## 5. What tying saves

Untied, the model would hold three $V\times d_\text{model}$ matrices; tied, one. The saving is $2\,V\,d_\text{model}$.
For the base configuration with the shared English–German vocabulary of about 37 000 tokens (§5.1) and
$d_\text{model}=512$ (`count_parameters` counts the tied model):
"""),
        code(r'''
base = TransformerConfig()                        # vocab_size = 37000, d_model = 512
tied = count_parameters(base)
saved = 2 * base.vocab_size * base.d_model
print(f"tied, as in the paper : {tied:>12,}")
print(f"untied (3 matrices)   : {tied + saved:>12,}")
print(f"saved = 2 V d_model   : {saved:>12,}   ({saved / (tied + saved):.1%} of the untied model)")
'''),
        md(r"""
Tying the source and target embeddings requires one vocabulary covering both languages, which a shared
byte-pair vocabulary provides.

## Exercises

""" + NOT_ATTEMPTED_NOTE + r"""

### Exercise 5.1 — embedding backward, with repeated tokens

Write `my_embedding_backward(dout, ids, V)` returning `dE` of shape `(V, d_model)` for
$\text{out} = \sqrt{d_\text{model}}\,E[\text{ids}]$ (`ids`: `(B, S)` ints, `dout`: `(B, S, d_model)`). Tokens repeat.
Don't call `embedding_backward`.
"""),
        code(r'''
def my_embedding_backward(dout, ids, V):
    """dout: (B, S, d_model), ids: (B, S) ints -> dE: (V, d_model)."""
    # your code here
    return None
'''),
        code(r'''
from minitransformer.exercises.lessons_4_7 import check_embedding_backward, check_tied_embedding_grad

check_embedding_backward(my_embedding_backward)
'''),
        md(r"""
### Exercise 5.2 — the tied gradient

One $E$ is used three times:
`src_emb = sqrt(d) * E[src_ids]` (upstream gradient `d_src`, `(B, S, d)`),
`tgt_emb = sqrt(d) * E[tgt_ids]` (upstream gradient `d_tgt`, `(B, T, d)`) and
`logits = x_dec @ E.T` (upstream gradient `dlogits`, `(B, T, V)`). Return the gradient of the loss with
respect to $E$.
"""),
        code(r'''
def my_tied_embedding_grad(src_ids, d_src, tgt_ids, d_tgt, x_dec, dlogits):
    """-> dE: (V, d_model), V = dlogits.shape[-1], d_model = x_dec.shape[-1]."""
    # your code here
    return None
'''),
        code(r'''
check_tied_embedding_grad(my_tied_embedding_grad)
'''),
        md(r"""
## Solutions
"""),
        code(r'''
def embedding_backward_solution(dout, ids, V):
    d = dout.shape[-1]
    dE = np.zeros((V, d))
    np.add.at(dE, ids.reshape(-1), dout.reshape(-1, d) * np.sqrt(d))   # add.at sums repeated rows
    return dE

check_embedding_backward(embedding_backward_solution)
'''),
        code(r'''
def tied_embedding_grad_solution(src_ids, d_src, tgt_ids, d_tgt, x_dec, dlogits):
    V, d = dlogits.shape[-1], x_dec.shape[-1]
    dE = embedding_backward_solution(d_src, src_ids, V)          # source embedding
    dE += embedding_backward_solution(d_tgt, tgt_ids, V)         # target embedding
    dE += dlogits.reshape(-1, V).T @ x_dec.reshape(-1, d)        # logits = x E^T
    return dE

check_tied_embedding_grad(tied_embedding_grad_solution)
'''),
    ]


# ====================================================================================
# Lesson 6
# ====================================================================================

def lesson_6():
    return [
        md(r"""
# Lesson 6 — Positional encoding (§3.5)

Attention by itself ignores order: shuffle the input positions and the outputs are shuffled the same way,
nothing else changes. Since the model has no recurrence and no convolution, §3.5 adds to each input
embedding a vector that depends only on the position. The paper uses fixed sinusoids, one frequency per
pair of dimensions:

$$PE_{(pos,\,2i)} = \sin(pos\;\omega_i),\qquad PE_{(pos,\,2i+1)} = \cos(pos\;\omega_i),\qquad
\omega_i = 10000^{-2i/d_\text{model}},\quad i = 0,\dots,\tfrac{d_\text{model}}2-1 .$$

The wavelengths $2\pi/\omega_i$ grow geometrically, from $2\pi$ for $i=0$ to
$2\pi\cdot 10000^{(d_\text{model}-2)/d_\text{model}}$, just under $10000\cdot2\pi$. Section 3.5 also makes two
claims that we test here:

1. for any fixed offset $k$, $PE_{pos+k}$ is a *linear function* of $PE_{pos}$ — the paper's guess at why
   attending by relative position should be easy to learn;
2. sinusoids might let the model *extrapolate* to sequences longer than any seen in training — the paper's
   reason for preferring them to learned position embeddings, which scored nearly the same (Table 3, row E).

| what | where in the package |
| --- | --- |
| the table | `minitransformer.layers.positional.sinusoidal_table(max_len, d_model)` |
| $x + PE$ and its backward (the identity) | `PositionalEncoding.forward`, `.backward` |
| in the model | `Transformer.src_pos`, `tgt_pos` (one shared table); dropout on the sum (§5.4): `src_dropout`, `tgt_dropout` |
"""),
        code(SETUP),
        md(r"""
## 0. Why it is needed

Self-attention is *permutation-equivariant*: permuting the input rows permutes the output rows. Checked
with the package's `MultiHeadAttention` (§3.2.2); once a positional encoding is added, the equality fails.
"""),
        code(r'''
from minitransformer.layers.attention import MultiHeadAttention
from minitransformer.layers.positional import PositionalEncoding, sinusoidal_table

rng = np.random.default_rng(0)
mha = MultiHeadAttention(16, 2, rng)
x = rng.standard_normal((1, 6, 16))
perm = rng.permutation(6)
print("no PE:   max |attn(x[perm]) - attn(x)[perm]| =", np.abs(mha.forward(x[:, perm]) - mha.forward(x)[:, perm]).max())
pe = PositionalEncoding(16, max_len=32)
print("with PE: max |attn(pe(x[perm])) - attn(pe(x))[perm]| =",
      np.abs(mha.forward(pe.forward(x[:, perm])) - mha.forward(pe.forward(x))[:, perm]).max())
'''),
        md(r"""
## 1. The encoding

Each column of the table is one sinusoid; the left columns oscillate fast, the right ones slowly. Every row
(position) gets a distinct pattern, like the digits of a number written in many bases at once, but smooth.
"""),
        code(r'''
d_model = 64
P = sinusoidal_table(128, d_model, np, np.float64)        # (max_len, d_model)
omega = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)   # the d_model/2 frequencies
print("table shape:", P.shape, "  wavelengths 2pi/omega: from", round(2 * np.pi / omega[0], 3),
      "to", round(2 * np.pi / omega[-1], 1), " (10000*2pi =", round(10000 * 2 * np.pi, 1), ")")

fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
im = axes[0].imshow(P, aspect="auto", cmap="RdBu", vmin=-1, vmax=1, interpolation="nearest")
axes[0].set(xlabel="dimension", ylabel="position", title=f"PE table, d_model = {d_model}")
plt.colorbar(im, ax=axes[0])
for dim in (8, 9, 20, 40):
    axes[1].plot(P[:, dim], lw=1, label=f"dim {dim}")
axes[1].set(xlabel="position", ylabel="value", title="a few columns")
axes[1].legend(fontsize=8, loc="lower left")
plt.tight_layout(); plt.show()
'''),
        md(r"""
## 2. $PE_{pos+k}$ is a fixed linear map of $PE_{pos}$

**Derivation.** Take one frequency $\omega_i$. The angle-addition formulas,

$$\sin((pos+k)\omega_i) = \cos(k\omega_i)\sin(pos\,\omega_i) + \sin(k\omega_i)\cos(pos\,\omega_i),$$
$$\cos((pos+k)\omega_i) = -\sin(k\omega_i)\sin(pos\,\omega_i) + \cos(k\omega_i)\cos(pos\,\omega_i),$$

say that the pair $(PE_{pos,2i}, PE_{pos,2i+1})$ is rotated by the angle $k\omega_i$:

$$\begin{pmatrix} PE_{pos+k,\,2i}\\ PE_{pos+k,\,2i+1}\end{pmatrix} =
\underbrace{\begin{pmatrix}\cos k\omega_i & \sin k\omega_i\\ -\sin k\omega_i & \cos k\omega_i\end{pmatrix}}_{R_i(k)}
\begin{pmatrix} PE_{pos,\,2i}\\ PE_{pos,\,2i+1}\end{pmatrix}.$$

Stacking the $d_\text{model}/2$ pairs, $PE_{pos+k} = M_k\,PE_{pos}$ with $M_k = \mathrm{blockdiag}(R_0(k),\dots,R_{d/2-1}(k))$.
$M_k$ contains $k$ and the frequencies, and no $pos$. We build it and test it on every position of a
10 000-row table:
"""),
        code(r'''
def shift_matrix(k, d_model):
    """M_k: (d_model, d_model), block-diagonal, one 2x2 rotation by k * omega_i per frequency."""
    omega = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)
    c, s = np.cos(k * omega), np.sin(k * omega)
    M = np.zeros((d_model, d_model))
    i = np.arange(d_model // 2)
    M[2 * i, 2 * i], M[2 * i, 2 * i + 1] = c, s            # row of sin((pos+k) w)
    M[2 * i + 1, 2 * i], M[2 * i + 1, 2 * i + 1] = -s, c   # row of cos((pos+k) w)
    return M

d = 16
T = sinusoidal_table(10000, d, np, np.float64)
for k in (1, 5, 50, 1000):
    M = shift_matrix(k, d)
    err = np.abs(T[k:] - T[:-k] @ M.T).max()               # every pos from 0 to 9999 - k at once
    print(f"k = {k:5d}: max over {10000 - k} positions of |PE(pos+k) - M_k PE(pos)| = {err:.1e}")
M3, M5 = shift_matrix(3, d), shift_matrix(5, d)
print("M_3 M_5 == M_8:", np.abs(M3 @ M5 - shift_matrix(8, d)).max(), "   M_5^T M_5 == I:", np.abs(M5.T @ M5 - np.eye(d)).max())
'''),
        md(r"""
The errors are at the level of float64 rounding of $\sin$ at arguments up to $10^4$. $M_k$ is orthogonal
(a rotation), and the maps compose like the offsets do: $M_jM_k = M_{j+k}$.

**"Does not depend on pos", from data.** Forget the formula and *fit* a matrix $\hat M$ by least squares
to pairs $(PE_{pos}, PE_{pos+k})$, once from positions 0–1999 and once from positions 3000–4999. If a
single $M_k$ works at all positions, both fits must find the same matrix, and it must be ours:
"""),
        code(r'''
k = 5
M = shift_matrix(k, d)
fits = {}
for lo, hi in ((0, 2000), (3000, 5000), (0, 200)):
    X, Y = T[lo:hi], T[lo + k:hi + k]                      # rows: PE(pos), PE(pos + k)
    M_hat_T, *_ = np.linalg.lstsq(X, Y, rcond=None)        # solves X M^T = Y
    fits[(lo, hi)] = M_hat_T.T
    print(f"positions {lo:4d}-{hi - 1:4d}: condition number of X {np.linalg.cond(X):9.2e}, "
          f"max |M_hat - M_k| = {np.abs(M_hat_T.T - M).max():.1e}")
print("the two long windows against each other:", np.abs(fits[(0, 2000)] - fits[(3000, 5000)]).max())

fig, axes = plt.subplots(1, 3, figsize=(10, 3.2))
for ax, (title, A) in zip(axes, [("$M_5$ from the frequencies", M),
                                 ("least squares, pos 0-1999", fits[(0, 2000)]),
                                 ("least squares, pos 3000-4999", fits[(3000, 5000)])]):
    ax.imshow(A, cmap="RdBu", vmin=-1, vmax=1, interpolation="nearest"); ax.set_title(title, fontsize=9); ax.set_xticks([]); ax.set_yticks([])
plt.tight_layout(); plt.show()
'''),
        md(r"""
Both long windows recover $M_5$ to about $10^{-12}$. The short window (positions 0–199) is a cautionary
tale: over 200 positions the slowest sinusoids barely move, the data matrix is nearly singular (condition
number about $10^{12}$), and least squares cannot pin down those blocks. The linear map is still exact;
it is the *data* that cannot reveal it.

## 3. Gradient check

$PE$ has no parameters, so `PositionalEncoding.backward` passes the gradient through unchanged. Checked on
its own, and behind an embedding (the bottom of the model: $\sqrt{d_\text{model}}E[\text{ids}] + PE$), where
only $E$ has a gradient:
"""),
        code(r'''
from minitransformer.gradcheck import check_layer, gradcheck
from minitransformer.layers.embedding import Embedding

pe = PositionalEncoding(8, max_len=20)
print(check_layer(pe, rng.standard_normal((2, 5, 8))))

emb = Embedding(10, 8, rng)
ids = np.array([[1, 2, 3, 2, 9], [4, 4, 0, 7, 5]])
G = rng.standard_normal((2, 5, 8))
def f():
    return (pe.forward(emb.forward(ids)) * G).sum()
emb.zero_grad(); f(); emb.backward(pe.backward(G))
report = gradcheck(f, {"E": emb.E.data}, {"E": emb.E.grad.copy()})
print(report); report.assert_ok()
'''),
        md(r"""
## 4. Beyond the training length

Suppose a model was trained on sentences of at most 64 positions. What does the encoding look like after
that?

* **The values stay bounded.** Every entry is a sine or cosine, so $|PE_{pos,j}|\le1$, and each row has the
  same norm, $\|PE_{pos}\|^2 = \sum_i(\sin^2+\cos^2) = d_\text{model}/2$, at every position.
* **Similarity depends only on distance.** Attention compares vectors with dot products. Because $M_k$ is
  orthogonal, $PE_{pos}\cdot PE_{pos+k}$ depends on $k$ alone (exercise 6.2 asks for the closed form), so
  the similarity-versus-distance curve measured at position 0 and at position 5000 is the same curve, and it
  continues smoothly past 64.
* **One rotation generates every position.** $PE_{pos} = M_1^{\,pos}\,PE_0$: the same fixed map that links
  neighbours inside the training range produces positions far outside it.
"""),
        code(r'''
d = 64
L_train = 64
T = sinusoidal_table(100000, d, np, np.float64)
print("max |PE| over 100000 positions:", np.abs(T).max())
norms_sq = (T ** 2).sum(axis=1)
print("||PE(pos)||^2: min", norms_sq.min(), " max", norms_sq.max(), "  d_model/2 =", d / 2)

ks = np.arange(0, 512)
sim_0 = T[ks] @ T[0] / (d / 2)                  # cosine similarity, measured from position 0
sim_5000 = T[5000 + ks] @ T[5000] / (d / 2)     # ... and from position 5000
print("max difference between the two curves:", np.abs(sim_0 - sim_5000).max())

M1, v, worst = shift_matrix(1, d), T[0].copy(), 0.0
for pos in range(1, 5001):
    v = M1 @ v
    worst = max(worst, np.abs(v - T[pos]).max())
print("max |M_1^pos PE(0) - PE(pos)| for pos up to 5000:", f"{worst:.1e}")

fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
axes[0].plot(ks, sim_0, lw=1.5, label="from pos 0")
axes[0].plot(ks, sim_5000, "--", lw=1, label="from pos 5000")
axes[0].axvline(L_train, color="k", lw=0.8); axes[0].text(L_train + 5, 0.9, "training length", fontsize=8)
axes[0].set(xlabel="distance k", ylabel="cos similarity of PE(pos), PE(pos+k)", title="similarity vs distance")
axes[0].legend(fontsize=8)
S = T[:192] @ T[:192].T / (d / 2)
im = axes[1].imshow(S, cmap="RdBu", vmin=-1, vmax=1, interpolation="nearest")
axes[1].add_patch(plt.Rectangle((-0.5, -0.5), L_train, L_train, fill=False, color="k", lw=1))
axes[1].set(xlabel="position", ylabel="position", title="PE(p) . PE(q) / (d/2), positions 0-191 (box: 0-63)")
plt.colorbar(im, ax=axes[1]); plt.tight_layout(); plt.show()
'''),
        md(r"""
The similarity matrix is constant along its diagonals (a Toeplitz matrix): the pattern inside the box
repeats unchanged outside it. None of this proves that a *trained* model generalizes to longer inputs —
that also depends on what the attention weights learned — but the encoding itself poses no obstacle,
whereas a learned position table simply has no row for position 65.

In the package the table has no parameters, so a model built with a longer `max_len` has exactly the same
weights (for the same seed) and accepts longer inputs:
"""),
        code(r'''
from minitransformer.errors import ShapeError
from minitransformer.model import Transformer, TransformerConfig

cfg = TransformerConfig(vocab_size=12, d_model=16, h=2, N=1, d_ff=32, P_drop=0.0, max_len=64)
short, longer = Transformer(cfg, seed=0), Transformer(cfg.with_(max_len=256), seed=0)
same = all(np.array_equal(p.data, q.data) for p, q in zip(short.parameters(), longer.parameters()))
print("same parameters for max_len 64 and 256:", same)
src = rng.integers(3, 12, size=(1, 100)); tgt_in = rng.integers(3, 12, size=(1, 100))
try:
    short.forward(src, tgt_in)
except ShapeError as e:
    print("max_len=64 :", e)
print("max_len=256: logits", longer.forward(src, tgt_in).shape)
'''),
        md(r"""
## Exercises

""" + NOT_ATTEMPTED_NOTE + r"""

### Exercise 6.1 — the table

Write `my_sinusoidal_pe(max_len, d_model)` returning the `(max_len, d_model)` table of §3.5 for an even
`d_model`, without calling `sinusoidal_table`.
"""),
        code(r'''
def my_sinusoidal_pe(max_len, d_model):
    """-> PE: (max_len, d_model); even columns sin(pos w_i), odd columns cos(pos w_i)."""
    # your code here
    return None
'''),
        code(r'''
from minitransformer.exercises.lessons_4_7 import check_pe_similarity, check_sinusoidal_pe

check_sinusoidal_pe(my_sinusoidal_pe)
'''),
        md(r"""
### Exercise 6.2 — similarity in closed form

Show that $PE_{pos}\cdot PE_{pos+k}$ does not depend on $pos$ by finding its closed form (hint:
$\sin a\sin b + \cos a\cos b$). Write `my_pe_similarity(k, d_model)` that takes an array of offsets `k` and
returns the array of dot products, without building the table.
"""),
        code(r'''
def my_pe_similarity(k, d_model):
    """k: (n,) ints -> (n,) values of PE(pos) . PE(pos + k), for any pos."""
    # your code here
    return None
'''),
        code(r'''
check_pe_similarity(my_pe_similarity)
'''),
        md(r"""
## Solutions
"""),
        code(r'''
def sinusoidal_pe_solution(max_len, d_model):
    pos = np.arange(max_len)[:, None]                               # (max_len, 1)
    omega = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)        # (d_model/2,)
    pe = np.zeros((max_len, d_model))
    pe[:, 0::2] = np.sin(pos * omega)
    pe[:, 1::2] = np.cos(pos * omega)
    return pe

check_sinusoidal_pe(sinusoidal_pe_solution)
'''),
        code(r'''
def pe_similarity_solution(k, d_model):
    # sin(a) sin(b) + cos(a) cos(b) = cos(a - b), one term per frequency
    omega = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)
    return np.cos(np.asarray(k)[:, None] * omega).sum(axis=-1)

check_pe_similarity(pe_similarity_solution)
'''),
    ]


# ====================================================================================
# Lesson 7
# ====================================================================================

def lesson_7():
    return [
        md(r"""
# Lesson 7 — The encoder–decoder assembled (§3.1)

Lessons 1–6 built the parts; this one puts them together as in the paper's Figure 1 (§3.1).

* **Encoder**: the source tokens are embedded (lesson 5), a positional encoding is added (lesson 6),
  dropout is applied (§5.4), and the result passes through $N$ identical layers. Each layer has two
  sub-layers — multi-head self-attention (§3.2) and the position-wise feed-forward network (§3.3, Eq. 2) —
  each wrapped in the residual-plus-LayerNorm of lesson 4. The output is the *memory*, one vector per
  source position.
* **Decoder**: the target, shifted one position to the right (a `<bos>` token in front), goes through the
  same embedding and encoding and then $N$ identical layers with *three* sub-layers: masked self-attention,
  attention over the memory (queries from the decoder, keys and values from the encoder, §3.2.3), and the
  feed-forward network.
* **Output**: the tied linear map and softmax of lesson 5 give a distribution over the next token at every
  target position.

The self-attention mask together with the one-position shift means that the prediction at position $i$
can use only target tokens before position $i$.

| what | where in the package |
| --- | --- |
| layers and stacks | `minitransformer.model.EncoderLayer`, `DecoderLayer`, `Encoder`, `Decoder` |
| the whole model | `Transformer(cfg)`: `forward(src, tgt_in) -> logits`, `backward(dlogits)` |
| batches: `tgt_in` = `<bos>` + target, `tgt_out` = target + `<eos>` | `minitransformer.data.batching.make_batch` |
| masks | `Transformer.masks`, `minitransformer.data.batching.padding_mask`, `causal_mask` |
| loss | `minitransformer.layers.loss.LabelSmoothedCrossEntropy` |
| parameter count | `minitransformer.model.count_parameters(cfg)` |
"""),
        code(SETUP),
        md(r"""
## 1. A toy batch and its masks

Two sentence pairs of a "reverse the sequence" task, padded to rectangles. Ids 0, 1, 2 are `<pad>`,
`<bos>`, `<eos>`. Masks are boolean, **True = may attend**:

* `src_mask` $(B,1,1,S)$: the key is a real source token. It is used by the encoder's self-attention and by
  the decoder's attention over the memory; its size-1 axes broadcast over heads and queries.
* `tgt_mask` $(B,1,T,T)$: key $j \le$ query $i$ (causal) **and** key $j$ is not padding.
"""),
        code(r'''
from minitransformer.layers.loss import LabelSmoothedCrossEntropy
from minitransformer.model import Transformer, TransformerConfig, count_parameters

src     = np.array([[3, 4, 5, 6, 7], [8, 9, 3, 0, 0]])              # (B, S) = (2, 5)
tgt_in  = np.array([[1, 7, 6, 5, 4, 3], [1, 3, 9, 8, 0, 0]])        # (B, T) = (2, 6): <bos> + target
tgt_out = np.array([[7, 6, 5, 4, 3, 2], [3, 9, 8, 2, 0, 0]])        # target + <eos>: what to predict

cfg = TransformerConfig(vocab_size=10, d_model=8, h=2, N=2, d_ff=16, P_drop=0.1, eps_ls=0.1, max_len=16)
model = Transformer(cfg, seed=0)
loss_fn = LabelSmoothedCrossEntropy(cfg.pad_id, cfg.eps_ls)
src_mask, tgt_mask = model.masks(src, tgt_in)
print("src_mask", src_mask.shape, "  tgt_mask", tgt_mask.shape)

fig, axes = plt.subplots(2, 3, figsize=(9, 5.4))
for b in range(2):
    panels = [("encoder self-attention", np.broadcast_to(src_mask[b, 0], (src.shape[1], src.shape[1])), src[b], src[b]),
              ("decoder attention over memory", np.broadcast_to(src_mask[b, 0], (tgt_in.shape[1], src.shape[1])), tgt_in[b], src[b]),
              ("decoder masked self-attention", tgt_mask[b, 0], tgt_in[b], tgt_in[b])]
    for ax, (title, m, q_ids, k_ids) in zip(axes[b], panels):
        ax.imshow(m, cmap="Greens", vmin=0, vmax=1.3)
        ax.set_xticks(np.arange(m.shape[1] + 1) - 0.5, minor=True); ax.set_yticks(np.arange(m.shape[0] + 1) - 0.5, minor=True)
        ax.grid(which="minor", color="white", lw=1); ax.tick_params(which="minor", length=0)
        ax.set_xticks(range(len(k_ids)), [str(t) for t in k_ids]); ax.set_yticks(range(len(q_ids)), [str(t) for t in q_ids])
        ax.set_title(f"sentence {b}: {title}", fontsize=8)
        ax.set_xlabel("key (token id)", fontsize=8); ax.set_ylabel("query (token id)", fontsize=8)
plt.tight_layout(); plt.show()
'''),
        md(r"""
Green = may attend. Sentence 1's padding columns are blank in every panel; the decoder's own panel is
lower-triangular. The query rows at padding positions still compute something, but no loss term and no
real position ever reads it.

## 2. Forward, one stage at a time

The body of `Transformer.forward`, run by hand, printing the shape after every stage. Dropout is on
(`P_drop = 0.1`), so the dropout generator is re-seeded first; `model.forward` with the same seed must then
give identical logits.
"""),
        code(r'''
def show(name, *arrays):
    print(f"{name:<44}" + "  ".join(str(tuple(a.shape)) for a in arrays))

model.reseed_dropout(5)
show("src ids (B, S)", src)
show("tgt_in ids (B, T)", tgt_in)
x = model.src_embed.forward(src);          show("source embedding x sqrt(d_model)", x)
x = model.src_pos.forward(x);              show("+ positional encoding", x)
x = model.src_dropout.forward(x);          show("dropout", x)
for i, layer in enumerate(model.encoder.layers):
    x = layer.forward(x, src_mask);        show(f"encoder layer {i}: self-attn, FFN", x)
memory = x                                 # post-LN: no final norm
show("memory (B, S, d_model)", memory)
y = model.tgt_embed.forward(tgt_in);       show("target embedding x sqrt(d_model)", y)
y = model.tgt_pos.forward(y);              show("+ positional encoding", y)
y = model.tgt_dropout.forward(y);          show("dropout", y)
for i, layer in enumerate(model.decoder.layers):
    y = layer.forward(y, memory, src_mask, tgt_mask)
    show(f"decoder layer {i}: self-attn, cross-attn, FFN", y)
logits = model.generator.forward(y);       show("logits = y E^T (B, T, V)", logits)
loss = loss_fn.forward(logits, tgt_out)
print(f"loss (label-smoothed cross-entropy, mean over {int((tgt_out != 0).sum())} non-pad targets) = {loss:.4f}")
'''),
        md(r"""
## 3. Backward, one stage at a time

`Transformer.backward` calls the layers' backward passes in exactly the reverse order. Three places add
gradients from several paths, each an instance of the multivariable chain rule:

* **inside every layer**, the residual sum: $\partial L/\partial x = \partial L/\partial z + (\text{sub-layer path})$ (lesson 4);
* **the memory** is read by the cross-attention of every decoder layer, so
  $\displaystyle\frac{\partial L}{\partial\,\text{memory}} = \sum_{\ell=1}^{N}\frac{\partial L}{\partial\,\text{memory}}\Big|_{\text{decoder layer }\ell}$,
  and only that sum enters the encoder's backward;
* **the shared $E$** gets three contributions (lesson 5).
"""),
        code(r'''
model.zero_grad()
dlogits = loss_fn.backward();                                  show("dL/dlogits", dlogits)
dy = model.generator.backward(dlogits);                        show("dL/d(decoder output)   [E use 1]", dy)
dmemory = np.zeros_like(memory)
for i in reversed(range(cfg.N)):
    dy, dmem = model.decoder.layers[i].backward(dy)
    dmemory += dmem                                            # memory is read by every decoder layer
    show(f"decoder layer {i}: dL/dy, dL/dmemory", dy, dmem)
dy = model.tgt_pos.backward(model.tgt_dropout.backward(dy));   show("dL/d(target embedding)", dy)
model.tgt_embed.backward(dy);                                  show("E.grad after the target side [E use 2]", model.E.grad)
dx = dmemory;                                                  show("dL/dmemory, summed over decoder layers", dx)
for i in reversed(range(cfg.N)):
    dx = model.encoder.layers[i].backward(dx);                 show(f"encoder layer {i}: dL/dx", dx)
dx = model.src_pos.backward(model.src_dropout.backward(dx));   show("dL/d(source embedding)", dx)
model.src_embed.backward(dx);                                  show("E.grad after the source side [E use 3]", model.E.grad)
by_hand = {name: p.grad.copy() for name, p in model.named_parameters()}

# the same through the model's own forward and backward, same dropout seed
model.zero_grad(); model.reseed_dropout(5)
logits2 = model.forward(src, tgt_in)
loss2 = loss_fn.forward(logits2, tgt_out)
model.backward(loss_fn.backward())
print("\nmax |logits by hand - model.forward| :", np.abs(logits - logits2).max())
print("max |grad by hand - model.backward| over all", len(by_hand), "tensors:",
      max(np.abs(by_hand[n] - p.grad).max() for n, p in model.named_parameters()))
'''),
        md(r"""
## 4. A whole-model gradient check

Every parameter of the model, float64, central differences against `Transformer.backward`. The batch
has padding in the source and in the target, dropout is on, and label smoothing is on. $f$ re-seeds the
dropout generator on every call, so every one of the thousands of forward passes draws the same masks.
"""),
        code(r'''
import time
from minitransformer.gradcheck import gradcheck

def f():
    model.reseed_dropout(5)                               # the same dropout masks at every call
    return loss_fn.forward(model.forward(src, tgt_in), tgt_out)

model.reseed_dropout(6)
other = loss_fn.forward(model.forward(src, tgt_in), tgt_out)
print(f"dropout is active: loss {f():.6f} with the masks of seed 5, {other:.6f} with those of seed 6")

model.zero_grad()
f()
model.backward(loss_fn.backward())
params = dict(model.named_parameters())
t0 = time.perf_counter()
report = gradcheck(f, {n: p.data for n, p in params.items()}, {n: p.grad.copy() for n, p in params.items()})
n_scalars = sum(p.data.size for p in params.values())
print(f"{len(params)} tensors, {n_scalars:,} scalars, {2 * n_scalars:,} forward passes, {time.perf_counter() - t0:.1f} s")
worst = sorted(report.errors.items(), key=lambda kv: -kv[1])[:5]
print("largest relative errors:", ", ".join(f"{n} {e:.1e}" for n, e in worst))
report.assert_ok()
print("all", len(report.errors), "tensors within", report.tol)

groups = {}
for name, err in report.errors.items():
    key = name if name == "E" else ".".join(name.split(".")[:4])
    groups[key] = max(groups.get(key, 0.0), err)
fig, ax = plt.subplots(figsize=(8, 2.6))
ax.bar(range(len(groups)), list(groups.values()), color="tab:blue")
ax.axhline(report.tol, color="r", lw=1); ax.text(0, report.tol * 1.4, "tolerance", color="r", fontsize=8)
ax.set_yscale("log"); ax.set_xticks(range(len(groups)), list(groups), rotation=30, ha="right", fontsize=7)
ax.set(ylabel="max rel error", title="whole-model gradient check, per sub-layer", ylim=(1e-12, 1e-5))
plt.tight_layout(); plt.show()
'''),
        md(r"""
## 5. Counting parameters: the base model against Table 3

`count_parameters(cfg)` evaluates a formula; first we confirm it against models actually built (the tiny
one above, and one encoder and one decoder layer of the base size):
"""),
        code(r'''
from minitransformer.model import DecoderLayer, EncoderLayer

print("tiny model: built", model.num_parameters(), " formula", count_parameters(cfg))
base = TransformerConfig()                        # d_model 512, h 8, N 6, d_ff 2048, V 37000
enc_layer = EncoderLayer(base, backend.host_rng(0), None).num_parameters()
dec_layer = DecoderLayer(base, backend.host_rng(0), None).num_parameters()
V, d, N = base.vocab_size, base.d_model, base.N
parts = {"shared embedding E (V x d_model)": V * d, f"encoder ({N} x {enc_layer:,})": N * enc_layer,
         f"decoder ({N} x {dec_layer:,})": N * dec_layer}
for k, v in parts.items():
    print(f"{k:<40}{v:>12,}")
print(f"{'total (built layers)':<40}{sum(parts.values()):>12,}")
print(f"{'count_parameters(TransformerConfig())':<40}{count_parameters(base):>12,}")
'''),
        md(r"""
What we count: one shared $E$ of $37\,000\times512$ (the tie of lesson 5, counted once), every weight
matrix and bias of the attention and feed-forward sub-layers, and the $\gamma,\beta$ of every LayerNorm. The
positional encoding has no parameters. Table 3 of the paper lists $65\times10^6$ for base and
$213\times10^6$ for big.

The paper gives the vocabulary only as "about 37 000 tokens" (§5.1), so $V$ is the one input we cannot
pin down, and each extra token adds $d_\text{model}$ parameters. The cell below asks which $V$ would
reproduce each of the paper's (rounded) figures under our counting:
"""),
        code(r'''
from minitransformer.model import PRESETS

print(f"{'':<6}{'ours, V = 37000':>17}{'paper':>8}{'untied (3 E)':>15}   V that would give the paper's figure (+-0.5 M)")
for name, paper in (("base", 65e6), ("big", 213e6)):
    c = PRESETS[name].with_(vocab_size=37000)
    ours = count_parameters(c)
    rest = ours - c.vocab_size * c.d_model                       # everything except E
    lo, hi = ((paper - 0.5e6 - rest) / c.d_model, (paper + 0.5e6 - rest) / c.d_model)
    print(f"{name:<6}{ours / 1e6:>15.2f} M{paper / 1e6:>6.0f} M{(ours + 2 * c.vocab_size * c.d_model) / 1e6:>13.1f} M"
          f"   {lo:,.0f} .. {hi:,.0f}")
'''),
        md(r"""
With $V = 37\,000$ we count about 63.1 M for base (2 M under the paper's 65 M) and about 214.2 M for big
(1 M over 213 M). Under our counting, base would need a vocabulary of roughly 40 000 tokens and big one of
roughly 36 000, so no single vocabulary size reproduces both figures, and the difference cannot come from
the vocabulary alone. The paper does not say how its figures were counted, and we do not guess; what is
printed above is exactly what this package's models hold. Untied embeddings would give about 101 M for
base, far from 65 M, so the paper's figure is at least consistent with a shared matrix counted once.

## Exercises

""" + NOT_ATTEMPTED_NOTE + r"""

### Exercise 7.1 — shifting the target right

The decoder reads `tgt_in` and must predict `tgt_out` at every position (§3.1: the output embeddings are
offset by one position). Write `my_shift_right(tgt_seqs, pad_id, bos_id, eos_id)`: given a list of target
sentences (lists of ids, possibly empty), return `(tgt_in, tgt_out)`, two integer arrays of shape
`(B, T)` with `T` = longest sentence + 1, where `tgt_in` is `<bos>` + sentence and `tgt_out` is sentence +
`<eos>`, both padded with `pad_id`.
"""),
        code(r'''
def my_shift_right(tgt_seqs, pad_id, bos_id, eos_id):
    """tgt_seqs: list of B lists of ids -> tgt_in, tgt_out: (B, T) int arrays."""
    # your code here
    return None
'''),
        code(r'''
from minitransformer.exercises.lessons_4_7 import (
    check_encoder_layer_params, check_shift_right, check_transformer_params)

check_shift_right(my_shift_right)
'''),
        md(r"""
### Exercise 7.2 — parameters of one encoder layer

Write `my_encoder_layer_params(d_model, d_ff)` returning the number of learnable scalars in one
`EncoderLayer`: its self-attention ($W^Q, W^K, W^V, W^O$ and their biases), its feed-forward network and its
two LayerNorms. The checker compares with layers it builds, including one of the base size.
"""),
        code(r'''
def my_encoder_layer_params(d_model, d_ff):
    """-> int."""
    # your code here
    return None
'''),
        code(r'''
check_encoder_layer_params(my_encoder_layer_params)
'''),
        md(r"""
### Exercise 7.3 — parameters of the whole model

Write `my_transformer_params(V, d_model, d_ff, N)` for the whole post-LN Transformer with the three-way
tied embedding: $N$ encoder layers, $N$ decoder layers (each with two attentions and three LayerNorms), and
$E$. The checker builds two tiny models and counts them, then compares base and big with
`count_parameters`.
"""),
        code(r'''
def my_transformer_params(V, d_model, d_ff, N):
    """-> int."""
    # your code here
    return None
'''),
        code(r'''
check_transformer_params(my_transformer_params)
'''),
        md(r"""
## Solutions
"""),
        code(r'''
def shift_right_solution(tgt_seqs, pad_id, bos_id, eos_id):
    T = max(len(t) for t in tgt_seqs) + 1                     # +1 for <bos> / <eos>
    tgt_in = np.full((len(tgt_seqs), T), pad_id, dtype=np.int64)
    tgt_out = np.full((len(tgt_seqs), T), pad_id, dtype=np.int64)
    for b, t in enumerate(tgt_seqs):
        tgt_in[b, : len(t) + 1] = [bos_id, *t]                  # what the decoder reads
        tgt_out[b, : len(t) + 1] = [*t, eos_id]                 # what it must predict, one step ahead
    return tgt_in, tgt_out

check_shift_right(shift_right_solution)
'''),
        code(r'''
def encoder_layer_params_solution(d_model, d_ff):
    attention = 4 * (d_model * d_model + d_model)              # W^Q, W^K, W^V, W^O, each with a bias
    ffn = d_model * d_ff + d_ff + d_ff * d_model + d_model      # W_1, b_1, W_2, b_2
    norms = 2 * 2 * d_model                                     # two LayerNorms: gamma and beta
    return attention + ffn + norms

check_encoder_layer_params(encoder_layer_params_solution)
'''),
        code(r'''
def transformer_params_solution(V, d_model, d_ff, N):
    attention = 4 * (d_model * d_model + d_model)
    ffn = 2 * d_model * d_ff + d_ff + d_model
    encoder_layer = attention + ffn + 2 * 2 * d_model
    decoder_layer = 2 * attention + ffn + 3 * 2 * d_model      # self-attention, cross-attention, 3 norms
    return V * d_model + N * (encoder_layer + decoder_layer)    # E once: tied three ways

check_transformer_params(transformer_params_solution)
'''),
    ]


# ====================================================================================

LESSONS = {
    "04": ("04_residuals_and_layernorm.ipynb", lesson_4),
    "05": ("05_embeddings_and_softmax.ipynb", lesson_5),
    "06": ("06_positional_encoding.ipynb", lesson_6),
    "07": ("07_encoder_decoder.ipynb", lesson_7),
}


def build(key: str) -> float:
    filename, make_cells = LESSONS[key]
    nb = nbformat.v4.new_notebook()
    nb.cells = make_cells()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=False,
                   resources={"metadata": {"path": str(HERE)}}).execute()
    seconds = time.perf_counter() - t0
    path = HERE / filename
    nbformat.write(nb, path)
    print(f"{filename}: executed in {seconds:.1f} s, {path.stat().st_size / 1024:.0f} KB")
    return seconds


def main(argv: list[str]) -> None:
    keys = [a.zfill(2) for a in argv] or list(LESSONS)
    unknown = [k for k in keys if k not in LESSONS]
    if unknown:
        raise SystemExit(f"unknown lesson(s) {unknown}; choose from {list(LESSONS)}")
    for key in keys:
        build(key)


if __name__ == "__main__":
    main(sys.argv[1:])
