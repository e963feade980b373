"""benchbase's JAX backend (the plugin module is benchbase_jax_ds2.plugin).

One folder per model family (``ds2/``, ``rnnt/``, found by ``families``), beside the code they
share: the backend, the training state and its checkpoints, the optimizers, the arithmetic of each
precision, the LSTM recurrence, dropout's bits, fake quantization and the padded shapes.
"""
