"""A deterministic embedder for tests: character trigrams hashed into a fixed vector.

Not a model of meaning: texts that share letter sequences come out close,
synonyms do not.  It lets CI exercise the embedding path (vectors computed
at write time, sealed in the entry, cosine ranking) without model weights.
"""

from __future__ import annotations

import hashlib
import math
import re

_WORD = re.compile(r"[^\W_]+")


class HashingEmbedder:
    """``text -> list[float]`` of *dims* numbers, the same for the same text in any process.

    Each word (casefolded) contributes its character trigrams (with word
    boundaries) and itself, each hashed (BLAKE2b) to a position and a sign.

    :param dims: the vector's length.
    """

    def __init__(self, dims: int = 256) -> None:
        if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
            raise ValueError(f"dims must be an int >= 1; got {dims!r}")
        self.dims = dims
        #: The name stored with each vector (see ``search={"model": ...}``).
        self.model_name = f"hashing-trigram-{dims}"

    def __call__(self, text: str) -> list[float]:
        vector = [0.0] * self.dims
        for word in _WORD.findall(text.casefold()):
            padded = f"#{word}#"
            features = [padded[i : i + 3] for i in range(max(1, len(padded) - 2))] + [padded]
            for feature in features:
                digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
                slot = int.from_bytes(digest[:4], "little") % self.dims
                vector[slot] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(x * x for x in vector))
        return vector if norm == 0 else [x / norm for x in vector]
