"""How many roundings a framework's exp, log, sigmoid and tanh cost on a device, against float64.

The error model (``benchbase.numerics.tolerances``) counts each vector function as
``ELEMENTWISE_ULPS`` roundings: a relative error of at most ELEMENTWISE_ULPS * u, u = 2^-24. That
number is quoted from the vector libraries' documentation (SLEEF, oneDNN, XLA's polynomials); this
script measures it, per framework and device, on every float32 in a sweep of the functions' working
range, in two places:

- **standalone**: the framework's own function on a device tensor (``torch.tanh``, ``jnp.tanh``
  under ``jax.jit``, ``tf.math.tanh``);
- **inside the LSTM kernel** (torch's ``nn.LSTM``: cuDNN's on a GPU, oneDNN's or ATen's on a CPU),
  which evaluates its gates with functions of its own. One step of a one-unit LSTM from a zero
  state, with the input weight 1 on one gate and the other gates pinned by biases of 20 (sigmoid(20)
  and tanh(20) are 1 in float32), isolates each: the cell state is sigmoid(x) with the input gate
  swept, tanh(x) with the candidate gate swept; the output is tanh(cell state).

The result is the largest relative error in units of u over the sweep, where it is, its 99.9th
percentile and its mean signed value (a bias: errors of one sign add up along an LSTM's frames
instead of cancelling, which the error model's random signs do not model).

    python benchmarks/elementwise_ulps.py --frameworks torch,jax,tf --device cpu --out OUT.json
    python3 benchmarks/elementwise_ulps.py --frameworks torch,jax --device cuda   # on a GPU
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # benchbase from this checkout, when run as a script

from benchbase.atomic import atomic_write_text  # noqa: E402
from benchbase.numerics.tolerances import ELEMENTWISE_ULPS, FLOAT32_UNIT_ROUNDOFF  # noqa: E402

SWEEP_POINTS = 1 << 18
PINNED = 20.0
"""A gate's bias that saturates it: sigmoid(20) = 1 - 2.1e-9 and tanh(20) = 1 - 8.5e-18 round to 1."""


def sweeps() -> dict[str, np.ndarray]:
    """float32 inputs per function's domain: where an LSTM's gates and a log-softmax work."""
    symmetric = np.linspace(-16, 16, SWEEP_POINTS, dtype=np.float32)
    near_zero = np.geomspace(1e-6, 1, SWEEP_POINTS // 4, dtype=np.float32)
    gates = np.unique(np.concatenate([symmetric, near_zero, -near_zero]))
    return {"sigmoid": gates, "tanh": gates, "exp": np.linspace(-80, 80, SWEEP_POINTS, dtype=np.float32),
            "log": np.geomspace(1e-30, 1e30, SWEEP_POINTS, dtype=np.float32)}


EXACT: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "tanh": np.tanh, "exp": np.exp, "log": np.log}
"""float64, whose own error (about 1e-16) is 1e-9 of float32's u."""


def roundings(name: str, x: np.ndarray, found: np.ndarray) -> dict[str, float]:
    """Relative error of ``found`` against float64 in units of u, summarized."""
    exact = EXACT[name](x.astype(np.float64))
    found = np.asarray(found, np.float64)
    normal = np.abs(exact) >= np.finfo(np.float32).tiny  # below it float32 has no relative precision
    relative = (found[normal] - exact[normal]) / np.abs(exact[normal]) / FLOAT32_UNIT_ROUNDOFF
    worst = int(np.argmax(np.abs(relative)))
    spacing = np.spacing(np.abs(exact[normal]).astype(np.float32)).astype(np.float64)  # an ulp: u to 2u relative
    return {"max": round(float(np.abs(relative[worst])), 3), "at": float(x[normal][worst]),
            "max_ulps": round(float(np.max(np.abs(found[normal] - exact[normal]) / spacing)), 3),
            "p99.9": round(float(np.quantile(np.abs(relative), 0.999)), 3),
            "mean_signed": round(float(relative.mean()), 4), "points": int(normal.sum())}


def torch_results(device: str) -> dict[str, dict[str, float]]:
    import torch

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    results = {}
    for name, x in sweeps().items():
        function = getattr(torch, name)
        results[f"torch.{name}"] = roundings(name, x, function(torch.from_numpy(x).to(device)).cpu().numpy())
    gates = sweeps()["sigmoid"]
    cell_sigmoid, output_tanh = _torch_lstm_step(gates, swept_gate=0, device=device)
    cell_tanh, _ = _torch_lstm_step(gates, swept_gate=2, device=device)
    results["nn.LSTM sigmoid (input gate)"] = roundings("sigmoid", gates, cell_sigmoid)
    results["nn.LSTM tanh (candidate)"] = roundings("tanh", gates, cell_tanh)
    results["nn.LSTM tanh (of the cell)"] = roundings("tanh", cell_sigmoid.astype(np.float32), output_tanh)
    return results


def _torch_lstm_step(x: np.ndarray, swept_gate: int, device: str) -> tuple[np.ndarray, np.ndarray]:
    """(cell state, output) of one step of a one-unit LSTM whose gate ``swept_gate`` (torch's order:
    input, forget, candidate, output) sees x and whose others are pinned at 20."""
    import torch

    lstm = torch.nn.LSTM(input_size=1, hidden_size=1).to(device)
    with torch.no_grad():
        lstm.weight_ih_l0.zero_()
        lstm.weight_hh_l0.zero_()
        lstm.bias_hh_l0.zero_()
        lstm.weight_ih_l0[swept_gate, 0] = 1.0
        lstm.bias_ih_l0.fill_(PINNED)
        lstm.bias_ih_l0[swept_gate] = 0.0
        lstm.bias_ih_l0[1] = -PINNED  # the forget gate: it meets a zero cell state anyway
        inputs = torch.from_numpy(x).to(device).reshape(1, -1, 1)  # one frame, a batch of the sweep
        output, (_, cell) = lstm(inputs)
    return cell.reshape(-1).cpu().numpy(), output.reshape(-1).cpu().numpy()


def jax_results(device: str) -> dict[str, dict[str, float]]:
    import jax
    import jax.numpy as jnp

    target = jax.devices("gpu" if device == "cuda" else "cpu")[0]
    functions = {"sigmoid": jax.nn.sigmoid, "tanh": jnp.tanh, "exp": jnp.exp, "log": jnp.log}
    results = {}
    for name, x in sweeps().items():
        found = jax.jit(functions[name])(jax.device_put(x, target))
        results[f"jax.{name} (jit)"] = roundings(name, x, np.asarray(found))
    return results


def tf_results(device: str) -> dict[str, dict[str, float]]:
    import tensorflow as tf

    functions = {"sigmoid": tf.math.sigmoid, "tanh": tf.math.tanh, "exp": tf.math.exp, "log": tf.math.log}
    results = {}
    with tf.device("/GPU:0" if device == "cuda" else "/CPU:0"):
        for name, x in sweeps().items():
            results[f"tf.math.{name}"] = roundings(name, x, functions[name](tf.constant(x)).numpy())
        gates = sweeps()["sigmoid"]
        results["BlockLSTMV2 sigmoid (input gate)"] = roundings("sigmoid", gates, _tf_block_lstm(gates, 0)["i"])
        results["BlockLSTMV2 tanh (candidate)"] = roundings("tanh", gates, _tf_block_lstm(gates, 2)["ci"])
    return results


def _tf_block_lstm(x: np.ndarray, swept_gate: int) -> dict[str, np.ndarray]:
    """The gates of one step of TensorFlow's fused BlockLSTMV2 (the tf backend's LSTM; gate order
    input, forget, candidate, output) for a one-unit LSTM whose gate ``swept_gate`` sees x: the
    kernel returns each gate after its function."""
    import tensorflow as tf

    weights = np.zeros((2, 4), np.float32)  # [input; hidden] x 4 gates
    weights[0, swept_gate] = 1.0
    bias = np.zeros(4, np.float32)
    batch = len(x)
    zeros = tf.zeros([batch, 1])
    peephole = tf.zeros([1])
    outputs = tf.raw_ops.BlockLSTMV2(seq_len_max=tf.constant(1, tf.int64), x=tf.constant(x.reshape(1, -1, 1)),
                                     cs_prev=zeros, h_prev=zeros, w=tf.constant(weights), wci=peephole,
                                     wcf=peephole, wco=peephole, b=tf.constant(bias), cell_clip=-1.0,
                                     use_peephole=False)
    return {name: value.numpy().reshape(-1) for name, value in zip(("i", "cs", "f", "o", "ci", "co", "h"), outputs)}


FRAMEWORKS = {"torch": torch_results, "jax": jax_results, "tf": tf_results}


def table(results: dict[str, dict[str, dict[str, float]]]) -> str:
    lines = ["| framework | function | max error / u | at x | p99.9 | mean signed | max ulps "
             "| within ELEMENTWISE_ULPS |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for framework, functions in results.items():
        for function, r in functions.items():
            verdict = "yes" if r["max"] <= ELEMENTWISE_ULPS else f"no ({r['max'] / ELEMENTWISE_ULPS:.2f}x)"
            lines.append(f"| {framework} | {function} | {r['max']:.3g} | {r['at']:.6g} | {r['p99.9']:.3g} | "
                         f"{r['mean_signed']:+.3g} | {r['max_ulps']:.3g} | {verdict} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frameworks", default="torch,jax", help="comma-separated: torch, jax, tf")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = parser.parse_args()
    unknown = sorted(set(args.frameworks.split(",")) - set(FRAMEWORKS))
    if unknown:
        parser.error(f"unknown framework(s) {', '.join(unknown)}; choose from {', '.join(FRAMEWORKS)}")
    results = {framework: FRAMEWORKS[framework](args.device) for framework in args.frameworks.split(",")}
    print(f"{platform.processor() or platform.machine()}, device {args.device}; ELEMENTWISE_ULPS = {ELEMENTWISE_ULPS}")
    print(table(results))
    if args.out:
        atomic_write_text(args.out, json.dumps({"device": args.device, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
