"""Runs the official MLPerf Training compliance checker (mlperf-logging) on a log, with the
training 3.1.0 common rules. The one rule set aside is the fixed list of MLPerf benchmark
names that submission_benchmark must be in (benchbase's workloads are not on it): that
check is replaced by 'non-empty', and nothing else is changed."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from mlperf_logging.compliance_checker import mlp_compliance

RULESET = "3.1.0"
_BENCHMARK_LIST = re.compile(r"v\['value'\] in \[[^\]]*\]")


def check_common_rules(log: Path, workdir: Path) -> tuple[bool, str]:
    """(passed, the checker's messages)."""
    rules = Path(mlp_compliance.__file__).parent / f"training_{RULESET}"
    open_common = workdir / "open_common.yaml"
    text = (rules / "open_common.yaml").read_text()
    text = _BENCHMARK_LIST.sub("v['value'] != ''", text)
    text = re.sub(r'\n\s*POST:.*enqueue_config.*', "", text)  # no per-benchmark rule file exists for ours
    open_common.write_text(text)
    common = workdir / "common.yaml"
    common.write_text((rules / "common.yaml").read_text().replace(
        "'training_3.1.0/{}_common.yaml'.format(v['value'])", f"'{open_common}'"))
    checker = mlp_compliance.make_checker("training", RULESET, quiet=False, werror=False)
    messages: list[str] = []
    handler = _ListHandler(messages)
    logging.getLogger().addHandler(handler)
    try:
        passed = checker.check_file(str(log), str(common))
    finally:
        logging.getLogger().removeHandler(handler)
    return passed, "\n".join(messages)


class _ListHandler(logging.Handler):
    def __init__(self, into: list[str]) -> None:
        super().__init__(logging.INFO)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        self.into.append(record.getMessage())
