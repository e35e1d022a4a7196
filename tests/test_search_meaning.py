"""Hybrid ranking with the real WordLlama model on the committed evaluation set.

``tests/data/meaning_eval.py``: 66 memories of one person among 140 distractors,
each with a reworded question and a paraphrase sharing no indexed word with it.
Acceptance: hybrid recall@5 >= 0.65 on paraphrases and >= 0.95 on reworded
questions, and hybrid never below the lexical ranker on either.
"""

from __future__ import annotations

import os

import pytest

from benchmarks.search import evaluate, meaning
from remember_sync._search import entry_text, tokens
from tests.data.meaning_eval import ITEMS, dataset

if os.environ.get("CI") != "true":
    pytest.importorskip("wordllama")


def test_paraphrases_share_no_word_with_their_memory() -> None:
    """Only meaning links a paraphrase to its memory (the indexed terms are disjoint)."""
    assert len(ITEMS) >= 60
    for key, value, question, paraphrase in ITEMS:
        stored = set(tokens(entry_text(key, value, None, None)))
        assert not stored & set(tokens(paraphrase)), (key, paraphrase)
        assert question != paraphrase


def test_hybrid_recall_with_wordllama() -> None:
    """Hybrid recall@5: paraphrases >= 0.65, reworded questions >= 0.95."""
    result = meaning(dataset())
    print(result)
    assert result["paraphrases"]["hybrid"] >= 0.65, result
    assert result["questions"]["hybrid"] >= 0.95, result
    for queries in ("questions", "paraphrases"):
        assert result[queries]["hybrid"] >= result[queries]["lexical"], result


def test_hybrid_keeps_the_lexical_wins_on_the_older_set() -> None:
    """On the lexical ranker's own evaluation set the hybrid stays at least as good."""
    import json  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    data = json.loads((Path(__file__).parent / "data" / "search_eval.json").read_text("utf-8"))
    lexical = evaluate(data)["recall@5"]
    hybrid = evaluate(data, embedder="wordllama")["recall@5"]
    assert hybrid >= lexical >= 0.9, (lexical, hybrid)
