"""The paper's own numbers (Baunsgaard, Wrede, Tözün, ADMS 2020), shipped as a reference so
that `benchbase report --paper` can set a user's runs beside them. Values are copied from
docs/design.md, "Reference numbers from the paper"; None is the paper's NA (never reached)."""

from __future__ import annotations

from benchbase.report.report_table import ReportTable

__all__ = ["BEAM_WIDTH", "FINAL_WER", "HARDWARE", "TTA_OWN_BATCH", "TTA_SAME_BATCH", "paper_tables"]

PLATFORMS = ("sys1", "sys2", "sys10")

# Table 1: prices in USD, October 2019.
HARDWARE = {
    "sys1": {"devices": "4x RTX 2070 8 GB", "total_usd": 2605.29, "gpus_usd": 1980.00, "cpus_usd": 354.25},
    "sys2": {"devices": "4x GTX 1080 Ti 11 GB", "total_usd": 5699.95, "gpus_usd": 3599.97, "cpus_usd": 97.98},
    "sys10": {"devices": "2x Tesla V100 32 GB", "total_usd": 25999.00, "gpus_usd": 17956.00, "cpus_usd": 5422.20},
}

# Table 4: TTA in minutes, each platform with its own batch size.
TTA_OWN_BATCH = {
    "sys1": {"CER 10": 820, "CER 8": 1641, "CER 7": 2450, "WER 22": 1908, "WER 20.2": 2174, "WER 19.2": 2725},
    "sys2": {"CER 10": 672, "CER 8": 1118, "CER 7": 2429, "WER 22": 1251, "WER 20.2": 1980, "WER 19.2": 2834},
    "sys10": {"CER 10": 511, "CER 8": 974, "CER 7": None, "WER 22": 1143, "WER 20.2": 2840, "WER 19.2": None},
}

# Table 6: TTA in minutes, the same batch size on every platform (WER targets 22, 20, 19).
TTA_SAME_BATCH = {
    "sys1": {"CER 10": 771, "CER 8": 1291, "CER 7": 2322, "WER 22": 1806, "WER 20": 2322, "WER 19": 2322},
    "sys2": {"CER 10": 791, "CER 8": 1571, "CER 7": 2091, "WER 22": 1571, "WER 20": 2091, "WER 19": 2352},
    "sys10": {"CER 10": 479, "CER 8": 879, "CER 7": 1600, "WER 22": 1197, "WER 20": 1600, "WER 19": 2078},
}

# Table 5: final WER at beam width 512.
FINAL_WER = {
    "sys1": {"val-clean": 17.90, "test-clean": 17.32, "val-other": 41.85, "test-other": 45.04},
    "sys2": {"val-clean": 18.50, "test-clean": 18.68, "val-other": 44.31, "test-other": 48.15},
    "sys10": {"val-clean": 19.86, "test-clean": 19.45, "val-other": 45.86, "test-other": 49.43},
}

# Table 3: beam width -> (evaluation seconds, WER, CER) on one V100.
BEAM_WIDTH = {
    64: (154, 25.20, 9.315), 128: (187, 25.02, 9.179), 256: (266, 24.95, 9.069), 512: (443, 24.78, 9.029),
    1024: (849, 24.75, 8.993), 2048: (1860, 24.68, 8.968), 4096: (4200, 24.62, 8.943),
}


def paper_tables() -> list[ReportTable]:
    return [_tta_table("paper Table 4: TTA (min), own batch size", TTA_OWN_BATCH),
            _tta_table("paper Table 6: TTA (min), same batch size", TTA_SAME_BATCH),
            _final_wer_table(), _hardware_table()]


def _tta_table(title: str, table: dict[str, dict[str, float | None]]) -> ReportTable:
    labels = list(table["sys1"])
    rows = [[f"paper {name}", *(table[name][label] for label in labels)] for name in PLATFORMS]
    return ReportTable(title, ["platform", *labels], rows)


def _final_wer_table() -> ReportTable:
    columns = list(FINAL_WER["sys1"])
    rows = [[f"paper {name}", *(FINAL_WER[name][column] for column in columns)] for name in PLATFORMS]
    return ReportTable("paper Table 5: final WER (%) at beam width 512", ["platform", *columns], rows)


def _hardware_table() -> ReportTable:
    rows = [[f"paper {name}", spec["devices"], spec["total_usd"], spec["gpus_usd"], spec["cpus_usd"]]
            for name, spec in HARDWARE.items()]
    return ReportTable("paper Table 1: hardware prices (USD, 2019-10)",
                       ["platform", "devices", "total $", "GPUs $", "CPUs $"], rows)
