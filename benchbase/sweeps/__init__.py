"""Sweeps: a grid of runs as one experiment. The sweep file's spec, its folder, and one run as a child process."""
