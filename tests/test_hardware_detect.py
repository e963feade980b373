"""`--hw auto` and `benchbase profiles --detect`: this machine as a hardware profile."""

from __future__ import annotations

import json

import psutil
import pytest
import yaml
from cli_helpers import run_benchbase

from benchbase.report.cost import CostModel
from benchbase.specs import HardwareProfile
from benchbase.telemetry.cpu_features import vector_extensions
from benchbase.telemetry.hardware_detect import detect_profile


def test_the_detected_profile_describes_this_machine():
    profile = detect_profile()
    assert profile.name == "auto"
    assert profile.cpu.threads == psutil.cpu_count(logical=True)
    assert profile.cpu.cores == (psutil.cpu_count(logical=False) or profile.cpu.threads)
    assert abs(profile.cpu.ram_gb - psutil.virtual_memory().total / 1e9) < 0.2
    assert "Derived, not tuned" in profile.description  # what was derived is stated, not passed off as tuned
    assert list(profile.cpu.vector_extensions) == vector_extensions()  # they change numerics and speed
    if profile.devices.kind == "cpu":  # no GPU here (CI has none)
        assert (profile.devices.count, profile.pipeline.threads) == (1, profile.cpu.cores)
        assert "No GPU" in profile.description


@pytest.mark.parametrize(("reported", "ghz"), [((2596.12, 0.0, 0.0), 2.6), ((1800.0, 800.0, 3500.0), 3.5),
                                                ((0.0, 0.0, 0.0), None)])
def test_the_clock_is_the_highest_reported_else_the_nominal_one(monkeypatch, reported, ghz):
    # (current, min, max) MHz: a VM without cpufreq reports its nominal clock as current and no max.
    frequency = type(psutil.cpu_freq())  # psutil's (current, min, max) named tuple
    monkeypatch.setattr(psutil, "cpu_freq", lambda: frequency(*reported))
    profile = detect_profile()
    assert profile.cpu.ghz == ghz


def test_detect_writes_a_profile_that_loads(tmp_path):
    target = tmp_path / "this-machine.yaml"
    written = run_benchbase("profiles", "--detect", "--write", str(target))
    assert written.returncode == 0, written.stderr
    loaded = HardwareProfile.model_validate(yaml.safe_load(target.read_text()))
    assert loaded == detect_profile().model_copy(update={"description": loaded.description})
    refused = run_benchbase("profiles", "--write", str(target))
    assert refused.returncode == 2 and "--write needs --detect" in refused.stderr


def test_an_hourly_price_is_the_cost_when_stated():
    profile = {"price": {"total_usd": 26280.0, "hourly_usd": 2.5}}
    assert CostModel().hourly(profile) == 2.5
    assert CostModel().hourly({"price": {"total_usd": 26280.0}}) == pytest.approx(1.0)  # 3 years round the clock
    assert CostModel(price_per_hour=4.0).hourly(profile) == 4.0


@pytest.mark.slow
def test_hw_auto_trains_ds2_mini(small_store, tmp_path):
    out = tmp_path / "run"
    finished = run_benchbase("run", "--workload", "ds2-mini", "--backend", "torch", "--hw", "auto", "--data",
                             str(small_store), "--out", str(out), "--max-epochs", "1", "--no-final-eval", timeout=600)
    assert finished.returncode == 3, finished.stderr[-2000:]  # aborted at max_epochs, a status
    config = json.loads((out / "config.json").read_text())
    assert config["hardware"]["name"] == "auto" and config["hardware"]["description"].startswith("Detected on")
    assert json.loads((out / "result.json").read_text())["batches"] > 0
    assert run_benchbase("check", str(out)).returncode == 0
