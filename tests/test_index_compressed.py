"""The compressed index kind (IVF-PQ shortlist re-ranked from a float16 vector file): when it is
chosen, its rankings against exact search, filters, updates, files on disk and their repair."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import engine.vectors.policy as policy_module
from engine.catalog.library import Library
from engine.errors import CorruptIndexError, QuadratError
from engine.methods import SearchQuery, search_hits
from engine.progress import CancelToken, Progress
from engine.search.searcher import Searcher
from engine.vectors.files import checksum_path
from engine.vectors.index import VectorIndex
from engine.vectors.policy import choose_codec, choose_kind
from engine.vectors.vectorfile import VectorFile, vector_file_paths

DIM = 128
N = 20_000
GB = 1024**3
# Too small for 20k x 128 flat or IVF-Flat (10.4 / 10.9 MB), enough for 8-bit codes (3.5 MB).
SQ8_BUDGET = 5_000_000


def top10(searcher: Searcher, text: str) -> list[int]:
    """The ids of the first ten photos a text search finds, through the method registry."""
    hits = search_hits(searcher.library, searcher.encoder, SearchQuery(text), top_k=10)
    return [h.image_id for h in hits]


def normalised(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array, dtype=np.float32)
    return array / np.linalg.norm(array, axis=-1, keepdims=True)


def clustered_vectors(n: int, clusters: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(vectors, cluster labels): points around `clusters` centres, within-cluster cosine ~0.6."""
    rng = np.random.default_rng(seed)
    centres = normalised(rng.standard_normal((clusters, DIM)))
    labels = rng.integers(0, clusters, size=n)
    noise = rng.standard_normal((n, DIM)) * (0.9 / np.sqrt(DIM))
    return normalised(centres[labels] + noise), labels


def exact_top(
    ids: np.ndarray, vectors: np.ndarray, query: np.ndarray, k: int, allowed: np.ndarray | None
) -> list[int]:
    scores = vectors @ normalised(query)
    if allowed is not None:
        scores = np.where(np.isin(ids, allowed), scores, -np.inf)
    order = np.lexsort((ids, -scores))[:k]
    return [int(ids[i]) for i in order if np.isfinite(scores[i])]


def recall(found: list[tuple[int, float]], expected: list[int]) -> float:
    return len({i for i, _ in found} & set(expected)) / len(expected)


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(ids, vectors, labels, queries): scattered ids, as a catalog has after deletions."""
    vectors, labels = clustered_vectors(N, clusters=200)
    ids = np.random.default_rng(1).choice(5 * N, size=N, replace=False).astype(np.int64) + 1
    queries, _ = clustered_vectors(30, clusters=200, seed=0)  # same centres (seed), new points
    queries = normalised(queries + np.random.default_rng(2).standard_normal(queries.shape) * 0.02)
    return ids, vectors, labels, queries


@pytest.fixture(scope="module")
def compressed(data, tmp_path_factory) -> tuple[VectorIndex, Path]:
    ids, vectors, _, _ = data
    path = tmp_path_factory.mktemp("compressed") / "model.faiss"
    index = VectorIndex.build(
        ids, vectors, kind="auto", memory_budget=SQ8_BUDGET, vectors_path=path
    )
    index.save(path)
    return index, path


# ---------------------------------------------------------------------- choosing the kind


def test_the_budget_and_the_size_choose_the_compressed_kind() -> None:
    # 5M x 512 as IVF-Flat takes ~10 GB: over the default 4 GiB budget.
    assert choose_kind(5_000_000, 512) == "compressed"
    assert choose_kind(1_000_000, 512) == "ivf"
    assert choose_kind(1_000_000, 512, memory_budget=1 * GB) == "compressed"
    assert choose_kind(1_000_000, 512, memory_budget=64 * GB) == "ivf"
    assert choose_kind(3_000_000, 512, memory_budget=64 * GB) == "compressed"  # the size limit
    assert choose_kind(150_000, 512) == "flat"
    assert choose_kind(150_000, 512, memory_budget=GB // 8) == "compressed"
    # 8-bit codes (2.7 GB at 5M x 512) while they fit, product-quantized ones below that.
    assert choose_codec(5_000_000, 512) == "sq8"
    assert choose_codec(5_000_000, 512, memory_budget=2 * GB) == "pq"
    assert choose_codec(10_000_000, 512) == "pq"


def test_a_small_budget_builds_compressed_and_needs_no_rebuild(data, compressed) -> None:
    ids, vectors, _, _ = data
    index, _ = compressed
    assert index.kind == "compressed" and index.codec == "sq8" and index.vectors is not None
    assert index.memory_budget == SQ8_BUDGET and not index.needs_rebuild()
    flat = VectorIndex.build(ids, vectors, kind="auto")
    assert flat.kind == "flat" and not flat.needs_rebuild()
    flat.memory_budget = 1  # the user lowered the budget: the next open rebuilds
    assert flat.needs_rebuild()
    index.memory_budget = None  # the default budget holds 20k vectors flat easily
    assert index.needs_rebuild()
    index.memory_budget = 1_000_000  # too small for 8-bit codes now
    assert index.needs_rebuild()
    index.memory_budget = SQ8_BUDGET


def test_a_tighter_budget_takes_product_quantized_codes(data, tmp_path: Path) -> None:
    ids, vectors, _, queries = data
    index = VectorIndex.build(
        ids[:10_000], vectors[:10_000], memory_budget=1, vectors_path=tmp_path / "pq.faiss"
    )
    assert index.kind == "compressed" and index.codec == "pq" and not index.needs_rebuild()
    recalls = [
        recall(index.search(q, 10), exact_top(ids[:10_000], vectors[:10_000], q, 10, None))
        for q in queries
    ]
    assert np.mean(recalls) >= 0.95, recalls
    index.memory_budget = SQ8_BUDGET  # raised: 8-bit codes fit well now
    assert index.needs_rebuild()


def test_a_compressed_build_needs_a_path_for_its_vectors(data) -> None:
    ids, vectors, _, _ = data
    with pytest.raises(ValueError, match="path for its vector file"):
        VectorIndex.build(ids, vectors, kind="compressed")


# ---------------------------------------------------------------------- rankings


def test_top_10_matches_exact_search(data, compressed) -> None:
    ids, vectors, _, queries = data
    index, _ = compressed
    recalls = []
    for query in queries:
        found = index.search(query, 10)
        expected = exact_top(ids, vectors, query, 10, None)
        recalls.append(recall(found, expected))
        # Re-ranked scores are exact cosines (float16 storage: within 1e-3).
        exact_scores = {int(i): float(s) for i, s in zip(ids, vectors @ query, strict=True)}
        for image_id, score in found:
            assert score == pytest.approx(exact_scores[image_id], abs=2e-3)
        assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
    assert np.mean(recalls) >= 0.95, recalls


def test_a_stored_vector_finds_itself_first(data, compressed) -> None:
    ids, vectors, _, _ = data
    index, _ = compressed
    for row in (0, 17, 9_999):
        assert index.search(vectors[row], 1)[0][0] == int(ids[row])


@pytest.fixture(scope="module")
def ivf_flat(data) -> VectorIndex:
    ids, vectors, _, _ = data
    return VectorIndex.build(ids, vectors, kind="ivf")


def filtered_recall(index: VectorIndex, data, allowed: np.ndarray) -> float:
    ids, vectors, _, queries = data
    recalls = []
    for query in queries[:10]:
        found = index.search(query, 20, allowed_ids=allowed)
        assert found and set(i for i, _ in found) <= set(allowed.tolist())
        recalls.append(recall(found, exact_top(ids, vectors, query, 20, allowed)))
    return float(np.mean(recalls))


@pytest.mark.parametrize("size", [500, 2_000, 6_000])
def test_filtered_search_returns_only_allowed_ids_with_recall(
    data, compressed, ivf_flat, size
) -> None:
    ids, _, labels, _ = data
    index, _ = compressed
    rng = np.random.default_rng(size)
    allowed = np.sort(rng.choice(ids, size=size, replace=False))
    assert filtered_recall(index, data, allowed) >= 0.95
    # A taxon-like filter: whole clusters, mostly far from the queries. The lists a filtered
    # IVF search picks (the same for both kinds) bound the recall: the compressed kind keeps
    # what IVF-Flat finds.
    taxon = np.sort(ids[np.isin(labels, rng.choice(200, size=size // 100, replace=False))])
    assert filtered_recall(index, data, taxon) >= filtered_recall(ivf_flat, data, taxon) - 0.02
    assert filtered_recall(index, data, taxon) >= 0.85


# ---------------------------------------------------------------------- updates


def test_add_replace_and_remove(data, tmp_path: Path) -> None:
    ids, vectors, _, _ = data
    path = tmp_path / "m.faiss"
    index = VectorIndex.build(ids[:5000], vectors[:5000], kind="compressed", vectors_path=path)
    new_ids = np.array([10**7, 10**7 + 1], dtype=np.int64)
    new_vectors = normalised(np.random.default_rng(7).standard_normal((2, DIM)))
    index.add(new_ids, new_vectors)
    assert len(index) == 5002 and index.search(new_vectors[1], 1)[0][0] == 10**7 + 1
    # Replacing a vector: the id now answers to its new vector, once.
    index.add(ids[:1], new_vectors[:1] * -1)
    top = index.search(new_vectors[0] * -1, 3)
    assert top[0][0] == int(ids[0]) and [i for i, _ in top].count(int(ids[0])) == 1
    assert index.remove(np.concatenate([new_ids, [123_456_789]])) == 2
    assert 10**7 + 1 not in index and len(index) == 5000
    assert all(i not in (10**7, 10**7 + 1) for i, _ in index.search(new_vectors[1], 50))
    # Saved and reloaded, the vector file holds exactly the index's ids.
    index.save(path)
    loaded = VectorIndex.load(path)
    loaded.attach_vectors(VectorFile.open(path, DIM))
    assert np.array_equal(loaded.vectors.ids(), loaded.ids())  # type: ignore[union-attr]
    query = vectors[42]
    assert loaded.search(query, 10) == index.search(query, 10)


def test_build_reports_progress_and_can_be_cancelled(data, tmp_path: Path) -> None:
    ids, vectors, _, _ = data
    seen: list[Progress] = []
    VectorIndex.build(
        ids, vectors, kind="compressed", vectors_path=tmp_path / "a.faiss", progress=seen.append
    )
    adding = [p for p in seen if p.message == "adding"]
    assert adding[-1].done == adding[-1].total == N
    token = CancelToken()
    token.cancel()
    from engine.errors import Cancelled

    with pytest.raises(Cancelled):
        VectorIndex.build(
            ids, vectors, kind="compressed", vectors_path=tmp_path / "b.faiss", cancel=token
        )
    assert not any(p.exists() for p in vector_file_paths(tmp_path / "b.faiss"))


# ---------------------------------------------------------------------- files


def test_save_load_and_checksum(data, compressed) -> None:
    _, vectors, _, queries = data
    index, path = compressed
    assert checksum_path(path).is_file()
    assert all(p.is_file() for p in vector_file_paths(path))
    loaded = VectorIndex.load(path)
    assert loaded.kind == "compressed" and loaded.needs_vectors
    with pytest.raises(QuadratError, match="no vector file attached"):
        loaded.search(queries[0], 10)
    loaded.attach_vectors(VectorFile.open(path, DIM))
    assert loaded.search(queries[0], 10) == index.search(queries[0], 10)
    damaged = path.with_name("damaged.faiss")
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    damaged.write_bytes(bytes(raw))
    checksum_path(damaged).write_bytes(checksum_path(path).read_bytes())
    with pytest.raises(CorruptIndexError):
        VectorIndex.load(damaged)


def test_a_damaged_vector_file_is_refused(data, tmp_path: Path) -> None:
    ids, vectors, _, _ = data
    path = tmp_path / "v.faiss"
    index = VectorIndex.build(ids[:3000], vectors[:3000], kind="compressed", vectors_path=path)
    index.save(path)
    data_path, map_path = vector_file_paths(path)
    # Vectors overwritten with garbage: served, they fail the norm check.
    with open(data_path, "r+b") as handle:
        handle.seek(64)
        handle.write(b"\x7f" * (DIM * 2 * 3000))
    damaged = VectorFile.open(path, DIM)
    index.attach_vectors(damaged)
    with pytest.raises(CorruptIndexError):
        index.search(vectors[0], 10)
    # Truncated: refused at open.
    with open(data_path, "r+b") as handle:
        handle.truncate(1000)
    with pytest.raises(CorruptIndexError, match="truncated"):
        VectorFile.open(path, DIM)
    map_path.write_bytes(b"not a zip")
    with pytest.raises(CorruptIndexError):
        VectorFile.open(path, DIM)


# ---------------------------------------------------------------------- in a library


@pytest.fixture
def compressed_library(tmp_path: Path, copy_cli_demo_library, demo_encoder, monkeypatch):
    """The demo library (a copy of the session's, indexed with the flat kind) opened under a
    budget too small for anything but the compressed kind (and a minimum size lowered to the
    demo's few hundred photos): (library, exact top 10s)."""
    monkeypatch.setattr(policy_module, "_MIN_COMPRESSED", 0)
    lib = Library.open(copy_cli_demo_library(tmp_path / "lib"))
    searcher = Searcher(lib, demo_encoder)
    queries = ["red circle", "blue triangle", "green square", "yellow star"]
    exact = {q: top10(searcher, q) for q in queries}
    assert searcher.index.kind == "flat"
    lib.index_memory_budget = 1
    lib.close()
    lib = Library.open(tmp_path / "lib")
    lib.index_memory_budget = 1
    yield lib, exact
    lib.close()


def test_library_with_the_compressed_kind_ranks_the_demo_as_exact(
    compressed_library, demo_encoder
) -> None:
    lib, exact = compressed_library
    searcher = Searcher(lib, demo_encoder)
    assert searcher.index.kind == "compressed"  # rebuilt at open: the budget says so
    for query, top in exact.items():
        assert top10(searcher, query) == top, query


def test_library_rebuilds_a_deleted_vector_file_and_a_damaged_index(
    compressed_library, demo_encoder, caplog
) -> None:
    lib, exact = compressed_library
    model = demo_encoder.model_key
    lib.vector_index(model)  # the rebuild to the compressed kind
    path = lib.index_path(model)
    data_path, map_path = vector_file_paths(path)
    assert data_path.is_file() and map_path.is_file()
    lib.close()
    data_path.unlink()
    reopened = Library.open(lib.root)
    reopened.index_memory_budget = 1
    searcher = Searcher(reopened, demo_encoder)
    assert searcher.index.kind == "compressed" and data_path.is_file()
    assert top10(searcher, "red circle") == exact["red circle"]
    assert "rebuilding the vector file" in caplog.text
    reopened.close()
    # A damaged index file fails its checksum: rebuilt from the catalog, same results.
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    again = Library.open(lib.root)
    again.index_memory_budget = 1
    searcher = Searcher(again, demo_encoder)
    assert searcher.index.kind == "compressed"
    assert top10(searcher, "red circle") == exact["red circle"]
    again.close()


# ---------------------------------------------------------------------- the setting


def test_the_memory_setting_and_option_are_checked(tmp_path: Path) -> None:
    import argparse
    import json

    from app.cli.args import index_memory_gb
    from app.settings import Settings, index_memory_bytes, load_settings

    assert Settings().index_memory_gb == 4.0 and not Settings().problems()
    assert any("Index memory" in p for p in Settings(index_memory_gb=0.1).problems())
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"version": 1, "index_memory_gb": 8}))  # a whole number is fine
    loaded = load_settings(path)
    assert loaded.settings.index_memory_gb == 8.0 and not loaded.problems
    assert index_memory_bytes(loaded.settings.index_memory_gb) == 8 * GB
    assert index_memory_gb("2.5") == 2.5
    for bad in ("lots", "0", "-3"):
        with pytest.raises(argparse.ArgumentTypeError):
            index_memory_gb(bad)


def test_cli_index_memory_option_rejects_bad_values_with_exit_2(tmp_path: Path, capsys) -> None:
    from app.cli import main

    assert main(["index", str(tmp_path), "--index-memory", "lots"]) == 2
    assert "expected a number of GB" in capsys.readouterr().err


def test_a_vector_file_save_cut_short_is_refused_or_ignored(tmp_path: Path) -> None:
    vectors, _ = clustered_vectors(300, clusters=5)
    ids = np.arange(1, 301, dtype=np.int64)
    first = VectorFile.create(tmp_path / "a.faiss", DIM, [(ids[:200], vectors[:200])])
    # Rows appended, map never saved (a crash before `flush`): reopened, the old rows only,
    # and the next append writes over the leftovers.
    first.add(ids[200:], vectors[200:])
    reopened = VectorFile.open(tmp_path / "a.faiss", DIM)
    assert len(reopened) == 200 and 250 not in set(reopened.ids().tolist())
    reopened.add(ids[250:251], vectors[250:251])
    reopened.flush()
    again = VectorFile.open(tmp_path / "a.faiss", DIM)
    assert len(again) == 201
    np.testing.assert_allclose(again.get(ids[250:251]), vectors[250:251], atol=2e-3)
    # A map beside another data file (a rebuild cut short between its two renames): refused.
    VectorFile.create(tmp_path / "b.faiss", DIM, [(ids, vectors)])
    _, map_a = vector_file_paths(tmp_path / "a.faiss")
    _, map_b = vector_file_paths(tmp_path / "b.faiss")
    map_a.write_bytes(map_b.read_bytes())
    with pytest.raises(CorruptIndexError, match="does not match its map"):
        VectorFile.open(tmp_path / "a.faiss", DIM)


def test_library_keeps_index_and_vector_file_in_step_across_sessions(
    compressed_library, demo_encoder, caplog
) -> None:
    lib, exact = compressed_library
    model = demo_encoder.model_key
    index = lib.vector_index(model)
    assert index.kind == "compressed"
    photos = len(index)
    # A vector the catalog does not hold (as if its photo were forgotten meanwhile): saved
    # with the index, then removed from both by the next open's consistency check.
    stray = np.ones((1, index.dim), dtype=np.float32)
    index.add(np.array([10**9]), stray)
    lib.save_index(model)
    lib.close()
    caplog.clear()
    reopened = Library.open(lib.root)
    reopened.index_memory_budget = 1
    index = reopened.vector_index(model)
    assert index.kind == "compressed" and len(index) == photos and 10**9 not in index
    assert np.array_equal(index.vectors.ids(), index.ids())  # type: ignore[union-attr]
    assert "rebuilding" not in caplog.text  # both files were trusted and repaired in place
    searcher = Searcher(reopened, demo_encoder)
    assert top10(searcher, "red circle") == exact["red circle"]
    reopened.close()
