from __future__ import annotations

import pytest
from pydantic import ValidationError

from benchbase.errors import InputError
from benchbase.families.ds2.spec import DS2ModelSpec
from benchbase.specs import HardwareProfile, TTARule, WorkloadSpec
from benchbase.specs.yaml_files import load_spec_text


def test_the_papers_profiles_carry_table_1_and_2(registry):
    sys1, sys2, sys10 = (registry.profile(name) for name in ("sys1", "sys2", "sys10"))
    assert (sys1.price.total_usd, sys1.pipeline.global_batch, sys1.pipeline.batch_per_device) == (2605.29, 96, 24)
    assert (sys2.price.gpus_usd, sys2.pipeline.readers, sys2.pipeline.buffer) == (3599.97, 16, 100)
    assert (sys10.devices.count, sys10.devices.memory_gb, sys10.pipeline.global_batch) == (2, 32, 300)
    assert registry.profile("cpu").devices.kind == "cpu"


def test_ds2_parameter_count_is_what_the_papers_layer_sizes_imply(registry):
    ds2 = registry.workload("ds2")
    conv = 11 * 93 * 600
    lstm = 4 * 800 * (600 + 800 + 1) + 4 * 4 * 800 * (800 + 800 + 1)
    batchnorm = 2 * 600 + 5 * 2 * 800
    output = 800 * 30 + 30
    assert ds2.model.parameter_count(ds2.features.dimension) == conv + lstm + batchnorm + output == 25_623_030


def test_ds2_targets_are_the_papers(registry):
    labels = [target.label for target in registry.workload("ds2").tta.targets]
    assert labels == ["CER 10", "CER 8", "CER 7", "WER 22", "WER 20.2", "WER 19.2"]


def test_ds2_is_scored_as_the_paper_scores_it(registry):
    ds2 = registry.workload("ds2")
    # The paper's curves and targets are on dev-clean alone, its CER is Eq. 3, every utterance is 1670 frames.
    assert ds2.scored_subset == ds2.tta.subset == "dev-clean"
    assert ds2.data.dev == ("dev-clean", "dev-other") and ds2.data.test == ("test-clean", "test-other")
    assert {target.metric for target in ds2.tta.targets} == {"paper_cer", "wer"}
    assert ds2.data.pad_to_frames == 1670
    assert (ds2.evaluation.final_decoder, ds2.evaluation.final_beam_width) == ("word_beam", 512)


def test_every_builtin_workload_declares_its_deviations(registry):
    for name in ("ds2", "ds2-mini"):
        workload = registry.workload(name)
        assert workload.reference and workload.deviations
        assert all(deviation.why for deviation in workload.deviations)
    fields = {deviation.field for deviation in registry.workload("ds2").deviations}
    assert {"optimizer.learning_rate", "model.init"} <= fields
    # Fixed rather than declared: the paper gives every system a PCIe3 x16 link.
    assert registry.profile("sys10").devices.interconnect == "PCIe3 x16"


def test_the_tta_subset_must_be_named_and_be_a_dev_subset(registry):
    data = registry.workload("ds2").model_dump()
    data["tta"]["subset"] = None
    with pytest.raises(ValidationError, match="tta.subset must name the dev subset"):
        WorkloadSpec.model_validate(data)
    data["tta"]["subset"] = "test-clean"
    with pytest.raises(ValidationError, match="is not a dev subset"):
        WorkloadSpec.model_validate(data)
    data["tta"]["subset"], data["data"]["dev"] = None, ["dev-clean"]
    assert WorkloadSpec.model_validate(data).scored_subset == "dev-clean"  # the only one
    assert registry.workload("ds2").tta.window == 3


def test_specs_are_frozen_and_reject_unknown_fields(registry):
    workload = registry.workload("ds2-mini")
    with pytest.raises(ValidationError):
        workload.max_epochs = 3
    with pytest.raises(ValidationError, match="Extra inputs"):
        WorkloadSpec.model_validate({**workload.model_dump(), "learning_rate": 1})


def test_profile_batch_must_split_over_its_devices(registry):
    data = registry.profile("sys1").model_dump()
    data["pipeline"]["global_batch"] = 48
    with pytest.raises(ValidationError, match="2, but there are 4 devices"):
        HardwareProfile.model_validate(data)


def test_out_of_bounds_values_are_refused():
    with pytest.raises(ValidationError):
        DS2ModelSpec(conv_channels=0, lstm_layers=1, lstm_units=8)
    with pytest.raises(ValidationError, match="outside the 30 symbols"):
        DS2ModelSpec(conv_channels=8, lstm_layers=1, lstm_units=8, ctc_blank_index=30)
    with pytest.raises(ValidationError, match="repeat"):
        TTARule(targets=[{"metric": "cer", "value": 10}, {"metric": "cer", "value": 10}])


def test_output_frames_follow_the_valid_strided_convolution():
    model = DS2ModelSpec(conv_channels=8, lstm_layers=1, lstm_units=8)
    assert [model.output_frames(n) for n in (10, 11, 12, 13, 100)] == [0, 1, 1, 2, 45]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: [unclosed", "malformed YAML: line 1"),
        ("- a list", "expected a mapping"),
        ("name: x\ndevices: {kind: tpu, count: 1, model: m}", "devices.kind"),
    ],
)
def test_yaml_errors_are_one_line_and_name_the_source(text, message):
    with pytest.raises(InputError, match=message) as caught:
        load_spec_text(HardwareProfile, text, "hardware_profiles/x.yaml")
    assert str(caught.value).startswith("hardware_profiles/x.yaml: ")
    assert "\n" not in str(caught.value)


# --- model families and named optimizers --------------------------------------------------------------------------


def test_a_model_without_a_family_is_ds2_and_keeps_its_fields_when_written_back(registry):
    mini = registry.workload("ds2-mini")
    assert isinstance(mini.model, DS2ModelSpec) and mini.model.family == "ds2"
    dumped = mini.model_dump()
    assert dumped["model"]["lstm_units"] == mini.model.lstm_units and dumped["optimizer"]["rho"] == 0.95
    assert WorkloadSpec.model_validate(dumped) == mini


def test_the_family_picks_the_spec_class_and_an_unknown_family_is_named(registry):
    mini = registry.workload("ds2-mini").model_dump()
    rnnt = mini | {"model": {"family": "rnnt", "encoder_units": 16, "prediction_units": 8, "prediction_embedding": 8,
                             "joint_units": 8}}
    assert type(WorkloadSpec.model_validate(rnnt).model).__name__ == "RNNTModelSpec"
    with pytest.raises(ValidationError, match="model family 'wav2vec' is unknown"):
        WorkloadSpec.model_validate(mini | {"model": {"family": "wav2vec"}})
    with pytest.raises(ValidationError, match="lstm_units"):  # a DS2 field is not an RNN-T field
        WorkloadSpec.model_validate(rnnt | {"model": rnnt["model"] | {"lstm_units": 8}})


def test_a_family_refuses_a_decoder_that_cannot_read_its_outputs(registry):
    mini = registry.workload("ds2-mini").model_dump()
    rnnt = mini | {"model": {"family": "rnnt", "encoder_units": 16}}
    with pytest.raises(ValidationError, match="evaluation decoder word_beam cannot decode the rnnt family"):
        WorkloadSpec.model_validate(rnnt | {"evaluation": mini["evaluation"] | {"final_decoder": "word_beam"}})


def test_adamw_warms_up_holds_and_decays_to_its_floor():
    from benchbase.specs import AdamWSpec

    spec = AdamWSpec(learning_rate=1e-3, warmup_steps=4, hold_steps=2, decay_every_steps=10, decay_factor=0.5,
                     min_learning_rate=2e-4)
    rates = [spec.learning_rate_at(step) for step in range(40)]
    assert rates[:4] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3])
    assert rates[4:7] == pytest.approx([1e-3] * 3)
    assert rates[16] == pytest.approx(5e-4) and rates[26] == pytest.approx(2.5e-4)
    assert min(rates) == pytest.approx(2e-4) and rates[-1] == pytest.approx(2e-4)
    with pytest.raises(ValidationError, match="above learning_rate"):
        AdamWSpec(learning_rate=1e-3, min_learning_rate=1e-2)


def test_adamw_cosine_decay_is_optaxs_after_the_warm_up():
    from benchbase.specs import AdamWSpec

    optax = pytest.importorskip("optax")
    spec = AdamWSpec(learning_rate=2e-3, warmup_steps=5, hold_steps=3, decay="cosine", decay_steps=20,
                     min_learning_rate=1e-4)
    optax_cosine = optax.cosine_decay_schedule(2e-3, decay_steps=20, alpha=1e-4 / 2e-3)
    after_hold = [spec.learning_rate_at(5 + 3 + step) for step in range(30)]
    # optax computes in float32; the spec in float64.
    assert after_hold == pytest.approx([float(optax_cosine(step)) for step in range(30)], rel=1e-6)
    assert spec.learning_rate_at(5 + 3 + 10) == pytest.approx(1e-4 + (2e-3 - 1e-4) / 2)
    assert after_hold[20:] == [1e-4] * 10  # the floor after decay_steps
    assert [spec.learning_rate_at(step) for step in range(5, 9)] == [2e-3] * 4  # the hold


@pytest.mark.parametrize("fields, message", [
    ({"decay": "cosine"}, "a cosine decay needs decay_steps"),
    ({"decay": "cosine", "decay_steps": 10, "decay_factor": 0.5}, "decay_factor 0.5 belongs to the exponential"),
    ({"decay_steps": 10}, "decay_steps 10 belongs to the cosine decay"),
])
def test_adamw_refuses_a_field_its_decay_ignores(fields, message):
    from benchbase.specs import AdamWSpec

    with pytest.raises(ValidationError, match=message):
        AdamWSpec(learning_rate=1e-3, **fields)


def test_an_unknown_optimizer_is_named(registry):
    mini = registry.workload("ds2-mini").model_dump()
    with pytest.raises(ValidationError, match="optimizer 'lbfgs' is unknown"):
        WorkloadSpec.model_validate(mini | {"optimizer": {"name": "lbfgs"}})
