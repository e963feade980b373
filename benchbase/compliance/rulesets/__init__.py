"""The rule sets that ship with benchbase, one YAML file per version."""
