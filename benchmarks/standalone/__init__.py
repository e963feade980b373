"""conformer-mini written in each framework alone, with no benchbase code, for
``benchmarks/standalone_conformer.py``: the shapes and the batch (``conformer_mini``, which imports
no framework), then one module per framework (``torch_conformer``, ``tf_conformer``,
``jax_conformer``), each with its ``training_step`` and its ``operations``."""
