"""The TensorFlow backend's RNN-T family: the transducer model, its loss, and what ``TensorFlowBackend`` asks."""
