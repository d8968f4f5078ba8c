"""Launching a compiled Triton or Gluon kernel without the JIT's per-call dispatch.

Calling a ``@triton.jit`` (or ``@gluon.jit``) function binds its arguments, derives their
specialization (a Python pass over every argument: pointer alignment, integer divisibility,
each tensor descriptor's dtype, block and layout), hashes that into a key and looks the
compiled kernel up, on every call: host work an entry point's later calls do not need. An
entry point's call key (``prefill._key``) already fixes everything the specialization reads
(shapes, strides, dtypes, device and 16-byte alignment of the inputs; the plan's constants;
outputs are fresh allocations, which the caching allocator aligns to 512 bytes). So a plan
launches its key's first call through the JIT, keeps the ``CompiledKernel`` that call
returns, and launches every later call through it directly: ``CompiledKernel.run`` with the
arguments the JIT itself would pass it last.

Where that is not possible the kernel is always called through the JIT, which is never
wrong, only slower: in the interpreter (``TRITON_INTERPRET=1``, whose launch returns no
compiled kernel), on a Triton whose JIT returns something else, and from a thread whose
current device is not the one the kernel was loaded on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class HostDescriptor:
    """What Triton's launcher reads of a host tensor descriptor: ``base`` (a tensor, for its
    address), ``shape``, ``strides`` and ``padding``. The descriptor of a plan's first call
    is Triton's own ``TensorDescriptor``, which checks them (alignment, block shape, layout)
    and gives the specialization; later calls of the key have the same shape, strides and
    alignment, so this record skips those checks."""

    __slots__ = ("base", "padding", "shape", "strides")

    def __init__(self, base: Any, shape: list[int], strides: list[int]) -> None:
        self.base = base
        self.shape = shape
        self.strides = strides
        self.padding = "zero"


def _hook(chain: Any) -> Any:
    """A launch hook to hand the launcher, or None when there is none to call (Triton 3.6
    keeps an always-present, usually empty ``HookChain``; older releases keep None)."""
    if chain is None or getattr(chain, "calls", True) == []:
        return None
    return chain


class DirectKernel:
    """One JIT kernel, one grid and one set of keyword arguments (constexprs and compile
    options), launched with the call's positional arguments. The first call goes through
    the JIT; later calls through the compiled kernel it returned (see the module docstring).
    ``direct`` says whether later calls launch directly."""

    __slots__ = ("_compiled", "_device", "_driver", "_fn", "_grid", "_knobs", "_meta", "_tail")

    def __init__(self, fn: Any, grid: Sequence[int], meta: dict[str, Any]) -> None:
        self._fn = fn
        self._grid = (*grid, *(1,) * (3 - len(grid)))
        self._meta = meta
        self._compiled: Any = None
        self._tail: tuple[Any, ...] = ()
        self._device: int | None = None
        self._driver: Any = None
        self._knobs: Any = None

    @property
    def direct(self) -> bool:
        """Whether the compiled kernel is kept (the first call went through the JIT)."""
        return self._compiled is not None

    def stream(self) -> Any:
        """The current stream when this call can launch directly (the compiled kernel is
        kept and the current device is the one it was loaded on), else None."""
        if self._compiled is None:
            return None
        device = self._driver.get_current_device()
        if device != self._device:
            return None
        return self._driver.get_current_stream(device)

    def __call__(self, *args: Any) -> None:
        stream = self.stream()
        if stream is None:
            self.jit(*args)
        else:
            self.launch(stream, *args)

    def jit(self, *args: Any) -> None:
        """Launch through the JIT (the first call keeps what it compiled). Elsewhere than the
        first call's device the JIT loads, or compiles, the kernel for the current one."""
        if self._compiled is None:
            self._first(args)
        else:
            self._fn[self._grid](*args, **self._meta)

    def launch(self, stream: Any, *args: Any) -> None:
        """Launch directly on ``stream`` (from ``stream()``, which must not be None)."""
        ck = self._compiled
        runtime = self._knobs.runtime
        enter, leave = _hook(runtime.launch_enter_hook), _hook(runtime.launch_exit_hook)
        full = (*args, *self._tail)
        # A profiler's launch hook (proton) reads the launch metadata; without one, none.
        meta = ck.launch_metadata(self._grid, stream, *full) if enter is not None else None
        g0, g1, g2 = self._grid
        ck.run(g0, g1, g2, stream, ck.function, ck.packed_metadata, meta, enter, leave, *full)

    def _first(self, args: tuple[Any, ...]) -> None:
        import triton
        from triton import knobs

        compiled = self._fn[self._grid](*args, **self._meta)
        if hasattr(compiled, "result"):  # an asynchronous compile's future
            compiled = compiled.result()
        if not all(hasattr(compiled, a) for a in ("run", "function", "packed_metadata")):
            return  # the interpreter, or a JIT that returns no compiled kernel: stay on it
        params = getattr(self._fn, "params", None)
        if params is None:
            return
        # The JIT passes the launcher every parameter in order, the constexprs among them
        # (which the launcher skips): the call's positional arguments lead, the rest are the
        # keyword arguments or their defaults.
        tail = []
        for p in params[len(args) :]:
            if p.name in self._meta:
                tail.append(self._meta[p.name])
            elif p.has_default:
                tail.append(p.default)
            else:
                return
        self._tail = tuple(tail)
        self._driver = triton.runtime.driver.active
        self._knobs = knobs
        self._device = self._driver.get_current_device()
        self._compiled = compiled


__all__ = ["DirectKernel", "HostDescriptor"]
