"""Opt-in speed for the JAX backend. Nothing here is used unless asked for, and importing it changes
nothing in the process.

    fast=True on apply / loss_and_grad / forward / loss_and_logits / make_train_step / train_step
        matmul.py     every matmul through a layout-aware custom_vjp (float32 and bfloat16 on XLA:CPU)
        layers.py     LayerNorm and GELU with hand-written derivative rules (custom_jvp)
    AttentionConfig(impl="blocked") or attention(..., impl="blocked")
        blocked_attention.py   the tiled forward and backward (a custom_vjp) behind long_sequences.blocked_attention
                               (its loops: blocked_loops.py; one tile and the keys it hides: blocked_tiles.py)
    called explicitly
        cpu_setup.py  configure(): glibc malloc settings for XLA:CPU (the trainer and CLI call it)
        pallas_attention.py    a fused GPU kernel for the point-wise kinds (Pallas / Triton)

The plain path (fast=False, the default) is jnp + autodiff, so every JAX transform works on it (jax.jvp,
jax.jacfwd, jax.hessian, jax.vmap, jax.grad with respect to the images); custom_vjp functions do not
support forward mode, so with fast=True only reverse mode (jax.grad / jax.vjp) is available.
Each file names the section of docs/performance.md that measured why it exists.

The paper options on these paths: the learned length factor (learn_alpha / learn_scale) is one number per
head, so the model runs the blocked tiles with factor 1 and scales each head's output
(multihead_attention.core_attention); pallas_attention refuses it, and AttentionConfig refuses
reg_weight > 0 with impl="blocked" (the regulariser reads whole rows of weights, which tiles never hold).
"""
