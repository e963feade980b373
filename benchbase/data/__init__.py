"""Data: the alphabet, the LibriSpeech-layout reader, features, the shard store and the pipeline."""
