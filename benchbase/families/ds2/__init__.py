"""The DS2 family: its framework-neutral weight layout and the NumPy reference of its int8 emulation."""
