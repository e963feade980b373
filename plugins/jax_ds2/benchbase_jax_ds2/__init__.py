"""benchbase's JAX backend (the plugin module is benchbase_jax_ds2.plugin)."""
