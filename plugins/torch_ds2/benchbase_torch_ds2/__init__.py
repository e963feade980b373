"""benchbase's PyTorch backend (the plugin module is benchbase_torch_ds2.plugin)."""
