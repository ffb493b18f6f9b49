"""The indexer's plan as a pure value: walked files sorted against catalog rows, with plain data
(no catalog, no files), one case at a time."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext

import pytest

from engine.catalog.models import STATUS_MISSING, STATUS_OK, STATUS_SKIPPED
from engine.errors import Cancelled
from engine.indexing.collections import CatalogRow
from engine.indexing.plan import PLAN_CANCEL_EVERY, FilePlan, classify_files
from engine.indexing.report import SkippedFile
from engine.indexing.walk import FileEntry


class Rows:
    """Catalog rows by path, taken as a folder walk takes them."""

    def __init__(self, *rows: tuple[str, CatalogRow]) -> None:
        self._rows = dict(rows)

    def take(self, rel_path: str) -> CatalogRow | None:
        return self._rows.pop(rel_path, None)

    def untaken(self) -> dict[str, CatalogRow]:
        return dict(sorted(self._rows.items()))


class Hashes:
    """Content hashes by path (keyword: the path without ".jpg", "/" as "_"); remembers which
    files were hashed."""

    def __init__(self, **digests: str | None) -> None:
        self.digests = digests
        self.asked: list[str] = []

    def __call__(self, entries: list[FileEntry]) -> Mapping[str, str | None]:
        self.asked += [e.rel_path for e in entries]
        return {e.rel_path: self.digests.get(e.rel_path.replace("/", "_").removesuffix(".jpg"))
                for e in entries}  # fmt: skip


def entry(path: str, size: int = 100, mtime: int = 1) -> FileEntry:
    return FileEntry(path, f"/photos/{path}", size, mtime)


def row(
    image_id: int,
    size: int = 100,
    mtime: int = 1,
    digest: str | None = "h",
    status: str = STATUS_OK,
    reason: str | None = None,
) -> CatalogRow:
    return (image_id, size, mtime, digest, status, reason)


def plan_of(
    entries: list[FileEntry],
    rows: Rows,
    embedded: set[int],
    hashes: Hashes | None = None,
) -> FilePlan:
    return classify_files(entries, nullcontext(rows), embedded, hashes or Hashes())


def jobs(plan: FilePlan) -> list[tuple[str, int | None, str | None]]:
    return [(j.entry.rel_path, j.image_id, j.known_hash) for j in plan.jobs]


def test_a_file_without_a_row_is_new_and_not_hashed_when_no_row_vanished() -> None:
    hashes = Hashes(a="ha")
    plan = plan_of([entry("a.jpg")], Rows(), set(), hashes)
    assert jobs(plan) == [("a.jpg", None, None)]
    assert (plan.total_files, plan.unchanged, plan.moved, plan.gone) == (1, 0, 0, [])
    assert hashes.asked == []  # hashing a first index twice would double its reading


def test_an_unchanged_encoded_file_needs_nothing() -> None:
    hashes = Hashes()
    plan = plan_of([entry("a.jpg")], Rows(("a.jpg", row(7))), {7}, hashes)
    assert (plan.jobs, plan.unchanged, plan.relinked, plan.restored) == ([], 1, [], [])
    assert hashes.asked == []


def test_an_unchanged_file_not_yet_encoded_with_this_model_is_a_job_on_its_row() -> None:
    plan = plan_of([entry("a.jpg")], Rows(("a.jpg", row(7, digest="h7"))), set())
    assert jobs(plan) == [("a.jpg", 7, "h7")]
    assert plan.unchanged == 0


def test_a_file_skipped_before_and_unchanged_stays_skipped_with_its_reason() -> None:
    rows = Rows(("a.jpg", row(7, status=STATUS_SKIPPED, reason="truncated")))
    plan = plan_of([entry("a.jpg")], rows, set())
    assert plan.skipped == [SkippedFile("a.jpg", "truncated")]
    assert plan.jobs == []


def test_a_changed_file_is_re_encoded_on_its_row_with_its_new_hash() -> None:
    hashes = Hashes(a="new")
    plan = plan_of([entry("a.jpg", size=200)], Rows(("a.jpg", row(7, digest="old"))), {7}, hashes)
    assert jobs(plan) == [("a.jpg", 7, "new")]
    assert hashes.asked == ["a.jpg"]
    assert plan.unchanged == 0


def test_a_touched_file_with_the_same_content_keeps_its_vector_and_takes_its_new_mtime() -> None:
    touched = entry("a.jpg", mtime=5)
    plan = plan_of([touched], Rows(("a.jpg", row(7, digest="h"))), {7}, Hashes(a="h"))
    assert plan.jobs == []
    assert plan.relinked == [(7, touched)]
    assert plan.unchanged == 1


def test_a_moved_file_takes_back_its_row_by_content() -> None:
    moved = entry("new/b.jpg")
    rows = Rows(("old/a.jpg", row(7, digest="hb")))
    plan = plan_of([moved], rows, {7}, Hashes(new_b="hb"))
    assert (plan.relinked, plan.moved, plan.unchanged) == ([(7, moved)], 1, 1)
    assert plan.jobs == [] and plan.gone == []


def test_a_renamed_file_not_yet_encoded_is_a_job_on_its_old_row() -> None:
    rows = Rows(("a.jpg", row(7, digest="hb")))
    plan = plan_of([entry("b.jpg")], rows, set(), Hashes(b="hb"))
    assert jobs(plan) == [("b.jpg", 7, "hb")]
    assert plan.moved == 1


def test_a_new_file_beside_a_vanished_row_is_new_with_its_hash_and_the_row_goes_missing() -> None:
    rows = Rows(("a.jpg", row(7, digest="ha")))
    plan = plan_of([entry("b.jpg")], rows, {7}, Hashes(b="hb"))
    assert jobs(plan) == [("b.jpg", None, "hb")]  # the hash is not computed twice
    assert plan.gone == [7]
    assert plan.moved == 0


def test_a_file_gone_from_disk_is_missing_and_one_missing_already_is_not_counted_again() -> None:
    rows = Rows(("a.jpg", row(7)), ("b.jpg", row(8, status=STATUS_MISSING)), ("c.jpg", row(9)))
    plan = plan_of([entry("c.jpg")], rows, {7, 8, 9})
    assert plan.gone == [7]
    assert plan.total_files == 1


def test_a_missing_photo_back_on_disk_returns_with_its_vector() -> None:
    rows = Rows(("a.jpg", row(7, status=STATUS_MISSING)))
    plan = plan_of([entry("a.jpg")], rows, {7})
    assert (plan.returned, plan.restored, plan.unchanged, plan.jobs) == (1, [7], 1, [])


def test_a_missing_photo_back_without_a_vector_of_this_model_is_encoded() -> None:
    rows = Rows(("a.jpg", row(7, digest="h7", status=STATUS_MISSING)))
    plan = plan_of([entry("a.jpg")], rows, set())
    assert (plan.returned, plan.restored) == (1, [])
    assert jobs(plan) == [("a.jpg", 7, "h7")]


def test_a_missing_photo_back_changed_is_re_encoded_and_counted_as_returned() -> None:
    rows = Rows(("a.jpg", row(7, digest="old", status=STATUS_MISSING)))
    plan = plan_of([entry("a.jpg", size=5)], rows, {7}, Hashes(a="new"))
    assert (plan.returned, plan.restored) == (1, [])
    assert jobs(plan) == [("a.jpg", 7, "new")]


def test_a_missing_photo_back_under_another_name_returns_and_is_moved() -> None:
    back = entry("b.jpg")
    rows = Rows(("a.jpg", row(7, digest="h", status=STATUS_MISSING)))
    plan = plan_of([back], rows, {7}, Hashes(b="h"))
    assert (plan.moved, plan.returned, plan.restored, plan.relinked) == (1, 1, [7], [(7, back)])
    assert plan.gone == []


def test_two_copies_of_a_moved_photo_the_first_takes_the_row_the_second_is_new() -> None:
    rows = Rows(("a.jpg", row(7, digest="h")))
    plan = plan_of([entry("b.jpg"), entry("c.jpg")], rows, {7}, Hashes(b="h", c="h"))
    assert [image_id for image_id, _ in plan.relinked] == [7]
    assert jobs(plan) == [("c.jpg", None, "h")]


def test_jobs_keep_walk_order_then_changed_then_new() -> None:
    rows = Rows(("a.jpg", row(1, digest="ha")), ("b.jpg", row(2, digest="old")))
    walked = [entry("n.jpg"), entry("b.jpg", size=9), entry("a.jpg")]
    plan = plan_of(walked, rows, set(), Hashes(b="hb"))
    assert [path for path, _, _ in jobs(plan)] == ["a.jpg", "b.jpg", "n.jpg"]


def test_the_walk_can_be_cancelled_between_files() -> None:
    def cancel() -> None:
        raise Cancelled()

    walked = (entry(f"{n}.jpg") for n in range(PLAN_CANCEL_EVERY + 1))
    with pytest.raises(Cancelled):
        classify_files(walked, nullcontext(Rows()), set(), Hashes(), cancel)
