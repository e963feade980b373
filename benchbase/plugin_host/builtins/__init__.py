"""Built-in plugins: benchbase's own workloads and hardware profiles, registered like any other."""
