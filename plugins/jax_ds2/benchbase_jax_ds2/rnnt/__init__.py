"""The JAX backend's RNN-T family: the transducer as pure functions, its loss, and its jitted steps."""
