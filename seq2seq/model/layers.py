"""Building blocks shared by the encoder, decoder and alignment models.

* `dense`: a linear layer whose initialiser follows the configured scheme and the layer's role.
* `GRUCell`: one step of the paper's gated recurrent unit (reset gate applied *before* the
  recurrent matmul, eq. (A.1)-(A.4) of Bahdanau et al.), with the input projection hoisted out so
  callers can apply it to all time steps at once.
* `LSTMCell`: one step of a long short-term memory (Hochreiter and Schmidhuber 1997, with the
  forget gate of Gers et al. 2000), the cell Luong et al. (2015) stack; same hoisted projection.
* `matmul`: x @ W in the compute dtype. Under bfloat16 it multiplies bfloat16 inputs and
  accumulates and returns float32 (mixed precision), forward and backward.
* `compute_dtype`, `dropout`, `maxout`.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import jax
import jax.numpy as jnp
from flax import nnx

# float64 is for numerical checks only (it needs `jax.enable_x64`).
_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float64": jnp.float64}
INIT_SCHEMES = ("paper", "glorot")
ROLES = ("other", "attention", "recurrent", "zeros")


class LayerSettings(Protocol):
  """What the layers read of the model's settings (`models.ModelSettings` has these)."""

  dtype: str  # The compute dtype's name (`_DTYPES`).
  init: str  # The initialisation scheme (`INIT_SCHEMES`).
  layer_norm: bool  # Layer normalisation inside the recurrent cells.


def compute_dtype(cfg: LayerSettings) -> jnp.dtype:
  """The compute dtype named by `cfg.dtype` (parameters are always float32)."""
  if cfg.dtype not in _DTYPES:
    raise ValueError(f"model.dtype={cfg.dtype!r} is not one of {sorted(_DTYPES)}")
  return _DTYPES[cfg.dtype]


def orthogonal_blocks(num_blocks: int) -> nnx.Initializer:
  """Orthogonal init of each of `num_blocks` square-ish column blocks of a kernel [in, out]."""
  ortho = nnx.initializers.orthogonal()

  def init(key, shape, dtype=jnp.float32):
    rows, cols = shape
    if cols % num_blocks:
      raise ValueError(f"kernel {shape} does not split into {num_blocks} blocks")
    keys = jax.random.split(key, num_blocks)
    return jnp.concatenate([ortho(k, (rows, cols // num_blocks), dtype) for k in keys], axis=1)

  return init


def kernel_init(scheme: str, role: str, num_blocks: int = 1) -> nnx.Initializer:
  """The initialiser of a kernel playing `role` under init `scheme`.

  paper: recurrent kernels orthogonal (per gate block), alignment-model kernels W_a and U_a
  N(0, 0.001^2), v_a zero, every other weight N(0, 0.01^2) (Bahdanau et al., appendix B.1).
  glorot: recurrent orthogonal, v_a zero, every other weight Glorot-uniform.
  """
  if scheme not in INIT_SCHEMES:
    raise ValueError(f"model.init={scheme!r} is not one of {list(INIT_SCHEMES)}")
  if role not in ROLES:
    raise ValueError(f"unknown parameter role {role!r}; valid: {list(ROLES)}")
  if role == "recurrent":
    return orthogonal_blocks(num_blocks)
  if role == "zeros":
    return nnx.initializers.zeros_init()
  if scheme == "glorot":
    return nnx.initializers.glorot_uniform()
  return nnx.initializers.normal(0.001 if role == "attention" else 0.01)


def dense(
  in_features: int,
  out_features: int,
  cfg: LayerSettings,
  *,
  rngs: nnx.Rngs,
  role: str = "other",
  use_bias: bool = False,
  num_blocks: int = 1,
  init: nnx.Initializer | None = None,
) -> nnx.Linear:
  """A linear layer [..., in] -> [..., out] computing in the configured dtype; its kernel
  initialised by `init` when given, else by the scheme's initialiser for `role`.

  Under bfloat16 the matmul multiplies bfloat16 roundings of the inputs and kernel and returns
  float32 (`matmul`), and the float32 bias is added to that: the output layer's logits keep the
  differences the log-softmax needs, and every other layer's output is float32 too."""
  dtype = compute_dtype(cfg)
  extra = {}
  if dtype == jnp.bfloat16:
    extra = {"dot_general": _mixed_dot_general, "promote_dtype": _as_they_are}
  return nnx.Linear(
    in_features,
    out_features,
    use_bias=use_bias,
    dtype=dtype,
    param_dtype=jnp.float32,
    kernel_init=init or kernel_init(cfg.init, role, num_blocks),
    bias_init=nnx.initializers.zeros_init(),
    rngs=rngs,
    **extra,
  )


def _as_they_are(args, **_):
  """`nnx.Linear`'s dtype promotion under bfloat16: none (`_bf16_matmul` rounds the factors)."""
  return args


# ---------------------------------------------------------------------- mixed precision
# XLA's CPU backend multiplies bfloat16 matrices with float32 accumulation at about twice its
# float32 rate on CPUs with AVX512-BF16 (experiments/results/benchmark/benchmark.md), but only for a
# matmul whose output is float32 and whose operands it sees in the plain [M, K] x [K, N] or
# [M, N] x [K, N]^T form. Plain autodiff of such a matmul upcasts the backward pass to
# float32, and the weight gradient x^T g, a contraction over the rows, is upcast even in
# bfloat16. `_bf16_matmul` spells all three products so that they stay on the fast path, and
# returns each factor's gradient in that factor's own dtype (float32 parameters get float32
# gradients of the bfloat16 products, never rounded to bfloat16).
@jax.custom_vjp
def _bf16_matmul(x_MK: jax.Array, w_KN: jax.Array) -> jax.Array:
  """[M, K] @ [K, N] of the factors rounded to bfloat16, accumulated and returned in float32."""
  bf16 = jnp.bfloat16
  return jnp.dot(x_MK.astype(bf16), w_KN.astype(bf16), preferred_element_type=jnp.float32)


def _bf16_matmul_fwd(x_MK, w_KN):
  return _bf16_matmul(x_MK, w_KN), (x_MK, w_KN)


def _bf16_matmul_bwd(residuals, g_MN):
  x_MK, w_KN = residuals
  x16, w16, g16 = (a.astype(jnp.bfloat16) for a in (x_MK, w_KN, g_MN))
  contract_n = (((1,), (1,)), ((), ()))
  dx_MK = jax.lax.dot_general(g16, w16, contract_n, preferred_element_type=jnp.float32)
  # x^T g written as a batch of one: XLA then lays x^T out in memory and keeps bfloat16, where
  # "mk,mn->kn" would run as a float32 matmul.
  dw_KN = jnp.einsum("bmk,bmn->kn", x16[None], g16[None], preferred_element_type=jnp.float32)
  # The barrier keeps XLA from folding a transpose of the gradient that follows (a gathered or
  # transposed kernel's) into the product, which would leave a bfloat16 product in a form its
  # CPU runtime cannot execute ("Unsupported element type for DotThunk: BF16 x BF16 = F32").
  dx_MK, dw_KN = jax.lax.optimization_barrier((dx_MK, dw_KN))
  return dx_MK.astype(x_MK.dtype), dw_KN.astype(w_KN.dtype)


_bf16_matmul.defvjp(_bf16_matmul_fwd, _bf16_matmul_bwd)


def _mixed_dot_general(lhs, rhs, dimension_numbers, precision=None, **_):
  """`nnx.Linear`'s dot_general under bfloat16: [..., K] x [K, N] through `_bf16_matmul`."""
  (lhs_contract, rhs_contract), batch = dimension_numbers
  if tuple(lhs_contract) != (lhs.ndim - 1,) or tuple(rhs_contract) != (0,) or batch != ((), ()):
    raise ValueError(f"mixed-precision matmul expects [..., K] x [K, N], got {dimension_numbers}")
  return matmul(lhs, rhs, jnp.bfloat16)


def matmul(x: jax.Array, w_KN: jax.Array, dtype: jnp.dtype) -> jax.Array:
  """x [..., K] @ w [K, N] -> [..., N] in float32 with both factors in the compute `dtype`:
  bfloat16 factors are multiplied with float32 accumulation (`_bf16_matmul`)."""
  if dtype != jnp.bfloat16:
    x, w_KN = x.astype(dtype), w_KN.astype(dtype)
    return jnp.einsum("...k,kn->...n", x, w_KN, preferred_element_type=jnp.float32)
  out = _bf16_matmul(x.reshape(-1, x.shape[-1]), w_KN)
  return out.reshape(*x.shape[:-1], w_KN.shape[1])


def embed(vocab_size: int, features: int, cfg: LayerSettings, *, rngs: nnx.Rngs):
  """A word-embedding table [vocab, features] (N(0, 0.01^2) under the paper init)."""
  init = nnx.initializers.normal(0.01) if cfg.init == "paper" else nnx.initializers.normal(0.1)
  return nnx.Embed(
    vocab_size,
    features,
    dtype=compute_dtype(cfg),
    param_dtype=jnp.float32,
    embedding_init=init,
    rngs=rngs,
  )


class GRUCell(nnx.Module):
  """The paper's GRU: z, r gates, candidate tanh(W x + U (r * h)), h' = (1 - z) h + z h~.

  The input projection `project(x) -> x3 [..., 3H]` (gate order z, r, candidate, bias included)
  is separate so that callers apply it to every time step at once outside the scan. The state
  is kept in float32; matmuls run in the configured compute dtype.
  """

  def __init__(self, in_features: int, hidden: int, cfg: LayerSettings, *, rngs):
    self.hidden = hidden
    self.project = dense(in_features, 3 * hidden, cfg, rngs=rngs, use_bias=True)
    self.u_zr = dense(hidden, 2 * hidden, cfg, rngs=rngs, role="recurrent", num_blocks=2)
    self.u_h = dense(hidden, hidden, cfg, rngs=rngs, role="recurrent")
    # Layer normalisation (Ba et al. 2016) of the input and recurrent pre-activations, per gate.
    self.layer_norm = bool(cfg.layer_norm)
    if self.layer_norm:
      self.ln_x = GateNorm(3, hidden)
      self.ln_zr = GateNorm(2, hidden)
      self.ln_h = GateNorm(1, hidden)

  def initial(self, h_BH: jax.Array) -> jax.Array:
    """The state whose output is `h_BH` (a GRU's state is its output)."""
    return h_BH.astype(jnp.float32)

  @staticmethod
  def output(state: jax.Array) -> jax.Array:
    """The output h [B, H] of a state."""
    return state

  def __call__(self, h_BH: jax.Array, x3_B3H: jax.Array) -> jax.Array:
    """One step: state [B, H] (float32) and projected input [B, 3H] -> new state [B, H]."""
    x3 = x3_B3H.astype(jnp.float32)
    u_zr = self.u_zr(h_BH).astype(jnp.float32)
    if self.layer_norm:
      x3, u_zr = self.ln_x(x3), self.ln_zr(u_zr)
    x_zr, x_h = x3[..., : 2 * self.hidden], x3[..., 2 * self.hidden :]
    zr = jax.nn.sigmoid(x_zr + u_zr)
    z, r = zr[..., : self.hidden], zr[..., self.hidden :]
    u_h = self.u_h(r * h_BH).astype(jnp.float32)
    if self.layer_norm:
      u_h = self.ln_h(u_h)
    candidate = jnp.tanh(x_h + u_h)
    return (1.0 - z) * h_BH + z * candidate


CELLS = ("gru", "lstm")  # The recurrent cells a stacked recurrence may choose.


def make_cell(kind: str, in_features: int, hidden: int, cfg: LayerSettings, *, rngs):
  """A `GRUCell` or an `LSTMCell` (`kind` in `CELLS`)."""
  if kind not in CELLS:
    raise ValueError(f"unknown cell {kind!r}; valid: {', '.join(CELLS)}")
  return (GRUCell if kind == "gru" else LSTMCell)(in_features, hidden, cfg, rngs=rngs)


class LSTMState(NamedTuple):
  """An LSTM's state: the output h and the memory cell c, [B, H] each, float32."""

  h: jax.Array
  c: jax.Array


class LSTMCell(nnx.Module):
  """i, f, o = sigmoid(.), g = tanh(.) of W x + U h (+ b); c' = f c + i g, h' = o tanh(c').

  As `GRUCell`: the input projection `project(x) -> x4 [..., 4H]` (gate order i, f, g, o, bias
  included) is applied outside the scan; the state is float32, matmuls in the compute dtype.
  The forget gate's bias starts at 1 (Jozefowicz et al. 2015), so memory is kept at first."""

  def __init__(self, in_features: int, hidden: int, cfg: LayerSettings, *, rngs):
    self.hidden = hidden
    self.project = dense(in_features, 4 * hidden, cfg, rngs=rngs, use_bias=True)
    forget = jnp.zeros((4 * hidden,), jnp.float32).at[hidden : 2 * hidden].set(1.0)
    self.project.bias[...] = forget
    self.u = dense(hidden, 4 * hidden, cfg, rngs=rngs, role="recurrent", num_blocks=4)
    self.layer_norm = bool(cfg.layer_norm)
    if self.layer_norm:  # Of each gate's input and recurrent pre-activations, and of c'.
      self.ln_x = GateNorm(4, hidden)
      self.ln_u = GateNorm(4, hidden)
      self.ln_c = GateNorm(1, hidden)

  def initial(self, h_BH: jax.Array) -> LSTMState:
    """The state whose output is `h_BH`, its memory empty."""
    h = h_BH.astype(jnp.float32)
    return LSTMState(h, jnp.zeros_like(h))

  @staticmethod
  def output(state: LSTMState) -> jax.Array:
    """The output h [B, H] of a state."""
    return state.h

  def __call__(self, state: LSTMState, x4_B4H: jax.Array) -> LSTMState:
    """One step: the state and projected input [B, 4H] -> the new state."""
    x4, u4 = x4_B4H.astype(jnp.float32), self.u(state.h).astype(jnp.float32)
    if self.layer_norm:
      x4, u4 = self.ln_x(x4), self.ln_u(u4)
    i, f, g, o = jnp.split(x4 + u4, 4, axis=-1)
    c = jax.nn.sigmoid(f) * state.c + jax.nn.sigmoid(i) * jnp.tanh(g)
    shown = self.ln_c(c) if self.layer_norm else c
    return LSTMState(jax.nn.sigmoid(o) * jnp.tanh(shown), c)


class GateNorm(nnx.Module):
  """Layer normalisation of G gate blocks of H units each ([..., G H]), every block over its own
  units with its own gain (starting at 1) and bias (at 0), in float32."""

  def __init__(self, gates: int, hidden: int, eps: float = 1e-5):
    self.gates, self.hidden, self.eps = gates, hidden, eps
    self.gain = nnx.Param(jnp.ones((gates * hidden,), jnp.float32))
    self.bias = nnx.Param(jnp.zeros((gates * hidden,), jnp.float32))

  def __call__(self, x: jax.Array) -> jax.Array:
    blocks = x.astype(jnp.float32).reshape(*x.shape[:-1], self.gates, self.hidden)
    mean = jnp.mean(blocks, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(blocks - mean), axis=-1, keepdims=True)
    normed = ((blocks - mean) * jax.lax.rsqrt(var + self.eps)).reshape(x.shape)
    return normed * self.gain[...] + self.bias[...]


def dropout(x: jax.Array, rate: float, rng: jax.Array | None) -> jax.Array:
  """Inverted dropout; the identity when `rng` is None or `rate` is 0."""
  if rng is None or rate <= 0.0:
    return x
  keep = jax.random.bernoulli(rng, 1.0 - rate, x.shape)
  return jnp.where(keep, x / (1.0 - rate), 0).astype(x.dtype)


def maxout(x: jax.Array) -> jax.Array:
  """Maximum over adjacent pairs of the last axis: [..., 2M] -> [..., M]."""
  # Strided slices rather than a reshape to [..., M, 2] and a max: the same pairs, and about
  # half the forward+backward time of the deep output on CPU (experiments/benchmark.py).
  return jnp.maximum(x[..., 0::2], x[..., 1::2])
