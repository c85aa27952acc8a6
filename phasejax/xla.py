"""XLA settings of phasejax's own compiled programs (the theory's solves, rows and phase-diagram chunks).

On a CPU, XLA compiles every kernel of a program separately, and the theory's programs hold about a thousand
kernels: their compilation, not their running, is most of a first call. Two options shorten it at the same
results (bit for bit) and the same running time: XLA's older CPU fusion emitter compiles the kernels in about
two thirds of the time of its newer MLIR-based one, and leaving out LLVM's expensive passes takes another 15%
off (a 6-alpha phase-diagram row: compile 21.0 -> 17.8 CPU seconds, its run 11.0 -> 9.2; an optimisation level
of 1 or 0 instead compiles faster still but changes the rounding, and level 0 runs 2.5 times slower). The
theory's programs ask for both (`CPU_COMPILER_OPTIONS`). The options are passed per program (`jax.jit(..., compiler_options=...)`); nothing global changes, and a user's own
programs are compiled with XLA's defaults. Where the installed XLA does not know an option, the programs are
compiled without it (`compiler_options` checks once per backend).

A program's first call in a process also traces and lowers it, which for the theory's programs takes several
seconds that JAX's persistent compilation cache does not save (it stores the compiled program, keyed by the
lowered one). With that cache switched on (`jax_compilation_cache_dir`; the command line does it), the
theory's entry points and the phase diagram's chunk program also keep their lowered programs there
(`jit(..., store=True)`, `stored_jit`; the folder
`phasejax-programs` of the cache): a later process loads the lowered program (`jax.export`) instead of
tracing it, and XLA's compiled program comes from JAX's cache. A stored program is found by a key of
everything that decides it: phasejax's source, JAX's and jaxlib's versions, the backend, the float64 switch,
the static arguments and the shapes, dtypes and tree of the others; results are those of the traced program,
bit for bit. Where the key cannot be made (a static argument without a stable `repr`, an argument spread over
several devices), `flatbuffers` (which `jax.export` serialises with) is missing, or the output holds a type that
cannot be serialised, the call is an ordinary `jax.jit` call.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import importlib.metadata
import inspect
import json
import os
from typing import Callable, NamedTuple

CPU_COMPILER_OPTIONS = {"xla_cpu_use_fusion_emitters": False, "xla_llvm_disable_expensive_passes": True}
"""XLA options for the theory's programs on a CPU (see the module docstring); none on an accelerator."""


@functools.lru_cache(maxsize=None)
def _known(backend: str) -> tuple:
    """The options of `CPU_COMPILER_OPTIONS` that XLA accepts on `backend` (a one-line program is compiled with
    each, once)."""
    if backend != "cpu":
        return ()
    import jax
    import jax.numpy as jnp

    known = []
    for key, value in CPU_COMPILER_OPTIONS.items():
        try:
            jax.jit(lambda x: x + 1, compiler_options={key: value}).lower(jnp.zeros(1)).compile()
        except Exception:  # noqa: BLE001 - an XLA without the option: compile without it
            continue
        known.append((key, value))
    return tuple(known)


def compiler_options(backend: str | None = None) -> dict | None:
    """The XLA options phasejax compiles its theory programs with on `backend` (default: JAX's default backend),
    or `None` for none."""
    import jax

    known = _known(backend or jax.default_backend())
    return dict(known) or None


def _tracing(args, kwargs) -> bool:
    """Whether a call is being traced into another program: an argument is a tracer, or JAX's trace state is not
    the top level's."""
    import jax

    if any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((args, kwargs))):
        return True
    try:
        from jax._src import core

        return not core.trace_state_clean()
    except (ImportError, AttributeError):   # a JAX without it: the arguments decide
        return False


def jit(fun: Callable, *, store: bool = False, **jit_kwargs) -> Callable:
    """`jax.jit(fun, **jit_kwargs)` with `compiler_options()` of the backend it runs on (decided at the first call
    on each backend). Called inside another traced function (a `jax.jit`, `vmap` or loop body), it is a plain
    `jax.jit` (XLA's options belong to the program being compiled, which is the caller's). The returned function
    also has `lower` (the same arguments). `store`: a top-level call keeps its lowered program beside JAX's
    persistent compilation cache and loads it from there in later processes (module docstring)."""
    import jax

    compiled: dict = {}
    static = tuple(jit_kwargs.get("static_argnames", ()))
    if isinstance(jit_kwargs.get("static_argnames"), str):
        static = (jit_kwargs["static_argnames"],)
    if store and set(jit_kwargs) - {"static_argnames"}:
        raise ValueError(f"store=True takes only static_argnames, got {sorted(jit_kwargs)}")

    def for_backend(args, kwargs):
        key = "traced" if _tracing(args, kwargs) else jax.default_backend()
        if key not in compiled:
            options = None if key == "traced" else compiler_options(key)
            compiled[key] = jax.jit(fun, compiler_options=options, **jit_kwargs)
        return compiled[key]

    @functools.wraps(fun)
    def call(*args, **kwargs):
        if store and not _tracing(args, kwargs):
            program = _stored_program(fun, static, args, kwargs)
            if program is not None:
                return program.run()
        return for_backend(args, kwargs)(*args, **kwargs)

    call.lower = lambda *args, **kwargs: for_backend(args, kwargs).lower(*args, **kwargs)
    return call


# ----------------------------------------------------------------------------------------------------------
# Lowered programs kept beside JAX's persistent compilation cache
# ----------------------------------------------------------------------------------------------------------

STORE_FOLDER = "phasejax-programs"
"""The folder of stored lowered programs, inside JAX's persistent compilation cache folder."""

_TRACING_CONFIG = ("jax_enable_x64", "jax_default_matmul_precision", "jax_numpy_dtype_promotion",
                   "jax_threefry_partitionable", "jax_default_prng_impl")
"""JAX settings that change a traced program (part of the store key)."""

_LOADED: dict = {}          # key -> the jitted call of the exported program (this process)
_SERIALIZABLE: set = set()  # output node types registered with jax.export's serialisation


def store_folder(cache: str | None = None) -> str | None:
    """Where lowered programs are kept: `<cache>/phasejax-programs` for the persistent compilation cache folder
    `cache` (default: JAX's `jax_compilation_cache_dir`), or `None` when there is none or it is not a local
    folder, or `flatbuffers` is not installed."""
    import jax

    cache = jax.config.jax_compilation_cache_dir if cache is None else cache
    if not cache or "://" in str(cache):
        return None
    try:
        import flatbuffers  # noqa: F401 - jax.export serialises with it
        from jax import export
    except ImportError:
        return None
    if not (hasattr(jax, "typeof") and hasattr(export, "register_pytree_node_serialization")):
        return None             # a JAX older than the store needs
    return os.path.join(os.path.expanduser(str(cache)), STORE_FOLDER)


class _Program(NamedTuple):
    call: Callable          # jitted call of the exported program on the flat arguments
    leaves: list            # the flat dynamic arguments

    def run(self):
        return self.call(*self.leaves)


_BUILTIN_NODES = (tuple, list, dict, type(None))
"""Tree nodes that JAX serialises itself."""


def _lookup(module: str, qualname: str):
    """The object `module.qualname` names (`None` where no such attribute exists)."""
    found = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    return found


def _named(obj) -> str | None:
    """`module.qualname` of a function or class that its module names so (stable across processes), else `None`."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        return None
    return f"{module}.{qualname}" if _lookup(module, qualname) is obj else None


def _stable_repr(value) -> str | None:
    """A text that names `value` by content in every process (functions by their module-level name), or `None`
    where it has none (a lambda, a closure, an object shown by its address)."""
    if callable(value) and not isinstance(value, type) and hasattr(value, "__qualname__"):
        return _named(value)         # a function (also a jitted one, as `jax.numpy`'s) by its module-level name
    if isinstance(value, (tuple, list)):
        items = [_stable_repr(v) for v in value]
        return None if any(i is None for i in items) else "(" + ", ".join(items) + ",)"
    if isinstance(value, dict):
        items = [(_stable_repr(k), _stable_repr(v)) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))]
        return None if any(a is None or b is None for a, b in items) else \
            "{" + ", ".join(f"{a}: {b}" for a, b in items) + "}"
    text = repr(value)
    return None if " at 0x" in text else text


def _tree_text(treedef) -> str | None:
    """A stable text of a tree definition: node types by name, their static data by `_stable_repr`."""
    data = treedef.node_data()
    if data is None:
        return "*"
    kind, aux = data
    name = kind.__name__ if kind in _BUILTIN_NODES else _named(kind)
    aux_text = _stable_repr(aux)
    children = [_tree_text(c) for c in treedef.children()]
    if name is None or aux_text is None or any(c is None for c in children):
        return None
    return f"{name}[{aux_text}](" + ", ".join(children) + ")"


def program_key(fun: Callable, static: dict, tree, avals, *, identity: str | None = None,
                options=None) -> str | None:
    """The store key of `fun` (named by `identity` if given) at static arguments `static`, dynamic tree `tree`,
    leaf avals `avals` and XLA options `options`: SHA-256 over everything that decides the lowered program
    (module docstring); `None` where one part has no stable text."""
    import jax

    from phasejax.io import source_digest

    parts = [_stable_repr(static), _tree_text(tree)]
    if any(p is None for p in parts):
        return None
    text = json.dumps(dict(
        fun=f"{fun.__module__}.{fun.__qualname__}" if identity is None else identity, source=source_digest(),
        environment=_environment(jax.default_backend()),
        config=[str(getattr(jax.config, name, None)) for name in _TRACING_CONFIG],
        options=repr(options), static=parts[0], tree=parts[1],
        avals=[[list(a.shape), str(a.dtype), bool(getattr(a, "weak_type", False))] for a in avals]))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@functools.lru_cache(maxsize=None)
def _environment(backend: str) -> tuple:
    """JAX's and jaxlib's versions, the backend and its device kind (read once per process and backend)."""
    import jax

    try:
        jaxlib = importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        jaxlib = "?"
    return jax.__version__, jaxlib, backend, jax.devices(backend)[0].device_kind


def _node_types(treedef) -> list:
    """The node types (other than JAX's built-in containers) of a tree definition."""
    found, stack = [], [treedef]
    while stack:
        node = stack.pop()
        data = node.node_data()
        if data is not None and data[0] not in _BUILTIN_NODES and data[0] not in found:
            found.append(data[0])
        stack.extend(node.children())
    return found


def _serialized_name(cls) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _register(cls) -> bool:
    """Register `cls` (a NamedTuple or a dataclass pytree whose static fields are JSON values) with
    `jax.export`'s serialisation; whether it can be serialised."""
    from jax import export

    if cls in _SERIALIZABLE:
        return True
    name = _serialized_name(cls)
    try:
        if issubclass(cls, tuple) and hasattr(cls, "_fields"):
            export.register_namedtuple_serialization(cls, serialized_name=name)
        elif dataclasses.is_dataclass(cls):
            export.register_pytree_node_serialization(
                cls, serialized_name=name, serialize_auxdata=lambda aux: json.dumps(list(aux)).encode(),
                deserialize_auxdata=lambda data: tuple(json.loads(data)))
        else:
            return False
    except ValueError:      # already registered under this name (by an earlier import of this module)
        pass
    _SERIALIZABLE.add(cls)
    return True


def _load(folder: str, key: str):
    """The exported program stored under `key`, or `None` (absent, unreadable, or of types that do not import)."""
    from jax import export

    base = os.path.join(folder, key)
    try:
        with open(base + ".json") as fh:
            meta = json.load(fh)
        for name in meta["types"]:
            cls = _lookup(*name.split(":"))
            if not isinstance(cls, type) or not _register(cls):
                return None
        with open(base + ".bin", "rb") as fh:
            return export.deserialize(bytearray(fh.read()))
    except Exception:  # noqa: BLE001 - a missing or damaged entry is made again
        return None


def _save(folder: str, key: str, exported, types: list, fun: Callable) -> None:
    """Keep `exported` under `key` (the program, then its description; both written atomically); a folder that
    cannot be written leaves the program unstored."""
    from phasejax.io import atomic_write_bytes, atomic_write_json

    try:
        os.makedirs(folder, exist_ok=True)
        base = os.path.join(folder, key)
        atomic_write_bytes(base + ".bin", bytes(exported.serialize()))
        atomic_write_json(base + ".json", dict(fun=f"{fun.__module__}.{fun.__qualname__}",
                                               types=[_serialized_name(t) for t in types]))
    except OSError:
        pass


_DEFAULT = object()


def stored_jit(fun: Callable, identity: str, compiler_options: dict | None = None) -> Callable:
    """`jax.jit(fun, compiler_options=compiler_options)` whose top-level calls go through the program store
    (module docstring) under `identity`: a text that names everything `fun` computes (for a sweep's batch
    function, its run's complete configuration), which replaces `fun`'s name in the key."""
    import jax

    plain = jax.jit(fun, compiler_options=compiler_options)

    @functools.wraps(fun)
    def call(*args):
        if not _tracing(args, {}):
            program = _stored_program(fun, (), args, {}, identity=identity, options=compiler_options)
            if program is not None:
                return program.run()
        return plain(*args)

    return call


def _stored_program(fun: Callable, static_names: tuple, args, kwargs, *, identity: str | None = None,
                    options=_DEFAULT) -> _Program | None:
    """The program of a top-level call of `fun` through the store (loaded, or exported and kept), or `None` to
    call it as an ordinary `jax.jit` program. `identity`: the text that names `fun` in the key (default its
    module and name); `options`: XLA's options (default `compiler_options()`)."""
    import jax
    from jax import export

    folder = store_folder()
    if folder is None:
        return None
    bound = inspect.signature(fun).bind(*args, **kwargs)
    bound.apply_defaults()
    static = {k: v for k, v in bound.arguments.items() if k in static_names}
    dynamic = {k: v for k, v in bound.arguments.items() if k not in static_names}
    leaves, tree = jax.tree_util.tree_flatten(dynamic)
    if any(isinstance(x, jax.Array) and len(x.sharding.device_set) > 1 for x in leaves):
        return None
    avals = [jax.typeof(x) for x in leaves]
    options = compiler_options() if options is _DEFAULT else options
    key = program_key(fun, static, tree, avals, identity=identity, options=options)
    if key is None:
        return None
    if key not in _LOADED:
        exported = _load(folder, key)
        if exported is None:
            def flat(*flat_leaves):
                return fun(**jax.tree_util.tree_unflatten(tree, flat_leaves), **static)

            specs = [jax.ShapeDtypeStruct(a.shape, a.dtype, weak_type=getattr(a, "weak_type", False)) for a in avals]
            try:
                exported = export.export(jax.jit(flat))(*specs)
            except Exception:  # noqa: BLE001 - what jax.export cannot take runs as a jax.jit call (which raises
                return None    # the program's own errors)
            types = _node_types(exported.out_tree)
            if not all(_register(t) for t in types):
                return None
            _save(folder, key, exported, types, fun)
        _LOADED[key] = jax.jit(exported.call, compiler_options=options)
    return _Program(_LOADED[key], leaves)
