"""benchbase's TensorFlow backend (the plugin module is benchbase_tf_ds2.plugin)."""
