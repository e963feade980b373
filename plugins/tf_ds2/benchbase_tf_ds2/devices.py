"""The devices a plan names, as TensorFlow sees them: its GPUs, or the host CPU split into logical devices."""

from __future__ import annotations

import tensorflow as tf

from benchbase.errors import BenchbaseError

__all__ = ["check_gpus", "logical_cpus"]


def check_gpus(needed: int) -> None:
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        raise BenchbaseError("the hardware profile asks for CUDA, but TensorFlow sees no GPU; pass --device cpu")
    if len(gpus) < needed:
        raise BenchbaseError(f"the hardware profile names {needed} GPUs, but TensorFlow sees {len(gpus)}")


def logical_cpus(count: int) -> list[str]:
    """The first ``count`` logical CPU devices, the host CPU split into ``count`` if TensorFlow has not started.

    TensorFlow creates its devices at its first operation and never changes them afterwards.
    One device needs no split (a process that already has more uses the first). A second
    build in the same process (``--runs N``) asks for the same split again, which is allowed.
    """
    if count > 1:
        host = tf.config.list_physical_devices("CPU")[0]
        try:
            tf.config.set_logical_device_configuration(host, [tf.config.LogicalDeviceConfiguration()] * count)
        except RuntimeError:
            present = len(tf.config.list_logical_devices("CPU"))
            if present < count:
                raise BenchbaseError(
                    f"TensorFlow already fixed this process's CPU devices at {present} logical device(s) before "
                    f"the backend could split the CPU into {count}; run a {count}-device CPU plan in a fresh process"
                ) from None
    return [f"/cpu:{index}" for index in range(count)]
