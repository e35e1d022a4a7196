"""Embedders selected by name: ``search={"embedder": "wordllama"}``, ``serve --embedder``.

``"wordllama"`` is :class:`WordLlamaEmbedder`: the WordLlama model
(``l2_supercat``, 256 dimensions) whose weights and tokenizer ship inside the
``wordllama`` wheel (extra ``[embeddings]``).  It is loaded from the installed
package's own folder with downloads disabled, so it never reaches the network,
and once per process (every plugin shares it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from ._fork import ForkSafeLock
from .errors import RememberConfigurationError

#: The extra that installs the named embedders' packages.
EXTRA: Final = "remember-sync[embeddings]"

#: The dimensions of the model the wheel ships.
_DIMS: Final = 256

# A forked child gets it free (the model list is appended to only once loaded).
_lock = ForkSafeLock()
_loaded: list[Any] = []


def _wordllama_model() -> Any:
    """The WordLlama model, loaded offline once per process.

    :raises RememberConfigurationError: ``wordllama`` is not installed, or its
        wheel lacks the model files.
    """
    with _lock:
        if _loaded:
            return _loaded[0]
        try:
            import wordllama  # noqa: PLC0415 - an optional extra
        except ImportError as exc:
            raise RememberConfigurationError(
                "the 'wordllama' embedder needs the package wordllama: "
                f"pip install '{EXTRA}'"
            ) from exc
        folder = Path(wordllama.__file__).parent
        try:
            # The wheel keeps weights/ and tokenizers/ in the package folder; naming it as
            # the cache folder finds both there, and downloads stay off.
            model = wordllama.WordLlama.load(cache_dir=folder, dim=_DIMS, disable_download=True)
        except (FileNotFoundError, ValueError) as exc:
            raise RememberConfigurationError(
                f"cannot load the WordLlama model from {folder} (reinstall '{EXTRA}'): {exc}"
            ) from exc
        _loaded.append(model)
        return model


class WordLlamaEmbedder:
    """text -> vector with the WordLlama model shipped in the ``wordllama`` wheel.

    Select it with ``search={"embedder": "wordllama"}`` (or
    ``remember-sync serve --embedder wordllama``); needs the extra
    ``[embeddings]``.  The vector is the mean of the text's token embeddings
    (the model's own pooling, 256 dimensions); the plugin normalises it.

    :raises RememberConfigurationError: the extra is not installed.
    """

    #: The name stored with each vector (a vector of another model is not reused).
    model_name = f"wordllama-l2_supercat-{_DIMS}"

    def __init__(self) -> None:
        self._model = _wordllama_model()
        self._table = getattr(self._model, "embedding", None)
        self._tokenizer = getattr(self._model, "tokenizer", None)

    def __call__(self, text: str) -> Any:
        """The vector of *text* (a float32 numpy array: a sequence of floats)."""
        table, tokenizer = self._table, self._tokenizer
        if table is None or tokenizer is None:  # another layout: the model's own call
            return self._model.embed(text)[0]
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        if not ids:
            return [0.0] * int(table.shape[1])
        return table.take(ids, axis=0).sum(axis=0) / len(ids)


#: Embedders known by name.
NAMED: Final[dict[str, Callable[[], Callable[[str], Sequence[float]]]]] = {
    "wordllama": WordLlamaEmbedder,
}


def named_embedder(name: str) -> Callable[[str], Sequence[float]]:
    """The embedder called *name* (see :data:`NAMED`).

    :raises RememberConfigurationError: an unknown name, or its extra missing.
    """
    factory = NAMED.get(name)
    if factory is None:
        raise RememberConfigurationError(
            f"unknown embedder {name!r}; known: {', '.join(sorted(NAMED))} "
            "(or a callable text -> vector)"
        )
    return factory()
