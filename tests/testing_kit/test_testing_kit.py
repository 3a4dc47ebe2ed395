"""reluattn.testing passes the project's own implementations: the NumPy backend's attention (float32 against
the float64 reference), the JAX attention (forward and jax.vjp gradients, float32 and float64, bfloat16
matmuls), whole backends (check_backend), the worked example of docs/testing.md; and it imports only with
hypothesis installed. The tiled implementations are held to the reference through the kit where they are
tested: tests/numpy_backend/test_blocked_attention_numpy.py, tests/fast_paths/test_blocked_attention_jax.py and
tests/fast_paths/test_pallas_attention.py (the Pallas kernel in interpret mode).

Example counts are small: every JAX case compiles (the kit's checks run without shrinking, deadline=None).
"""

import importlib.util
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import reluattn as ra
import reluattn.testing as rt

ROOT = Path(__file__).resolve().parents[2]
jb, nb = ra.backend("jax"), ra.backend("numpy")


# The one-line form: pytest collects these as they are.
test_numpy_attention_float32 = rt.attention_property_test(nb.attention, causal=True, max_examples=40)
test_numpy_attention_long_sequences = rt.attention_property_test(
    nb.attention, kinds=["relu", "softmax"], shapes=rt.attention_shapes(lengths=list(rt.strategies.LONG_LENGTHS)),
    max_examples=3)


def test_jax_attention_forward_and_gradients_float32():
    rt.check_attention_grad(jb.attention, causal=True, max_examples=6)


def test_jax_attention_forward_and_gradients_float64():
    with jax.enable_x64(True):
        rt.check_attention_grad(jb.attention, dtype=np.float64, causal=True, max_examples=4)


def test_jax_attention_with_bfloat16_matmuls_meets_the_bfloat16_tolerance():
    # float32 outputs of bfloat16 matmuls: the caller names the tolerance of the precision actually used.
    # Inputs already in bfloat16, so what is measured is the rounding inside (the reference sees the same inputs).
    def bfloat16_matmuls(q, k, v, attn_cfg, **options):
        return jb.attention(q, k, v, attn_cfg, compute_dtype=jnp.bfloat16, **options)
    rt.check_attention(bfloat16_matmuls, dtype="bfloat16", tolerance="bfloat16", kinds=["relu", "softmax", "gelu"],
                       profiles=["normal", "kinks", "negative_rows"], max_examples=5)


def test_check_backend_passes_both_backends():
    rt.check_backend(nb, max_examples=8)  # float32 NumPy against float64 NumPy: the tolerance rules
    rt.check_backend(jb, max_examples=1)


def test_check_backend_reports_a_wrong_gradient_leaf():
    class HalfHeadGradient:  # the NumPy backend with the head's weight gradient halved
        apply, init_optimizer, train_step = nb.apply, nb.init_optimizer, nb.train_step

        @staticmethod
        def loss_and_grad(params, images, labels, cfg):
            loss, grads = nb.loss_and_grad(params, images, labels, cfg)
            grads["head"]["w"] = grads["head"]["w"] / 2
            return loss, grads
    with pytest.raises(AssertionError, match=r"(?s)loss_and_grad: gradient head/w.*got = 0.5 x expected"):
        rt.check_backend(HalfHeadGradient, max_examples=5)


def test_worked_example_of_the_docs():
    spec = importlib.util.spec_from_file_location("example", ROOT / "docs/examples/test_relu_attention_properties.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert {"test_forward", "test_cross_attention", "test_gradients", "test_bfloat16"} <= set(vars(example))
    # Its function through each property, with fewer draws than the page's (pytest docs/examples runs those).
    # jit-compiled: one compilation per case instead of one per operation and shape.
    relu_attention = jax.jit(example.relu_attention, static_argnames=("attn_cfg", "causal", "causal_length"))
    shapes = rt.attention_shapes(cross_attention=True, lengths=[1, 5], head_dims=3)
    rt.check_attention(relu_attention, kinds=["relu"], causal=True, shapes=shapes, max_examples=3)
    rt.check_attention_grad(relu_attention, kinds=["relu"], causal=True, shapes=shapes, max_examples=3)


def test_one_line_tests_are_named_and_run_their_check():
    broken = rt.attention_property_test(lambda q, k, v, attn_cfg: 2.0 * nb.attention(q, k, v, attn_cfg),
                                        kinds=["relu"], max_examples=5)
    assert broken.__name__ == "test_attention_of_<lambda>" and "kinds" in broken.__doc__
    with pytest.raises(rt.MismatchError, match="got = 2 x expected"):
        broken()


def test_reports_say_what_is_wrong_with_the_shape_and_refuse_unknown_kinds():
    with pytest.raises(AssertionError, match=r"output: shape \(1, 3, 1, 2\), expected \(1, 3, 1, 1\)"):
        rt.check_attention(lambda q, k, v, attn_cfg: np.concatenate([q, q], axis=-1), kinds=["relu"],
                           shapes=rt.attention_shapes(batch=1, heads=1, lengths=3, head_dims=1), max_examples=1)
    with pytest.raises(ValueError, match="kinds must be a non-empty list of softmax, relu"):
        rt.check_attention(nb.attention, kinds=["relu", "tanh"])
    with pytest.raises(ValueError, match="no tolerance for dtype int32"):
        rt.tolerance_for(np.int32)


def test_import_reluattn_needs_no_hypothesis_and_the_kit_says_how_to_get_it():
    script = ("import sys; sys.modules['hypothesis'] = None\n"  # as if hypothesis were not installed
              "import reluattn, reluattn.numpy_backend\n"
              "try:\n    import reluattn.testing\nexcept ImportError as error:\n    print(error)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert 'pip install "reluattn[testing]"' in result.stdout


def test_the_kit_imports_no_jax_until_a_jax_function_is_differentiated():
    # A NumPy or PyTorch user does not pay for JAX; check_attention_grad(fn) imports it for jax.vjp.
    script = ("import sys, reluattn.testing as rt, reluattn.numpy_backend as nb\n"
              "rt.check_attention(nb.attention, max_examples=3)\n"
              "print('jax' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_configs_narrow_what_is_drawn():
    # An implementation that only knows alpha = 1 passes when only alpha = 1 is drawn, and is caught otherwise.
    def only_alpha_one(q, k, v, attn_cfg):
        return nb.attention(q, k, v, attn_cfg.replace(alpha=1.0))
    rt.check_attention(only_alpha_one, configs=rt.attention_configs(["relu", "gelu"], alphas=1.0), max_examples=10)
    with pytest.raises(AssertionError, match="1/L where L\\^-alpha is meant"):
        rt.check_attention(only_alpha_one, kinds=["relu"], max_examples=20)
    with pytest.raises(ValueError, match="give kinds or configs"):
        rt.check_attention(only_alpha_one, kinds=["relu"], configs=rt.attention_configs(["relu"]))


def test_drawn_options_reach_the_function_and_the_report():
    # A tiled function that is right for one tile size only: caught, and the report names the option drawn.
    def tile_dependent(q, k, v, attn_cfg, *, tile):
        return nb.attention(q, k, v, attn_cfg) * (1.0 if tile == 1 else 1.5)
    rt.check_attention(tile_dependent, kinds=["relu"], options={"tile": 1}, max_examples=5)
    with pytest.raises(rt.MismatchError, match=r"(?s)got = 1.5 x expected.*tile=2"):
        rt.check_attention(tile_dependent, kinds=["relu"], options={"tile": [1, 2]}, max_examples=20)


def test_max_examples_overrides_the_settings_count():
    from hypothesis import settings
    calls = []

    def counted(q, k, v, attn_cfg):
        calls.append(1)
        return nb.attention(q, k, v, attn_cfg)
    rt.check_attention(counted, kinds=["relu"], settings=settings(rt.compiling, database=None, max_examples=50),
                       max_examples=3)
    assert len(calls) == len(rt.edge_cases(["relu"])) + 3  # the fixed edge cases, then the 3 drawn


def test_trees_are_compared_leaf_by_leaf():
    expected = {"w": np.array([1.0, -2.0]), "blocks": [{"b": np.array([1e-3, 0.0])}]}
    rt.assert_trees_close({"w": np.array([1.0, -2.0 + 1e-9]), "blocks": [{"b": np.array([1e-3, 1e-12])}]},
                          expected, rtol=1e-8)
    with pytest.raises(rt.MismatchError, match=r"(?s)weights blocks/0/b: 1 of 2 entries.*worst at index \(1,\)"):
        rt.assert_trees_close({"w": expected["w"], "blocks": [{"b": np.array([1e-3, 1e-9])}]}, expected, 1e-8,
                              what="weights")
    with pytest.raises(rt.MismatchError, match=r"the leaves differ: missing \['blocks/0/b'\]"):
        rt.assert_trees_close({"w": expected["w"]}, expected, 1e-8)
    assert rt.relative_error(np.array([1.0, 2.0]), np.array([1.0, 2.5])) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="arrays of one size"):
        rt.relative_error(np.ones(3), np.ones(1))


def test_the_api_page_names_every_public_name():
    page = (ROOT / "docs/api/testing.md").read_text()
    assert not [name for name in rt.__all__ if f"reluattn.testing.{name}" not in page]
