"""`QCacheControls`: the inspector's controls tab (cache capacity and concurrency, loading mode).

Each control acts at once on the inspected cache (capacity, concurrency) or on
every plugin layer (prefetch, loading mode), and the cache controls write
napari's Preferences too, so a choice outlives the session. The inspector
connects the controls' magicgui signals only while it is shown (`connect`),
like every other signal it follows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from magicgui.widgets import CheckBox, ComboBox, Container, PushButton, SpinBox
from qtpy.QtWidgets import QLabel, QVBoxLayout, QWidget

from napari_lazy_zarr._layer_data import loader_of
from napari_lazy_zarr._preferences import write_preference
from napari_lazy_zarr.widgets._lifecycle import weakly

if TYPE_CHECKING:
    from collections.abc import Callable

    from napari_lazy_zarr._layer_data import LayerLoader
    from napari_lazy_zarr.core import ChunkCache

__all__ = ["BLOCKING_NOTE", "MIB", "QCacheControls"]

MIB: Final = 1 << 20
BLOCKING_NOTE: Final = (
    "Blocking loading is a debugging mode: every read napari makes waits for its "
    "chunks on napari's main thread, so the window freezes while they load."
)


class QCacheControls(QWidget):
    """The controls tab: capacity, concurrency, prefetch, loading mode, retry and evict buttons.

    Parameters
    ----------
    cache
        Returns the cache the controls act on (None: none inspected).
    layers
        Returns the viewer's layers opened with this plugin.
    limits_applied
        Called once capacity or concurrency was applied to the cache.
    options_applied
        Called once prefetch or the loading mode was applied to the layers.

    The four are held weakly when bound methods (the inspector's): the
    controls never keep their owner alive. The retry and evict buttons are
    only shown here: their owner connects them.
    """

    def __init__(
        self,
        cache: Callable[[], ChunkCache | None],
        layers: Callable[[], list[Any]],
        *,
        limits_applied: Callable[[], None],
        options_applied: Callable[[], None],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._inspected = weakly(cache)
        self._layers = weakly(layers)
        self._limits_applied = weakly(limits_applied)
        self._options_applied = weakly(options_applied)
        self.capacity = SpinBox(label="capacity (MiB)", min=0, max=1_000_000, step=64)
        self.concurrency = SpinBox(label="concurrency", min=1, max=256)
        self.prefetch = CheckBox(label="prefetch neighbours", value=True)
        self.mode = ComboBox(
            label="loading",
            choices=[
                ("progressive", "progressive"),
                ("blocking (debugging: freezes napari)", "blocking"),
            ],
            tooltip=BLOCKING_NOTE,
        )
        self.retry_button = PushButton(text="Retry all failed")
        self.evict_button = PushButton(text="Evict all unpinned")
        self.controls: Container[Any] = Container(
            widgets=[
                self.capacity,
                self.concurrency,
                self.prefetch,
                self.mode,
                self.retry_button,
                self.evict_button,
            ]
        )
        self.blocking_note = QLabel(BLOCKING_NOTE)
        self.blocking_note.setWordWrap(True)
        self.blocking_note.setStyleSheet("color: rgb(245, 200, 50)")
        self.blocking_note.setVisible(False)
        layout = QVBoxLayout(self)
        layout.addWidget(self.controls.native)
        layout.addWidget(self.blocking_note)
        layout.addStretch(1)

    def connect(self, connect: Callable[[Any, Callable[..., Any]], None]) -> None:
        """Connect the controls that act, through `connect(signal, slot)` (the owner's)."""
        for signal, slot in (
            (self.capacity.changed, self._apply_capacity),
            (self.concurrency.changed, self._apply_concurrency),
            (self.prefetch.changed, self._apply_loader_options),
            (self.mode.changed, self._apply_loader_options),
        ):
            connect(signal, slot)

    def show_loader(self, loader: LayerLoader) -> None:
        """Show the inspected layer's loader options and cache."""
        self.prefetch.value = loader.prefetch
        self.mode.value = "blocking" if loader.blocking else "progressive"
        self.follow_cache()

    def follow_cache(self) -> None:
        """Show the inspected cache's capacity and concurrency, as they are now.

        Whoever changed them — napari's Preferences page, `configure`, a script —
        the controls show it (the inspector calls this on every refresh: two
        attribute reads). Shown, not applied: a capacity that is no whole number
        of MiB (``--total-bytes-limit 1000000000``) is shown rounded down, never
        written back to the cache or the Preferences.
        """
        cache = self._cache()
        if cache is None:
            return
        for control, value in (
            (self.capacity, cache.total_bytes_limit // MIB),
            (self.concurrency, cache.concurrency),
        ):
            if control.value != value:
                with control.changed.blocked():
                    control.value = value

    def _cache(self) -> ChunkCache | None:
        inspected = self._inspected()
        return None if inspected is None else inspected()

    def _applied(self, callback: Callable[[], Callable[[], None] | None]) -> None:
        applied = callback()
        if applied is not None:
            applied()

    def _apply_capacity(self, value: int) -> None:
        cache = self._cache()
        if cache is not None and value * MIB != cache.total_bytes_limit:
            write_preference("total_bytes_limit_mib", max(1, value))
            cache.total_bytes_limit = value * MIB
            self._applied(self._limits_applied)

    def _apply_concurrency(self, value: int) -> None:
        cache = self._cache()
        if cache is not None and value != cache.concurrency:
            write_preference("concurrency", value)
            cache.concurrency = value
            self._applied(self._limits_applied)

    def _apply_loader_options(self, _: Any = None) -> None:
        blocking = self.mode.value == "blocking"
        self.blocking_note.setVisible(blocking)
        layers = self._layers()
        for layer in [] if layers is None else layers():
            loader = loader_of(layer)
            assert loader is not None
            loader.prefetch = bool(self.prefetch.value)
            loader.blocking = blocking
        self._applied(self._options_applied)
