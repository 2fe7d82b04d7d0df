"""Codecs of installed packages, registered the first time a store names one zarr lacks.

zarr-python resolves a Zarr v2 codec id through numcodecs' registry (which
loads the ``numcodecs.codecs`` entry points itself) and a Zarr v3 codec name
through its own registry (the ``zarr.codecs`` entry points, collected when zarr
is imported). imagecodecs ships both kinds -- the ``imagecodecs_*`` ids that
tifffile's kerchunk references name (``ZarrTiffStore.write_fsspec``: LZW,
JPEG, deflate, delta predictors ...) -- but registers them only when asked
(``imagecodecs.numcodecs.register_codecs()``, ``imagecodecs.zarr.register_codecs()``).

`with_installed_codecs` asks for them, one provider at a time, once per
process and only when opening a node meets a codec zarr does not know, so a
store of zarr's own codecs costs nothing; a codec still unknown afterwards is a `MissingCodecError`
naming it and the package to install (``imagecodecs``: the ``[codecs]`` extra).
"""

from __future__ import annotations

import importlib
import logging
import re
import threading
from typing import TYPE_CHECKING, Final

import zarr.errors

from napari_lazy_zarr.core.errors import MissingCodecError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "CODEC_PROVIDERS",
    "register_installed_codecs",
    "register_next_codecs",
    "with_installed_codecs",
]

_log = logging.getLogger(__name__)

CODEC_PROVIDERS: Final = (
    ("imagecodecs.numcodecs", "register_codecs"),  # Zarr v2 ids, into numcodecs' registry
    ("imagecodecs.zarr", "register_codecs"),  # Zarr v3 names, into zarr's registry
)
"""The public registration functions called, module and name (each ``f(verbose=False)``)."""

_lock = threading.Lock()
_next = 0  # the providers before this index are registered (or found missing)
_problems: list[str] = []  # a provider installed but failing to import or register
_CODEC_NAME: Final = re.compile(r"codec '([^']+)'")  # in zarr's UnknownCodecError message
_KNOWN_PACKAGES: Final = re.compile(r"Known packages supporting this codec: (.+?)\.?$")


def register_next_codecs() -> bool:
    """Register the codecs of the next installed provider of `CODEC_PROVIDERS`; False when
    every provider has been tried (none is registered twice).

    The first call also re-reads numcodecs' ``numcodecs.codecs`` entry points
    (``numcodecs.registry.run_entrypoints``: a package installed since
    numcodecs was imported). Providers go cheapest first: importing
    ``imagecodecs.numcodecs`` takes ~0.1 s, ``imagecodecs.zarr`` ~0.4 s
    (measured on the 2-core machine), so a Zarr v2 store pays only the first. A
    provider that is not installed is skipped; one that fails to import or
    register is remembered for the error message. Thread-safe: callers take
    turns.
    """
    global _next
    with _lock:
        if _next == 0:
            import numcodecs.registry

            numcodecs.registry.run_entrypoints()
        while _next < len(CODEC_PROVIDERS):
            module_name, function = CODEC_PROVIDERS[_next]
            _next += 1
            if _register(module_name, function):
                return True
        return False


def _register(module_name: str, function: str) -> bool:
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is None or not module_name.startswith(error.name):
            _problems.append(f"{module_name}: {type(error).__name__}: {error}")
        return False  # not installed
    except Exception as error:  # installed, but broken against this zarr/numcodecs
        _problems.append(f"{module_name}: {type(error).__name__}: {error}")
        return False
    try:
        getattr(module, function)(verbose=False)
    except Exception as error:
        _problems.append(f"{module_name}.{function}: {type(error).__name__}: {error}")
        return False
    _log.debug("registered the codecs of %s", module_name)
    return True


def register_installed_codecs() -> None:
    """Register the codecs of every installed provider of `CODEC_PROVIDERS` (once each).

    Examples
    --------
    >>> import numcodecs
    >>> register_installed_codecs()
    >>> numcodecs.get_codec({"id": "imagecodecs_lzw"}).codec_id
    'imagecodecs_lzw'
    """
    while register_next_codecs():
        pass


def with_installed_codecs[T](open_node: Callable[[], T], full: str) -> T:
    """``open_node()``, called again after each provider's codecs are registered
    (`register_next_codecs`) while zarr meets an unknown codec; `full` names the node
    in the error.

    Raises
    ------
    MissingCodecError
        The codec is still unknown once every provider is registered: the
        message names it, the node, and the package to install.
    """
    while True:
        try:
            return open_node()
        except zarr.errors.UnknownCodecError as error:
            if not register_next_codecs():
                raise _missing(full, error) from error


def _missing(full: str, error: zarr.errors.UnknownCodecError) -> MissingCodecError:
    found = _CODEC_NAME.search(str(error))
    name = found.group(1) if found else str(error)
    if name.startswith("imagecodecs_"):
        remedy = "install it with: pip install imagecodecs (the plugin's [codecs] extra)"
    else:
        known = _KNOWN_PACKAGES.search(str(error))
        remedy = (
            f"install one of the packages that provide it: {known.group(1)}"
            if known
            else "install the package that provides it and registers it with numcodecs or zarr"
        )
    trouble = f"; an installed codec package failed: {'; '.join(_problems)}" if _problems else ""
    return MissingCodecError(
        f"{full}: the data is compressed with the codec {name!r}, which no installed package "
        f"provides; {remedy}{trouble}"
    )
