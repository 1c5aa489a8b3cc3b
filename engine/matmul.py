"""The engine's one matmul seam: every projection ``x @ W.T`` goes through a :class:`Matmul`.

A :class:`Matmul` is built once per weight matrix at load time and called with activations
``[T, n_in]`` -> ``[T, n_out]`` (float32). Backends (choose with ``--backend``; see
:data:`BACKENDS`):

- ``numpy``: ``x @ W.T`` on NumPy's BLAS (OpenBLAS). Always available. Exact float32.
- ``ort``: onnxruntime's ``MatMul`` (MLAS sgemm), one inference session per matrix (a call from
  Python costs ~10 us; a decode step of SmolLM2 makes 121). Exact float32: same products, only
  the summation order differs, so it meets the differential tests' float32 tolerance. MLAS's
  skinny kernels make a k-row pass cost nearly a 1-row pass, which OpenBLAS does not (bench).
- ``ort-q``: the quantized mode. onnxruntime's ``MatMulNBits`` (contrib op) on the file's own
  weight blocks, repacked losslessly (:mod:`engine.blocks`), ``accuracy_level=4``: activations
  quantized to int8 per block, integer dot products, float32 scales -- llama.cpp-class numerics
  (llama.cpp quantizes activations to Q8 blocks too). Its own target law: not the reference's
  float32 function; compared with it the way llama.cpp is (NMSE, top-1 where the margin is clear).
  Blocks with a minimum add ``min * sum(int8-rounded x over the block)`` (a second small matmul
  in the same session, the sums computed by the kernel itself): ``MatMulNBits`` takes a float
  zero point only without int8 compute.
  The int8 mode's layers use these nodes inside one graph between two attentions (:mod:`engine.fused`,
  :class:`OrtGraph`), run through onnxruntime's IO binding (:meth:`OrtGraph.run_bound`: outputs in
  buffers each graph owns and reuses; ``VERISPEC_INT8_BIND``); the head and the per-matrix path use
  one session per matrix.

Threads: ``VERISPEC_THREADS`` (default 2, capped at the core count), one pool shared by every
session of the process (engine/ort_pool.py: the first session fixes its size). Measured on the
idle 2-core VM, int8, shared pool: 2 threads take 0.80-0.86x the time of 1 on a SmolLM2 step; with
per-session pools (before) 2 threads gained nothing (1.0-1.1x), and under load (average ~11) the
per-session pools measured 0.56x / 0.34x (1 / 5 rows) on f32/ort. `verispec bench` reports it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
from collections.abc import Callable
from functools import cache, partial
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from verispec.engine.blocks import KernelBlocks
from verispec.engine.ort_pool import session_options
from verispec.engine.pages import drop_folder_pages, libc
from verispec.reference.errors import BackendUnavailable as BackendUnavailable
from verispec.reference.errors import ModelError

F32 = npt.NDArray[np.float32]

BACKENDS: tuple[str, ...] = ("numpy", "ort", "ort-q")
EXACT_BACKENDS: tuple[str, ...] = ("numpy", "ort")
ACCURACY_INT8 = 4  # MatMulNBits accuracy_level: int8 activations, int32 accumulation
RowMode = Literal["native", "pad-single-row", "row-by-row"]  # OrtGraph._probe_row_mode


class Matmul(Protocol):
    """``x [T, n_in] -> x @ W.T [T, n_out]`` for one weight matrix ``W [n_out, n_in]``."""

    n_out: int
    n_in: int

    def __call__(self, x: F32) -> F32: ...


def ort_available() -> bool:
    """onnxruntime and onnx (to build the graphs) are installed. Found, not imported: the two weigh
    ~50 MiB resident once imported, and a load whose every kernel is native (the tile kernels)
    imports neither; the sites that build or run a graph import them when they do."""
    return all(_installed(name) for name in ("onnx", "onnxruntime"))


def _installed(name: str) -> bool:
    """``name`` can be imported: already imported, or its top-level spec found (a module set to None
    in ``sys.modules`` is one an import refuses)."""
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


DEFAULT_THREADS = 2  # measured (bench "threads_2_over_1"), see the module docstring


def default_threads() -> int:
    """Threads per matmul: ``VERISPEC_THREADS``, else :data:`DEFAULT_THREADS` capped at the cores."""
    text = os.environ.get("VERISPEC_THREADS", str(min(DEFAULT_THREADS, os.cpu_count() or 1)))
    try:
        threads = int(text)
    except ValueError:
        raise ModelError(f"VERISPEC_THREADS={text!r} is not an integer") from None
    if not 1 <= threads <= 256:
        raise ModelError(f"VERISPEC_THREADS={threads} is outside 1..256")
    return threads


class NumpyMatmul:
    """``x @ W.T`` on NumPy (W kept ``[n_out, n_in]``, the GGUF layout)."""

    def __init__(self, w: F32) -> None:
        self.w = np.ascontiguousarray(w, dtype=np.float32)  # [n_out, n_in]
        self.n_out, self.n_in = int(w.shape[0]), int(w.shape[1])

    def __call__(self, x: F32) -> F32:
        return np.asarray(x @ self.w.T, dtype=np.float32)


INLINE_BYTES = 4096  # initializers smaller than this stay in the graph (shape inference reads them)
# A graph whose initializers reach this size hands their freed heap back before its session packs
# them (a load's peak: measured -7 MiB on SmolLM2, -11 MiB on Gemma 3, at the head's 8192-row chunks);
# smaller graphs do not pay the trim (~1.3 ms a call on a loaded model's heap).
RELEASE_BEFORE_SESSION_BYTES = 4 << 20


class OrtGraph:
    """One onnxruntime session over a graph of named float32 inputs and outputs (dynamic row count).

    The weights reach onnxruntime as external data in a temporary file, never inside the graph
    proto: an in-proto initializer is held twice (the parsed graph's copy and the session's), and
    the kernels prepack it a third time. From a file, onnxruntime maps the bytes, prepacks them
    and drops the mapping of what it prepacked (a documented path: no buffer of ours must outlive
    the call). Measured on SmolLM2's gate/up (1.3 MiB of kernel blocks): 3.1 MiB resident per
    session from the proto, 1.9 MiB from the file (the prepacked copy alone). On x86 onnxruntime
    keeps ``MatMulNBits``' scales and zero points mapped after copying them into its packed buffer,
    and never reads them again: their pages are handed back (:func:`engine.pages.drop_folder_pages`;
    measured 19 MiB of SmolLM2's steady RSS, ~40 MiB of Gemma 3's). The files are deleted once the
    session exists.

    ``inputs`` / ``outputs``: name -> shape (a str entry is a symbolic size, e.g. ``"T"``).
    ``initializers`` is emptied once its arrays are written to the file: where the caller holds
    no other reference, they are freed before onnxruntime makes its copies (a load's peak).
    Inputs are float32 but for the names in ``bool_inputs`` (bool, e.g. a per-row switch).
    :attr:`calls` counts the onnxruntime runs of every graph of the process (what a step makes:
    ``verispec bench`` reports it).
    """

    calls = 0  # onnxruntime runs of every OrtGraph in this process (a counter, never reset here)

    def __init__(
        self,
        nodes: list[Any],
        initializers: dict[str, npt.NDArray[Any]],
        inputs: dict[str, list[int | str]],
        outputs: dict[str, list[int | str]],
        threads: int,
        bool_inputs: tuple[str, ...] = (),
    ) -> None:
        import tempfile

        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper

        with tempfile.TemporaryDirectory(prefix="verispec-ort-", ignore_cleanup_errors=True) as folder:
            written = sum(int(array.nbytes) for array in initializers.values())
            tensors = _external_initializers(initializers, os.path.join(folder, "weights.bin"))
            initializers.clear()  # written: the arrays need not live while the session copies them
            if written >= RELEASE_BEFORE_SESSION_BYTES:  # ... nor stay in the heap beside its packed copy
                release_freed_memory()
            graph = helper.make_graph(
                nodes,
                "verispec",
                [
                    helper.make_tensor_value_info(n, TensorProto.BOOL if n in bool_inputs else TensorProto.FLOAT, shape)
                    for n, shape in inputs.items()
                ],
                [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n, shape in outputs.items()],
                tensors,
            )
            model = helper.make_model(
                graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
            )
            model_path = os.path.join(folder, "model.onnx")
            onnx.save(model, model_path)
            del model, graph, tensors
            options = session_options(threads)
            self.session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
            drop_folder_pages(folder)  # the mapped scales / zero points it keeps but never reads
        self.input_names = tuple(inputs)
        self.output_names = tuple(outputs)
        # each input's dtype: float32, or bool for the names in ``bool_inputs`` (a per-row switch)
        self._dtypes = tuple(np.dtype(np.bool_) if n in bool_inputs else np.dtype(np.float32) for n in inputs)
        self._output_list = list(outputs)
        # The binding's own run (what InferenceSession.run calls after validating the feed names,
        # which ours are by construction): ~2 us less per call, 61 calls a SmolLM2 step (measured);
        # the public run where a version lacks it.
        inner = getattr(self.session, "_sess", None)
        self._run: Any = inner.run if inner is not None and hasattr(inner, "run") else self.session.run
        self._input_shapes = tuple(tuple(shape) for shape in inputs.values())
        self._output_shapes = tuple(tuple(shape) for shape in outputs.values())
        # bound runs need every shape to be the row axis and fixed sizes (buffers of known size)
        self._bindable = all(
            len(shape) > 0 and all(isinstance(n, int) for n in shape[1:]) for shape in self._output_shapes
        ) and all(len(shape) > 0 for shape in self._input_shapes)
        self._bindings: dict[int, _RowBinding] = {}  # row count -> its binding (:meth:`run_bound`)
        # the bound buffers, shared by every row count's binding (each binds its leading rows):
        # grown to the most rows a bound call has had, so memory is one call's worth, not one per count
        self._capacity = 0
        self._output_store: list[F32] = []
        self._input_store: list[npt.NDArray[Any]] = []
        self._stacked_store: list[F32] = []  # row-by-row mode: the gathered rows
        # the one thread whose calls use the buffers (the first to make a bound call): a buffer is
        # one call's output until the caller is done with it, so two threads calling at once (a model
        # shared between threads) must not share them; other threads run unbound
        self._owner: int | None = None
        self.row_mode: RowMode = "native"
        if any(node.op_type == "MatMulNBits" for node in nodes):
            self.row_mode = self._probe_row_mode({n: s for n, s in inputs.items()})

    def run(self, *arrays: npt.NDArray[Any]) -> list[F32]:
        """The outputs, in the order of ``outputs``, for the inputs in the order of ``inputs``.

        Every input and output has the row axis first, and each row's outputs depend only on that
        row's inputs; :attr:`row_mode` makes the value of a row independent of how many rows the
        call carries (see :meth:`_probe_row_mode`)."""
        feeds = [np.ascontiguousarray(a, dtype=t) for a, t in zip(arrays, self._dtypes)]
        rows = int(feeds[0].shape[0]) if feeds else 0
        if self.row_mode == "pad-single-row" and rows == 1:
            doubled = self._raw([np.concatenate([a, a]) for a in feeds])
            return [out[:1] for out in doubled]
        if self.row_mode == "row-by-row" and rows > 1:
            parts = [self._raw([a[i : i + 1] for a in feeds]) for i in range(rows)]
            return [np.concatenate([part[j] for part in parts]) for j in range(len(self._output_list))]
        return self._raw(feeds)

    def run_bound(self, *arrays: npt.NDArray[Any]) -> list[F32]:
        """:meth:`run` through onnxruntime's IO binding: the same values, bit for bit (the same
        session, the same row mode), written into output buffers this graph owns, sized for the
        most rows a call has had (up to :data:`BIND_MAX_ROWS`: a decode step's and a verify
        pass's), each row count binding their leading rows, and reused by every later call: no
        output allocation a call. An input is copied into a bound buffer of its own, except an
        array passed again as the same object (another graph's output buffer: the layer chain's
        hidden state), which is bound where it lies (:class:`_RowBinding`).

        The returned arrays ARE those buffers: the next ``run_bound`` of this graph (any row count)
        overwrites them. A caller that keeps a result past that (a KV cache write, logits for the
        sampler, a hidden state kept for a later pass) copies it. More rows than
        :data:`BIND_MAX_ROWS` (a prefill) run as :meth:`run` (fresh arrays: no buffer held for the
        length of a prompt)."""
        if self._owner != threading.get_ident() and not self._claim():
            return self.run(*arrays)  # another thread owns the buffers: fresh arrays, as run gives
        rows = arrays[0].shape[0] if arrays else 0
        mode = self.row_mode
        if mode == "native" or (mode == "pad-single-row" and rows > 1) or (mode == "row-by-row" and rows == 1):
            binding = self._bindings.get(rows)
            if binding is not None:
                return binding.run(arrays)
        if not 1 <= rows <= BIND_MAX_ROWS or not self._bindable:
            return self.run(*arrays)
        if mode == "pad-single-row" and rows == 1:
            return self._padded_single_row(arrays)
        if mode == "row-by-row" and rows > 1:
            return self._row_by_row_bound(arrays, rows)
        return self._binding(rows).run(arrays)

    def _claim(self) -> bool:
        """Whether the calling thread owns the bound buffers, claiming them if no thread has."""
        with _OWNER_LOCK:
            if self._owner is None:
                self._owner = threading.get_ident()
            return self._owner == threading.get_ident()

    def _binding(self, rows: int, padded_from_one: bool = False) -> _RowBinding:
        key = -rows if padded_from_one else rows
        binding = self._bindings.get(key)
        if binding is None:
            if rows > self._capacity:  # grow the buffers; every binding of the old ones is dropped
                self._grow(rows)
            binding = self._bindings[key] = _RowBinding(self, rows)
        return binding

    def _grow(self, rows: int) -> None:
        self._bindings.clear()
        self._capacity = rows
        self._output_store = [
            np.empty([rows, *shape[1:]], dtype=np.float32)  # type: ignore[list-item]
            for shape in self._output_shapes
        ]
        self._input_store = [
            np.zeros([rows, *shape[1:]], dtype=t)  # type: ignore[list-item]
            for shape, t in zip(self._input_shapes, self._dtypes)
        ]

    def _padded_single_row(self, arrays: tuple[npt.NDArray[Any], ...]) -> list[F32]:
        """A 1-row call as 2 identical rows (the ``pad-single-row`` mode), in buffers of its own:
        the row is copied into both rows of bound input buffers; the outputs' first rows return."""
        binding = self._binding(2, padded_from_one=True)
        for buffer, array in zip(binding.own_inputs, arrays):
            row = np.asarray(array)
            if row.shape != buffer.shape[1:] and row.shape != (1, *buffer.shape[1:]):
                raise ModelError(f"input of shape {row.shape} where a row of {buffer.shape[1:]} is expected")
            buffer[0] = row.reshape(buffer.shape[1:])
            buffer[1] = buffer[0]
        binding.run_own()
        return binding.first_rows

    def _row_by_row_bound(self, arrays: tuple[npt.NDArray[Any], ...], rows: int) -> list[F32]:
        """A k-row call as k 1-row calls (the ``row-by-row`` mode), gathered into k-row buffers."""
        if not self._stacked_store or self._stacked_store[0].shape[0] < rows:
            self._stacked_store = [
                np.empty([rows, *shape[1:]], dtype=np.float32)  # type: ignore[list-item]
                for shape in self._output_shapes
            ]
        stacked = [store[:rows] for store in self._stacked_store]
        for i in range(rows):
            for out, part in zip(stacked, self.run_bound(*(a[i : i + 1] for a in arrays))):
                out[i] = part[0]
        return stacked

    def _raw(self, feeds: list[npt.NDArray[Any]]) -> list[F32]:
        OrtGraph.calls += 1
        named = dict(zip(self.input_names, feeds))
        return self._run(self._output_list, named, None)  # type: ignore[no-any-return]

    def _probe_row_mode(self, inputs: dict[str, list[int | str]]) -> RowMode:
        """How to call this graph so that a row's value does not depend on the call's row count.

        MLAS's ``MatMulNBits`` runs a 1-row call through its own matrix-vector kernel on some
        (CPU, bit width) pairs, which rounds differently from its k-row kernel: seen on AVX2 for
        4-bit blocks (every output differs in the last bits), never on AVX-512 VNNI. The engine's
        contract (a k-row verify pass gives each row what a 1-row pass gives, so speculation keeps
        the int8 mode's law) must hold on every machine, so it is measured here, on this graph,
        with random rows: ``native`` when 1-row and 3-row calls agree; else ``pad-single-row``
        (a 1-row call runs as 2 identical rows, through the k-row kernel) when that agrees with
        the 3-row call; else ``row-by-row`` (every call is made of 1-row calls).
        """
        rng = np.random.default_rng(0)
        normal = [rng.standard_normal([3 if isinstance(n, str) else n for n in shape]) for shape in inputs.values()]
        probe: list[npt.NDArray[Any]] = [a > 0 if t == np.bool_ else a.astype(t) for a, t in zip(normal, self._dtypes)]
        three = self._raw(probe)
        one = self._raw([a[:1] for a in probe])
        if all(np.array_equal(o, t[:1]) for o, t in zip(one, three)):
            return "native"
        padded = self._raw([np.concatenate([a[:1], a[:1]]) for a in probe])
        if all(np.array_equal(p[:1], t[:1]) for p, t in zip(padded, three)):
            return "pad-single-row"
        return "row-by-row"


_OWNER_LOCK = threading.Lock()  # the first bound call of a graph claims its buffers under this lock
BIND_MAX_ROWS = 16  # row counts up to this get bound buffers (:meth:`OrtGraph.run_bound`); more run unbound
BIND_BY_DEFAULT = True  # measured: lab/measurements/int8_io_binding_1thread.json
BIND_ENV = "VERISPEC_INT8_BIND"


def io_binding_default() -> bool:
    """Whether the int8 mode's fused graphs run through IO binding (:meth:`OrtGraph.run_bound`):
    ``VERISPEC_INT8_BIND`` (1 / 0), else :data:`BIND_BY_DEFAULT`; ModelError for another value."""
    return env_switch(BIND_ENV, BIND_BY_DEFAULT)


def env_switch(name: str, default: bool) -> bool:
    """A 1 / 0 switch from the environment variable ``name``: unset or empty gives ``default``;
    ModelError for any other value."""
    text = os.environ.get(name)
    if text is None or text == "":
        return default
    if text not in ("0", "1"):
        raise ModelError(f"{name}={text!r} is not 0 or 1")
    return text == "1"


class _RowBinding:
    """One graph's IO binding for one row count: every output bound once to the leading ``rows``
    rows of the graph's output buffers (shared by its row counts' bindings).

    Each input has a buffer of its own too (the leading rows of the graph's input buffers), bound
    at first. A call's array is copied into it
    (a few hundred floats: cheaper than binding onnxruntime to a new address, measured ~4 us a
    bind); an array passed again as the same object (another graph's output buffer: the layer
    chain's hidden state, or a constant) is bound where it lies instead, once, and stays bound
    while the calls keep passing that object (held here, so its address stays valid): no copy.
    ``own_inputs``: the caller fills the own buffers itself and calls :meth:`run_own` (the
    pad-single-row mode's doubled row)."""

    def __init__(self, graph: OrtGraph, rows: int) -> None:
        session = graph.session
        self.binding = session.io_binding()
        inner = getattr(session, "_sess", None)
        # the binding's own run, as for :meth:`OrtGraph._raw` (the public one where a version lacks it)
        if inner is not None and hasattr(inner, "run_with_iobinding"):
            self._run: Callable[[], Any] = partial(inner.run_with_iobinding, self.binding._iobinding, None)
        else:
            self._run = partial(session.run_with_iobinding, self.binding)
        self.names = graph.input_names
        self.outputs: list[F32] = [store[:rows] for store in graph._output_store]
        for name, buffer in zip(graph.output_names, self.outputs):
            self.binding.bind_output(name, "cpu", 0, np.float32, list(buffer.shape), buffer.ctypes.data)
        self.first_rows = [buffer[:1] for buffer in self.outputs]
        self.own_inputs: list[npt.NDArray[Any]] = [store[:rows] for store in graph._input_store]
        self.bound: list[npt.NDArray[Any]] = []  # what each input is bound to: its own buffer or a caller's array
        for i, own in enumerate(self.own_inputs):
            self._bind_input(i, own)
            self.bound.append(own)
        self.seen: list[npt.NDArray[Any] | None] = [None] * len(self.own_inputs)  # each input's last array

    def _bind_input(self, i: int, array: npt.NDArray[Any]) -> None:
        self.binding.bind_input(self.names[i], "cpu", 0, array.dtype, list(array.shape), array.ctypes.data)

    def run(self, arrays: tuple[npt.NDArray[Any], ...]) -> list[F32]:
        """The outputs (this binding's buffers) for ``arrays`` (this row count, the graph's inputs)."""
        if len(arrays) != len(self.bound):
            raise ModelError(f"{len(arrays)} inputs where the graph takes {len(self.bound)}")
        for i, array in enumerate(arrays):
            if array is self.bound[i]:
                continue  # bound where it lies, and still the same object: nothing to do
            own = self.own_inputs[i]
            if array.shape != own.shape:
                raise ModelError(f"input {self.names[i]!r} has shape {array.shape}, the graph takes {own.shape}")
            if (
                array is self.seen[i]
                and array.dtype == own.dtype
                and array.flags.c_contiguous
                and not any(np.may_share_memory(array, out) for out in self.outputs)  # never read what it writes
            ):
                self._bind_input(i, array)  # passed twice: a buffer or a constant, bound in place from now on
                self.bound[i] = array
                continue
            np.copyto(own, array)
            if self.bound[i] is not own:
                self._bind_input(i, own)
                self.bound[i] = own
            self.seen[i] = array
        return self.run_own()

    def run_own(self) -> list[F32]:
        """Run on what is bound; the outputs (this binding's buffers)."""
        OrtGraph.calls += 1
        self._run()
        return self.outputs


class _OrtSession(OrtGraph):
    """A one-matrix graph ``A [T, n_in] -> Y [T, n_out]`` (a :class:`Matmul`)."""

    def __init__(
        self, nodes: list[Any], initializers: dict[str, npt.NDArray[Any]], n_in: int, n_out: int, threads: int
    ) -> None:
        super().__init__(nodes, initializers, {"A": ["T", n_in]}, {"Y": ["T", n_out]}, threads)
        self.n_in, self.n_out = n_in, n_out

    def __call__(self, x: F32) -> F32:
        return np.asarray(self.run(x)[0], dtype=np.float32)


_ONNX_TYPES = {np.dtype(np.uint8): 2, np.dtype(np.float32): 1, np.dtype(np.int64): 7}  # TensorProto enums
_PAGE = 4096


def _external_initializers(arrays: dict[str, npt.NDArray[Any]], path: str) -> list[Any]:
    """Write the large ``arrays`` to ``path`` (page-aligned, so onnxruntime can map them) and return
    TensorProtos: external references for those, inline tensors for the small ones."""
    from onnx import TensorProto, numpy_helper

    tensors: list[Any] = []
    offset = 0
    with open(path, "wb") as out:
        for name, array in arrays.items():
            array = np.ascontiguousarray(array)
            if array.nbytes < INLINE_BYTES:
                tensors.append(numpy_helper.from_array(array, name))
                continue
            pad = -offset % _PAGE
            out.write(b"\0" * pad)
            offset += pad
            proto = TensorProto()
            proto.name = name
            proto.data_type = _ONNX_TYPES[array.dtype]
            proto.dims.extend(int(n) for n in array.shape)
            proto.data_location = TensorProto.EXTERNAL
            for key, value in (
                ("location", os.path.basename(path)),
                ("offset", str(offset)),
                ("length", str(array.nbytes)),
            ):
                entry = proto.external_data.add()
                entry.key, entry.value = key, value
            out.flush()
            array.tofile(out)  # straight from the array: no bytes copy
            offset += array.nbytes
            tensors.append(proto)
    return tensors


def ort_f32(w: F32, threads: int) -> _OrtSession:
    """onnxruntime ``MatMul`` with ``W.T [n_in, n_out]`` as an initializer (prepacked by MLAS)."""
    nodes, inits = f32_nodes(w, "A", "Y")
    return _OrtSession(nodes, inits, int(w.shape[1]), int(w.shape[0]), threads)


def _pack_levels(blocks: KernelBlocks) -> npt.NDArray[np.uint8]:
    """Levels ``[N, K]`` -> MatMulNBits' B ``[N, K / block, block * bits / 8]`` (4-bit: element
    2j in the low nibble of byte j, 2j+1 in the high one)."""
    n, k = blocks.shape
    levels = blocks.levels.reshape(n, k // blocks.block, blocks.block)
    if blocks.bits == 8:
        return np.ascontiguousarray(levels)
    return np.ascontiguousarray(levels[..., 0::2] | (levels[..., 1::2] << np.uint8(4)))


def _pack_zeros(blocks: KernelBlocks) -> npt.NDArray[np.uint8]:
    """Zero points as MatMulNBits wants them: ``[N, ceil(n_blocks * bits / 8)]`` (4-bit: block 2j
    in the low nibble of byte j, 2j+1 in the high one; an odd last byte padded with 0)."""
    zeros = blocks.zeros  # [N, n_blocks]
    if blocks.bits == 8:
        return np.ascontiguousarray(zeros)
    if zeros.shape[1] % 2:
        zeros = np.concatenate([zeros, np.zeros((zeros.shape[0], 1), dtype=np.uint8)], axis=1)
    return np.ascontiguousarray(zeros[:, 0::2] | (zeros[:, 1::2] << np.uint8(4)))


def with_block_sums(blocks: KernelBlocks) -> KernelBlocks:
    """``blocks`` plus one row per input block ``b``: levels 1 on block b, scale 1 there and 0
    elsewhere, zero point 0. That row's output is the sum over block b of x as the kernel rounded
    it to int8, so ``min * that sum`` is the min term on the same rounded x (see ort_blocks)."""
    n, k = blocks.shape
    n_blocks = k // blocks.block
    ones = np.zeros((n_blocks, n_blocks, blocks.block), dtype=np.uint8)
    ones[np.arange(n_blocks), np.arange(n_blocks)] = 1
    return KernelBlocks(
        bits=blocks.bits,
        block=blocks.block,
        levels=np.concatenate([blocks.levels, ones.reshape(n_blocks, k)]),
        scales=np.concatenate([blocks.scales, np.eye(n_blocks, dtype=np.float32)]),
        zeros=np.concatenate([blocks.zeros, np.zeros((n_blocks, n_blocks), dtype=np.uint8)]),
        mins=None,
        source_types=blocks.source_types,
    )


def block_sum_columns(blocks: KernelBlocks) -> int:
    """Columns a ``wide`` :func:`blocks_nodes` output has past ``n_out``: one per input block
    when the blocks have mins (the block sums), else 0."""
    return 0 if blocks.mins is None else blocks.shape[1] // blocks.block


def blocks_nodes(
    blocks: KernelBlocks, x: str, y: str, prefix: str = "", *, wide: bool = False
) -> tuple[list[Any], dict[str, npt.NDArray[Any]]]:
    """Graph nodes and initializers for ``y = x @ W.T`` on lossless blocks: ``MatMulNBits`` (int8
    compute), plus the min term if any (initializer and intermediate names start with ``prefix``).
    ``wide``: ``y`` keeps the kernel's extra columns, ``[T, n_out + block_sum_columns]`` (the first
    n_out are ``x @ W.T``, the rest the block sums: for a consumer that splits ``y`` anyway, this
    saves copying the kernel's output once more).

    The min term: the kernel rounds x to int8 per block; ``min * sum(x)`` on the unrounded x would
    leave the level term's rounding error uncancelled (w = s q + m with q ~ 7.5 on average: 2-3x
    the error of the rounding itself, measured). So the block sums of the ROUNDED x come out of the
    kernel itself (:func:`with_block_sums`), and ``Y = Yq + sums @ mins.T`` is the dot product of
    the rounded x with the true weights, as llama.cpp's Q8_1 sums give it.
    """
    from onnx import helper

    n, k = blocks.shape
    kernel = blocks if blocks.mins is None else with_block_sums(blocks)
    n_kernel = kernel.shape[0]
    inits: dict[str, npt.NDArray[Any]] = {
        prefix + "B": _pack_levels(kernel),
        prefix + "S": kernel.scales.reshape(-1),
        prefix + "Z": _pack_zeros(kernel).reshape(-1),
    }
    out = y if blocks.mins is None else prefix + "Yx"
    nodes = [
        helper.make_node(
            "MatMulNBits",
            [x, prefix + "B", prefix + "S", prefix + "Z"],
            [out],
            domain="com.microsoft",
            K=k,
            N=n_kernel,
            bits=kernel.bits,
            block_size=kernel.block,
            accuracy_level=ACCURACY_INT8,
        )
    ]
    if blocks.mins is not None and wide:  # y = Yx + sums @ [mins.T | 0]: the same products
        inits[prefix + "from"] = np.array([n], dtype=np.int64)
        inits[prefix + "to"] = np.array([n_kernel], dtype=np.int64)
        inits[prefix + "axis"] = np.array([1], dtype=np.int64)
        pad = np.zeros((n_kernel - n, n_kernel - n), dtype=np.float32)
        inits[prefix + "M"] = np.ascontiguousarray(np.concatenate([blocks.mins.T, pad], axis=1))  # [nb, N + nb]
        nodes += [
            helper.make_node("Slice", [out, prefix + "from", prefix + "to", prefix + "axis"], [prefix + "Sums"]),
            helper.make_node("MatMul", [prefix + "Sums", prefix + "M"], [prefix + "Ym"]),  # [T, N + nb]
            helper.make_node("Add", [out, prefix + "Ym"], [y]),
        ]
    elif blocks.mins is not None:
        inits[prefix + "parts"] = np.array([n, n_kernel - n], dtype=np.int64)  # inline: Split's shape needs it
        inits[prefix + "M"] = np.ascontiguousarray(blocks.mins.T)  # [n_blocks, N]
        nodes += [
            helper.make_node(
                "Split", [out, prefix + "parts"], [prefix + "Yq", prefix + "Sums"], axis=1
            ),  # [T, N], [T, nb]
            helper.make_node("MatMul", [prefix + "Sums", prefix + "M"], [prefix + "Ym"]),  # [T, N]
            helper.make_node("Add", [prefix + "Yq", prefix + "Ym"], [y]),
        ]
    return nodes, inits


def f32_nodes(w: F32, x: str, y: str, prefix: str = "") -> tuple[list[Any], dict[str, npt.NDArray[Any]]]:
    """Graph nodes and initializers for ``y = x @ W.T`` in float32 (``MatMul`` with ``W.T``)."""
    from onnx import helper

    weight = np.ascontiguousarray(np.asarray(w, dtype=np.float32).T)  # [n_in, n_out]
    return [helper.make_node("MatMul", [x, prefix + "W"], [y])], {prefix + "W": weight}


def ort_blocks(blocks: KernelBlocks, threads: int) -> _OrtSession:
    """onnxruntime ``MatMulNBits`` (int8 compute) on lossless blocks, plus the min term if any
    (:func:`blocks_nodes`)."""
    nodes, inits = blocks_nodes(blocks, "A", "Y")
    n, k = blocks.shape
    del blocks  # a caller that passed its only reference has the levels freed before the session's copies
    return _OrtSession(nodes, inits, k, n, threads)


class RowChunks:
    """One matrix as several :class:`Matmul` over consecutive output rows (outputs concatenated):
    a large matrix (a 262144-row head) is built a chunk at a time, so its load-time copies stay
    a chunk's size. The same dot products, row for row."""

    def __init__(self, parts: list[Matmul]) -> None:
        self.parts = parts
        self.n_in = parts[0].n_in
        self.n_out = sum(p.n_out for p in parts)

    def __call__(self, x: F32) -> F32:
        return np.concatenate([p(x) for p in self.parts], axis=-1)


def release_freed_memory() -> None:
    """Hand memory freed by a load back to the OS (glibc ``malloc_trim``; a no-op elsewhere).

    Building a session copies its weights three times (ONNX tensor, serialized model, session);
    glibc keeps the freed copies in its heap, measured ~170 MiB after loading SmolLM2 int8."""
    trim = libc_malloc_trim()
    if trim is not None:
        trim(0)


@cache
def libc_malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (``pages.libc``: looked up
    once a process; a load hands memory back after every session it builds, 126 times for
    SmolLM2's f32 mode)."""
    trim: Callable[[int], int] | None = getattr(libc(), "malloc_trim", None)
    return trim


def exact(w: F32, backend: str, threads: int | None = None) -> Matmul:
    """A float32 :class:`Matmul` for ``W [n_out, n_in]`` on ``backend`` ("numpy" or "ort")."""
    if backend == "numpy":
        return NumpyMatmul(w)
    if backend == "ort":
        require_ort()
        return ort_f32(w, default_threads() if threads is None else threads)
    raise ModelError(f"backend {backend!r} is not an exact float32 backend ({', '.join(EXACT_BACKENDS)})")


def require_ort() -> None:
    if not ort_available():
        raise BackendUnavailable(
            "backend needs onnxruntime and onnx (pip install 'verispec[fast]'); --backend numpy works without"
        )


def check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise ModelError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
