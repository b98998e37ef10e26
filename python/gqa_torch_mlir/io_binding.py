"""onnxruntime's IO binding for :class:`~.session.InferenceSession`: inputs and outputs bound once, then run.

    binding = session.io_binding()
    binding.bind_cpu_input("query", query)        # read at each run: change its values in place
    binding.bind_cpu_input("past_key", key)       # with share_buffers: an array the session returned
    binding.bind_output("output")
    session.run_with_iobinding(binding)
    output = binding.get_outputs()[0]

As onnxruntime's, a bound array is read at every run, its values as they are
then; rebinding a name replaces its array.  On iree-cpu the call's arguments
are packed once per binding (backends/iree/bound_call.py), which is where a
generation loop's per-step cost goes down; on the other backends a bound run
is ``run`` with the bound arrays.

Differences from onnxruntime's ``IOBinding``: ``get_outputs`` returns numpy
arrays (there is no OrtValue), and outputs go to host memory only
(``bind_output(name)``, device ``cpu``).  ``bind_input`` (a raw pointer) and
``bind_ortvalue_input``/``bind_ortvalue_output`` are refused by name: bind the
array itself, a resident one (``share_buffers``) where it should stay on the
device.
"""

from __future__ import annotations

from typing import Dict, List

import numpy as np

from .errors import GqaTorchMlirError, RuntimeInvocationError

__all__ = ["IOBinding"]

_NOT_SUPPORTED = (
    "IOBinding.{what} is not supported by gqa-torch-mlir: bind_cpu_input(name, array) binds a numpy array "
    "(with share_buffers=True, an array the session returned stays on the device)"
)


class IOBinding:
    """The inputs and outputs of one session's bound runs (``InferenceSession.io_binding()``)."""

    def __init__(self, session) -> None:
        self.session = session
        self._inputs: Dict[str, object] = {}
        self._outputs: List[str] = []
        self._results: List[np.ndarray] = []
        self.call = None  # the backend's packed call of these inputs (iree-cpu), built at the first run
        self.picks = None  # per bound output: (result index, dtype, NodeArg), set by the session

    def bind_cpu_input(self, name: str, arr_on_cpu) -> None:
        """Bind input ``name`` to ``arr_on_cpu``, read at every run (checked here as ``run`` checks a feed)."""
        self._inputs[name] = self.session._bound_feed(name, arr_on_cpu)
        self.call = None

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0, element_type=None, shape=None,
                    buffer_ptr=None) -> None:
        """Have the runs return output ``name``, in host memory (a fresh array, or a resident cache's own)."""
        self.session._output_arg(name)
        for what, value, default in (("device_type", device_type, "cpu"), ("device_id", device_id, 0),
                                     ("element_type", element_type, None), ("shape", shape, None),
                                     ("buffer_ptr", buffer_ptr, None)):
            if value != default:
                raise GqaTorchMlirError(f"bind_output('{name}'): {what}={value!r} is not supported; outputs go to host "
                                        f"memory as the session allocates them ({what} left at {default!r})")
        if name not in self._outputs:
            self._outputs.append(name)
            self.picks = None

    def bind_input(self, name: str, *args, **kwargs) -> None:
        raise GqaTorchMlirError(_NOT_SUPPORTED.format(what=f"bind_input('{name}', ...) (a device pointer)"))

    def bind_ortvalue_input(self, name: str, ortvalue) -> None:
        raise GqaTorchMlirError(_NOT_SUPPORTED.format(what=f"bind_ortvalue_input('{name}', ...)"))

    def bind_ortvalue_output(self, name: str, ortvalue) -> None:
        raise GqaTorchMlirError(_NOT_SUPPORTED.format(what=f"bind_ortvalue_output('{name}', ...)"))

    def clear_binding_inputs(self) -> None:
        self._inputs = {}
        self.call = None

    def clear_binding_outputs(self) -> None:
        self._outputs = []
        self.picks = None

    def synchronize_inputs(self) -> None:
        """Nothing to wait for: a bound array is read when the run starts."""

    def synchronize_outputs(self) -> None:
        """Nothing to wait for: a run returns once its outputs are written."""

    def get_outputs(self) -> List[np.ndarray]:
        """The last run's outputs, in the order they were bound (numpy arrays, not OrtValues)."""
        return list(self._results)

    def copy_outputs_to_cpu(self) -> List[np.ndarray]:
        """Copies of the last run's outputs."""
        return [np.array(r) for r in self._results]

    def arguments(self, inputs) -> List[object]:
        """The bound arrays in the order of the session's ``inputs``; a missing one is named."""
        missing = [a.name for a in inputs if a.name not in self._inputs]
        if missing:
            raise RuntimeInvocationError(f"run_with_iobinding: input(s) not bound: {', '.join(missing)} (bind_cpu_input)")
        return [self._inputs[a.name] for a in inputs]

    def output_names(self) -> List[str]:
        if not self._outputs:
            raise RuntimeInvocationError("run_with_iobinding: no output bound (bind_output(name) for each output wanted)")
        return list(self._outputs)

    def set_results(self, results: List[np.ndarray]) -> None:
        self._results = results
