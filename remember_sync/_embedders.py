"""Embedders selected by name: ``search={"embedder": "wordllama"}``, ``serve --embedder``.

``"wordllama"`` is :class:`WordLlamaEmbedder`: the WordLlama model
(``l2_supercat``, 256 dimensions) whose weights and tokenizer ship inside the
``wordllama`` wheel (extra ``[embeddings]``).  It is loaded from the installed
package's own folder with downloads disabled, so it never reaches the network,
and once per process (every plugin shares it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from ._fork import ForkSafeLock
from .errors import RememberConfigurationError

#: The extra that installs the named embedders' packages.
EXTRA: Final = "remember-sync[embeddings]"

#: The dimensions of the model the wheel ships.
_DIMS: Final = 256

#: Words whose tokens one embedder keeps (then it starts over).
_WORD_CACHE: Final = 65_536
#: A line of words separated by single spaces, with no other whitespace.
_PLAIN: Final = re.compile(r"[^\s]+(?: [^\s]+)*").fullmatch

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
        self._words: dict[tuple[str, bool], list[int]] = {}
        #: The tokens of a newline inside a text (those of "\n" alone, less the leading "▁").
        self._newline: list[int] = []
        if self._tokenizer is not None:
            self._newline = list(self._tokenizer.encode("\n", add_special_tokens=False).ids[1:])

    def _ids(self, text: str) -> list[int]:
        """The token ids of *text*, exactly as the tokenizer gives them for the whole text.

        The model's tokenizer marks the start of the text and each space with
        ``▁`` and merges within a word only, and a newline is a token of its
        own; so a text of lines of single-space-separated words is the
        concatenation of its words' tokens (the first word of a later line
        unmarked) and the newlines'.  Those are kept per word (each tokenized
        once per process, at most :data:`_WORD_CACHE`); a text of any other
        shape goes to the tokenizer whole.  ``tests/test_search_wordllama.py``
        checks the two agree.
        """
        assert self._tokenizer is not None
        lines = text.split("\n")
        if not all(_PLAIN(line) for line in lines):
            return list(self._tokenizer.encode(text, add_special_tokens=False).ids)
        ids: list[int] = []
        for n, line in enumerate(lines):
            if n:
                ids += self._newline
            for i, word in enumerate(line.split(" ")):
                ids += self._word(word, bare=n > 0 and i == 0)
        return ids

    def _word(self, word: str, *, bare: bool) -> list[int]:
        """*word*'s tokens after a space or at the start (``bare``: after a newline)."""
        known = self._words
        got = known.get((word, bare))
        if got is None:
            assert self._tokenizer is not None
            if bare:  # "\n" + word, less the tokens of "▁\n"
                got = self._tokenizer.encode("\n" + word, add_special_tokens=False).ids
                got = list(got[len(self._newline) + 1 :])
            else:
                got = list(self._tokenizer.encode(word, add_special_tokens=False).ids)
            if len(known) >= _WORD_CACHE:
                known.clear()
            known[(word, bare)] = got
        return got

    def __call__(self, text: str) -> Any:
        """The vector of *text* (a float32 numpy array: a sequence of floats)."""
        table, tokenizer = self._table, self._tokenizer
        if table is None or tokenizer is None:  # another layout: the model's own call
            return self._model.embed(text)[0]
        ids = self._ids(text)
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
