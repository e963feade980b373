"""The torch backend's RNN-T family: the transducer model, its loss, and what ``TorchBackend`` asks of them."""
