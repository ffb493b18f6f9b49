"""Judges' commands meeting each other and empty data: two processes offering blind double
judging at the same moment both get the one sample (no SQL error), and agreement on a query
with nothing to measure says so in one line instead of a numpy error."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import pytest

from engine.catalog.library import Library
from engine.judgments import adjudication
from engine.judgments.adjudication import double_judging_sample, offer_double_judging
from engine.judgments.agreement import measure_agreement
from engine.judgments.queries import QueryStore
from tests.catalogs import add_plain_photos, folder_url
from tests.test_judges import image_ids

PHOTOS = 12


@pytest.fixture
def library(tmp_path: Path, catalog_url: str, monkeypatch: pytest.MonkeyPatch):
    with Library.open(tmp_path / "lib", database_url=folder_url(catalog_url, monkeypatch)) as lib:
        add_plain_photos(lib, tmp_path / "photos", PHOTOS)
        yield lib


@pytest.mark.parametrize("size", [4, None])
def test_two_processes_offering_double_judging_at_once_share_one_sample(
    library: Library, size: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = image_ids(library)
    ann = QueryStore(library, user="ann")
    qid = ann.find_or_create_query("heron fishing")
    for image_id in ids[:10]:
        ann.judge(qid, image_id, image_id % 2)
    # Each offer reads what is offered, then waits here for the other to have read too (the
    # race as two processes ran it), then writes its photos.
    meeting = threading.Barrier(2, timeout=1.0)
    stamp = adjudication.utcnow

    def both_have_read():  # type: ignore[no-untyped-def]
        # Broken: the other waits for our commit, so there is no race to stage.
        with contextlib.suppress(threading.BrokenBarrierError):
            meeting.wait()
        return stamp()

    monkeypatch.setattr(adjudication, "utcnow", both_have_read)
    results: dict[str, list[int] | BaseException] = {}

    def offer(judge: str) -> None:
        other = Library.open(library.root)  # as another process on the same catalog
        try:
            results[judge] = offer_double_judging(other, qid, size, judge)
        except BaseException as error:  # noqa: BLE001 - the test reports it
            results[judge] = error
        finally:
            other.close()

    threads = [threading.Thread(target=offer, args=(judge,)) for judge in ("ann", "bob")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not [r for r in results.values() if isinstance(r, BaseException)], results
    sample = double_judging_sample(library, qid)
    assert results["ann"] == results["bob"] == sample
    assert len(sample) == (size or 10)


def test_agreement_on_a_term_nobody_gave_says_so_in_one_line(library: Library, capsys) -> None:
    from app.cli import main

    ann, bob = QueryStore(library, user="ann"), QueryStore(library, user="bob")
    qid = ann.find_or_create_query("grebe")
    for image_id in image_ids(library)[:3]:
        ann.judge(qid, image_id, 1)
        bob.judge(qid, image_id, 0)
    root = str(library.root)
    library.close()
    for extra in ([], ["--json"]):
        code = main(["agreement", "--query", str(qid), "--library", root, "--term", "lifeStage",
                     *extra])  # fmt: skip
        captured = capsys.readouterr()
        assert code == 1
        assert captured.out == ""
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in captured.err
        assert "no attribute judgments for lifeStage" in lines[0], lines[0]
    # The judgments themselves are still measured.
    assert main(["agreement", "--query", str(qid), "--library", root]) == 0
    assert "3 photos" in capsys.readouterr().out


def test_agreement_with_nothing_judged_is_a_note(library: Library, capsys) -> None:
    from app.cli import main

    qid = QueryStore(library, user="ann").find_or_create_query("nothing judged yet")
    agreement = measure_agreement({})
    assert agreement.photos == 0 and "no photo is judged by two judges" in agreement.note
    root = str(library.root)
    library.close()
    assert main(["agreement", "--query", str(qid), "--library", root]) == 0
    out = capsys.readouterr().out
    assert "no photo is judged by two judges" in out
