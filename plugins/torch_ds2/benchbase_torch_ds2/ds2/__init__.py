"""The torch backend's DS2 family: the Deep Speech 2-like model, its CTC training and neutral weights."""
