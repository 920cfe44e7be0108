"""A real model file with libgdn's kernels: HF transformers' Qwen3-Next (and Qwen3.5 where the
installed transformers has it), small and randomly initialised, on a GPU.

transformers 5 looks the GatedDeltaNet layer's kernels up as module-level functions of its
modeling file (torch_chunk_gated_delta_rule, torch_recurrent_gated_delta_rule, causal_conv1d_fn,
causal_conv1d_update) and runs its gated RMSNorm as a module; swap_in() puts libgdn's functions
in their place (as README.md shows a user doing). Checks, against the model's own torch path on
the same weights: prefill logits within 1e-4 relative L2 in f32; in bf16 within 5e-3 or 1.25x
the torch path's own bf16 error (both against the f32 torch path), whichever is larger; a
32-token greedy generation token for token in f32 (prefill through the chunked kernel, then
decode steps through the conv update and the recurrent kernel with the model's cache).
The model's own path is its torch code even where FLA or causal-conv1d can be imported (another
test module may have put FLA on sys.path): transformers decides at import which kernels its
module-level functions hand their calls to, and FLA's kernels in f32 take their products in TF32
(4e-4 off in the logits), so modeling_module() imports the modeling file afresh while neither
package can be imported.
Skipped without torch, a CUDA device, a CUDA-enabled libgdn or transformers' Qwen3-Next.
"""
import contextlib
import importlib
import sys

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)
transformers = pytest.importorskip("transformers")

import gdn  # noqa: E402
from gdn._lib import BACKENDS, lib as _libgdn  # noqa: E402

if not _libgdn.gdn_backend_available(BACKENDS["cuda"]):
    pytest.skip("this libgdn has no usable CUDA backend", allow_module_level=True)

FUNCTIONS = {"torch_chunk_gated_delta_rule": gdn.chunk_gated_delta_rule,
             "torch_recurrent_gated_delta_rule": gdn.fused_recurrent_gated_delta_rule,
             "causal_conv1d_fn": gdn.causal_conv1d_fn,
             "causal_conv1d_update": gdn.causal_conv1d_update}


def gated_norm_forward(self, hidden_states, gate):
    """libgdn's gated RMSNorm in place of the model's RMSNormGated.forward."""
    return gdn.rms_norm_gated(hidden_states, gate, self.weight, eps=self.variance_epsilon)


@contextlib.contextmanager
def swap_in(modeling, norm_class):
    """libgdn's functions in place of the modeling file's kernels while the block runs."""
    saved = {name: getattr(modeling, name) for name in FUNCTIONS}
    saved_norm = norm_class.forward
    try:
        for name, fn in FUNCTIONS.items():
            setattr(modeling, name, fn)
        norm_class.forward = gated_norm_forward
        yield
    finally:
        for name, fn in saved.items():
            setattr(modeling, name, fn)
        norm_class.forward = saved_norm


def common(**extra):
    return dict(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                linear_conv_kernel_dim=4, linear_key_head_dim=64, linear_value_head_dim=64,
                linear_num_key_heads=2, linear_num_value_heads=4, max_position_embeddings=4096,
                layer_types=["linear_attention"] * 3 + ["full_attention"], **extra)


def modeling_module(name):
    """transformers' modeling file `name`, imported again while FLA and causal-conv1d cannot be
    (None in sys.modules), so that its functions run its own torch code."""
    blocked = {p: sys.modules.get(p) for p in ("fla", "causal_conv1d")}
    try:
        for p in blocked:
            sys.modules[p] = None
        return importlib.reload(importlib.import_module(name))
    finally:
        for p, mod in blocked.items():
            if mod is None:
                sys.modules.pop(p, None)
            else:
                sys.modules[p] = mod


def qwen3_next():
    m = modeling_module("transformers.models.qwen3_next.modeling_qwen3_next")
    cfg = transformers.Qwen3NextConfig(**common(moe_intermediate_size=128,
                                                shared_expert_intermediate_size=128,
                                                num_experts=4, num_experts_per_tok=2))
    return m, m.Qwen3NextRMSNormGated, m.Qwen3NextForCausalLM, cfg


def qwen3_5():
    m = modeling_module("transformers.models.qwen3_5.modeling_qwen3_5")
    cfg = transformers.Qwen3_5TextConfig(**common())
    return m, m.Qwen3_5RMSNormGated, m.Qwen3_5ForCausalLM, cfg


def model_kinds():
    kinds = []
    for name, make in (("qwen3_next", qwen3_next), ("qwen3_5", qwen3_5)):
        try:
            make()
        except (ImportError, AttributeError, TypeError) as e:
            kinds.append(pytest.param(name, marks=pytest.mark.skip(reason=f"{name}: {e}")))
            continue
        kinds.append(name)
    return kinds


MAKERS = {"qwen3_next": qwen3_next, "qwen3_5": qwen3_5}


def build(kind, dtype, seed=0):
    modeling, norm, causal_lm, cfg = MAKERS[kind]()
    torch.manual_seed(seed)
    model = causal_lm(cfg).to(device="cuda", dtype=dtype).eval()
    return modeling, norm, model


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def prompt(vocab, T, seed=1):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randint(0, vocab, (1, T), device="cuda", generator=g)


@pytest.mark.parametrize("kind", model_kinds())
def test_prefill_logits_f32(kind):
    modeling, norm, model = build(kind, torch.float32)
    ids = prompt(model.config.vocab_size, 333)
    with torch.no_grad():
        want = model(ids, use_cache=False).logits
        with swap_in(modeling, norm):
            got = model(ids, use_cache=False).logits
    err = rel(got, want)
    print(f"\n{kind} f32 prefill logits: {err:.2e} from the torch path")
    assert err <= 1e-4


@pytest.mark.parametrize("kind", model_kinds())
def test_prefill_logits_bf16(kind):
    modeling, norm, model = build(kind, torch.float32)
    ids = prompt(model.config.vocab_size, 1000)
    with torch.no_grad():
        want = model(ids, use_cache=False).logits
        model = model.to(torch.bfloat16)
        torch_bf16 = model(ids, use_cache=False).logits
        with swap_in(modeling, norm):
            got = model(ids, use_cache=False).logits
    ours, theirs = rel(got, want), rel(torch_bf16, want)
    print(f"\n{kind} bf16 prefill logits vs the f32 torch path: libgdn {ours:.2e}, "
          f"torch bf16 {theirs:.2e}")
    assert ours <= max(5e-3, 1.25 * theirs)


@pytest.mark.parametrize("kind", model_kinds())
def test_greedy_generation_f32(kind):
    modeling, norm, model = build(kind, torch.float32)
    ids = prompt(model.config.vocab_size, 100)
    kw = dict(max_new_tokens=32, do_sample=False, min_new_tokens=32)
    with torch.no_grad():
        want = model.generate(ids, **kw)
        with swap_in(modeling, norm):
            got = model.generate(ids, **kw)
    assert got.shape == want.shape == (1, 132)
    assert torch.equal(got, want), (got[0, 100:], want[0, 100:])
