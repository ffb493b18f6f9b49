"""Benchmark runs from the window: the same engine calls as `quadrat evaluate`, in a worker,
one pass per chosen method, with progress, Cancel and a CSV export of the tables."""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QWidget

from app.controllers.session import LibrarySession
from app.settings import RecentFolders, language_model
from app.workers import READ, TaskContext, TaskHandle, TaskRunner
from engine.errors import BadInputError, QuadratError
from engine.files import csv_row
from engine.progress import Progress
from widgets.benchmark_view import (
    AUTOMATIC,
    BenchmarkDialog,
    BenchmarkRequest,
    BenchmarkTables,
    CategoryRow,
    CollectionItem,
    QueryRow,
    SummaryRow,
)

if TYPE_CHECKING:
    from app.controllers.application import Application
    from engine.benchmarks.runner import CollectionChoice
    from engine.evaluation.evaluate import BenchmarkJudgment, BenchmarkResult
    from engine.evaluation.significance import Comparison

log = logging.getLogger(__name__)


def available_methods() -> tuple[str, ...]:
    """The registry's methods that can run here (the same list as `quadrat evaluate`), less
    those that learn from judgments: a benchmark would score them on what they learned from."""
    from app.controllers.feedback import learning_method_keys
    from engine.methods import method_infos

    learning = learning_method_keys()
    return tuple(info.key for info in method_infos() if info.available and info.key not in learning)


@dataclass(frozen=True)
class BenchmarkOutcome:
    request: BenchmarkRequest
    tables: BenchmarkTables
    results: dict[str, BenchmarkResult]  # method -> its result
    seconds: float
    comparisons: list[Comparison] = field(default_factory=list)


def build_tables(
    request: BenchmarkRequest,
    texts: dict[str, str],
    results: dict[str, BenchmarkResult],
    comparisons: list[Comparison] | None = None,
    collections: str = "",
    exhaustive: bool = False,
) -> BenchmarkTables:
    """The dialog's tables from one `BenchmarkResult` per method, and each later method's
    paired comparison with the first (`engine.evaluation.significance.Comparison`); `collections` is the
    line saying which collections were ranked; `exhaustive`: the judgments list only relevant
    photos (see `positives_only`), so no photo is unjudged."""
    summary, per_query, per_category = [], [], []
    unresolved = 0
    against = {c.method: c for c in comparisons or []}
    for method, result in results.items():
        mean = result.mean
        c = against.get(method)
        summary.append(
            SummaryRow(
                method, mean.queries, mean.mAP, mean.mean_nDCG, mean.MRR, mean.mean_judged,
                c.delta if c else None, c.ci95 if c else None, c.p if c else None,
            )
        )  # fmt: skip
        unresolved = max(unresolved, result.unresolved_judgments)
        for m in result.per_query:
            shown = min(request.k, len(result.runs.get(m.query_id, ())))
            unjudged = max(0, shown - round(m.judged * request.k))
            per_query.append(
                QueryRow(
                    m.query_id, texts.get(m.query_id, ""), method,
                    m.AP, m.nDCG, m.RR, m.R, m.judged, unjudged,
                )
            )  # fmt: skip
        for column, groups in result.by_category.items():
            for value, group in groups.items():
                per_category.append(
                    CategoryRow(column, value, method, group.queries, group.mAP, group.mean_nDCG)
                )
    notes = []
    if unresolved:
        notes.append(
            f"{unresolved:,} judgments name photos that are not in the library; "
            "they are left out of R."
        )
    if exhaustive:
        notes.append(
            "The judgments list only relevant photos: every other photo counts as judged not "
            "relevant (as in INQUIRE), so judged@k is left out."
        )
    return BenchmarkTables(
        request.k,
        request.protocol,
        summary,
        per_query,
        per_category,
        "\n".join(notes),
        collections,
        exhaustive,
    )


def _only_judged_collection(choice: CollectionChoice | None) -> bool:
    """The benchmark ranked only the collection the judgments were made on: an exhaustive
    labelling covers it, and nothing else (copies elsewhere are unjudged)."""
    if choice is None or choice.match.only is None:
        return False
    return tuple(c.id for c in choice.ranked) == (choice.match.only.id,)


def positives_only(judgments: Sequence[BenchmarkJudgment]) -> bool:
    """True for a judgments file that lists relevant photos alone (INQUIRE's and the demo's
    format, no `relevant` column or no 0 in it): its labelling is exhaustive, every photo it
    does not list is not relevant, so judged@k (which counts listed photos) would mislead."""
    return bool(judgments) and all(j.relevant > 0 for j in judgments)


def _judged_cells(tables: BenchmarkTables, q: QueryRow) -> list[object]:
    """A query's judged@k and unjudged cells; blank for an exhaustive labelling, where no
    photo is unjudged and a count would mislead."""
    return ["", ""] if tables.exhaustive else [f"{q.judged:.6f}", q.unjudged]


def tables_csv(tables: BenchmarkTables) -> str:
    """One CSV with a `level` column: mean, query and category rows. Every row goes through
    `csv_row`: a query text or method label starting with "=" is shown, never run."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    k = tables.k
    writer.writerow(csv_row(
        ["level", "method", "query_id", "text", "column", "value", "queries", "R",
         f"AP@{k}", f"nDCG@{k}", f"RR@{k}", "protocol",
         "delta_vs_first", "ci95_low", "ci95_high", "p", f"judged@{k}", "unjudged"]
    ))  # fmt: skip
    for r in tables.summary:
        tests = (
            [f"{r.delta:.6f}", f"{r.ci95[0]:.6f}", f"{r.ci95[1]:.6f}", f"{r.p:.6f}"]
            if r.delta is not None and r.ci95 is not None and r.p is not None
            else ["", "", "", ""]
        )
        writer.writerow(csv_row(
            ["mean", r.method, "", "", "", "", r.queries, "",
             f"{r.mAP:.6f}", f"{r.mean_nDCG:.6f}", f"{r.MRR:.6f}", tables.protocol, *tests,
             "" if tables.exhaustive else f"{r.judged:.6f}", ""]
        ))  # fmt: skip
    for q in tables.per_query:
        writer.writerow(csv_row(
            ["query", q.method, q.query_id, q.text, "", "", "", q.R,
             f"{q.AP:.6f}", f"{q.nDCG:.6f}", f"{q.RR:.6f}", tables.protocol,
             "", "", "", "", *_judged_cells(tables, q)]
        ))  # fmt: skip
    for c in tables.per_category:
        writer.writerow(csv_row(
            ["category", c.method, "", "", c.column, c.value, c.queries, "",
             f"{c.mAP:.6f}", f"{c.mean_nDCG:.6f}", "", tables.protocol]
        ))  # fmt: skip
    return buffer.getvalue()


class BenchmarkController(QObject):
    """Opens the benchmark view and runs what it asks for."""

    finished = Signal(object)  # BenchmarkOutcome, or None when cancelled or failed

    def __init__(self, runner: TaskRunner, session: LibrarySession) -> None:
        super().__init__()
        self.runner = runner
        self.session = session
        self.dialog: BenchmarkDialog | None = None
        self.outcome: BenchmarkOutcome | None = None
        self._handle: TaskHandle | None = None

    def open_dialog(self, parent: QWidget | None = None) -> BenchmarkDialog:
        if self.dialog is None:
            dialog = BenchmarkDialog(available_methods(), parent)
            dialog.runRequested.connect(self.run)
            dialog.cancelRequested.connect(self.cancel)
            dialog.exportRequested.connect(self.export)
            dialog.judgmentsChanged.connect(self.refresh_collections)
            dialog.rejected.connect(self.cancel)
            dialog.folders = RecentFolders()  # its file dialogs open where last used
            if parent is not None:
                # Ctrl+Q in the benchmark window quits as the main window's Quit does.
                dialog.quitRequested.connect(parent.window().close)
            self.dialog = dialog
        if self.dialog.isVisible():
            self.dialog.raise_()  # already open behind the window: bring it forward
        else:
            self.dialog.show()
            self.refresh_collections(self.dialog.judgments_edit.text().strip())
        return self.dialog

    def refresh_collections(self, judgments: str = "") -> TaskHandle | None:
        """List the library's collections in the dialog and, for a judgments file, say which
        one holds every judged photo (the automatic choice ranks it alone). With no files
        chosen yet, a collection folder that holds `queries.csv` and `judgments.csv` (the demo,
        an imported INQUIRE-Rerank split, however it was added) fills them in."""
        library = self.session.library
        if library is None:
            return None
        dialog = self.dialog
        suggest = dialog is not None and not (
            dialog.queries_edit.text().strip() or dialog.judgments_edit.text().strip()
        )

        def work(ctx: TaskContext) -> _CollectionsFound:
            from engine.benchmarks.runner import choose_collections, library_collections
            from engine.evaluation.evaluate import load_judgments

            collections = library_collections(library)
            items = [CollectionItem(str(c.id), c.label()) for c in collections]
            files = _benchmark_files([c.root for c in collections]) if suggest else None
            if not judgments or not Path(judgments).is_file():
                return _CollectionsFound(items, None, "", files)
            try:
                choice = choose_collections(library, load_judgments(judgments))
            except BadInputError as exc:  # the run says it again, with the file and line
                return _CollectionsFound(items, None, str(exc), files)
            only = choice.match.only
            matching = None if only is None else str(only.id)
            return _CollectionsFound(items, matching, _sentence(choice.note), files)

        def shown(found: _CollectionsFound) -> None:
            dialog = self.dialog
            if dialog is None:
                return
            dialog.set_collections(found.items, found.matching, found.note)
            empty = not (dialog.queries_edit.text() or dialog.judgments_edit.text())
            if found.files is not None and empty:  # the user has typed nothing meanwhile
                dialog.set_files(*found.files)  # and matches the judgments in turn

        return self.runner.submit(
            work,
            title="Matching the judgments to collections",
            pool=READ,
            group="benchmark-collections",  # the newest file wins
            on_success=shown,
            # Only a hint for the choice: the run itself reports what goes wrong.
            on_failure=lambda exc: log.warning("matching the judgments to collections: %s", exc),
        )

    @property
    def running(self) -> bool:
        return self._handle is not None and self._handle.running

    def run(self, request: BenchmarkRequest) -> TaskHandle | None:
        dialog = self.dialog
        problem = self._problem(request)
        if problem:
            if dialog is not None:
                dialog.status.setText(problem)
            return None
        session = self.session
        library = session.library
        assert library is not None  # `_problem` refuses a benchmark before the library is open

        def work(ctx: TaskContext) -> BenchmarkOutcome:
            import time

            from engine.benchmarks.runner import BenchmarkRequest, run_request
            from engine.evaluation.evaluate import load_judgments, load_queries_csv

            started = time.monotonic()
            queries = load_queries_csv(request.queries)
            judgments = load_judgments(request.judgments)
            asked = BenchmarkRequest(
                queries,
                judgments,
                list(request.methods),
                k=request.k,
                protocol=request.protocol,
                collection=None if request.collection == AUTOMATIC else request.collection,
                generator=session.settings.generator,
                llm=language_model(session.settings),
            )
            bench = run_request(
                library, session.ensure_encoder, asked, progress=ctx.progress, cancel=ctx.cancel
            )
            texts = {q.query_id: q.text for q in queries}
            ranked = _sentence(bench.collections.note) if bench.collections else ""
            return BenchmarkOutcome(
                request,
                build_tables(
                    request,
                    texts,
                    bench.results,
                    bench.comparisons,
                    ranked,
                    positives_only(judgments) and _only_judged_collection(bench.collections),
                ),
                bench.results,
                time.monotonic() - started,
                bench.comparisons,
            )

        if dialog is not None:
            dialog.set_running(True, "Running the benchmark…")
        self._handle = self.runner.submit(
            work,
            title="Running the benchmark",
            pool=READ,
            group="benchmark",
            on_success=self._done,
            on_failure=self._failed,
            on_progress=self._progress,
            on_cancelled=self._cancelled,
        )
        return self._handle

    def _problem(self, request: BenchmarkRequest) -> str:
        if self.session.library is None or self.session.model_key is None:
            return "The library has no indexed photos yet: add a folder first."
        if not self.session.ready:
            return "The search engine is still loading; try again in a moment."
        for what, path in (("queries", request.queries), ("judgments", request.judgments)):
            if not path:
                return f"Choose a {what} file."
            if not Path(path).is_file():
                return f"The {what} file does not exist: {path}"
        if not request.methods:
            return "Choose at least one method."
        return ""

    def _progress(self, p: Progress) -> None:
        if self.dialog is not None:
            self.dialog.set_progress(p.done, p.total, p.message)

    def _done(self, outcome: BenchmarkOutcome) -> None:
        self.outcome = outcome
        if self.dialog is not None:
            self.dialog.set_running(False)
            self.dialog.show_tables(outcome.tables)
            best = max(outcome.tables.summary, key=lambda r: r.mAP, default=None)
            if best is not None:
                self.dialog.status.setText(
                    (outcome.tables.note + "\n" if outcome.tables.note else "")
                    + f"Done in {outcome.seconds:.1f} s: best mAP@{outcome.request.k} "
                    f"{best.mAP:.3f} ({best.method}, {best.queries} queries)"
                )
        self.finished.emit(outcome)

    def _failed(self, exc: BaseException) -> None:
        if self.dialog is not None:
            self.dialog.set_running(False, "The benchmark failed.")
        if isinstance(exc, BadInputError) and self.dialog is not None:
            # A bad file is the user's to fix: say so in the dialog, no error box.
            self.dialog.status.setText(str(exc))
        else:
            self.runner.report_error(exc, "Running the benchmark")
        self.finished.emit(None)

    def _cancelled(self) -> None:
        if self.dialog is not None:
            self.dialog.set_running(False, "Cancelled.")
        self.finished.emit(None)

    def cancel(self) -> None:
        if self._handle is not None and self._handle.running:
            self._handle.token.cancel()  # the run stops at the next query and says so

    def export(self, path: str) -> TaskHandle | None:
        outcome = self.outcome
        if outcome is None:
            return None
        text = tables_csv(outcome.tables)

        def write(ctx: TaskContext) -> Path:
            from engine.io.export import export_text

            out = Path(path)
            export_text(out, text, "the benchmark tables")  # whole or not at all
            return out

        def written(out: Path) -> None:
            if self.dialog is not None:
                self.dialog.status.setText(f"Wrote {out}")

        def failed(exc: BaseException) -> None:
            if isinstance(exc, QuadratError) and self.dialog is not None:
                self.dialog.status.setText(str(exc))  # a full disk: one line, no error box
            else:
                self.runner.report_error(exc, "Exporting the benchmark")

        return self.runner.submit(
            write,
            title="Exporting the benchmark",
            pool=READ,
            on_success=written,
            on_failure=failed,
        )


@dataclass(frozen=True)
class _CollectionsFound:
    """What `refresh_collections` found: the collections, the one holding every judged photo,
    a note, and a collection's benchmark files to offer (queries, judgments)."""

    items: list[CollectionItem]
    matching: str | None
    note: str
    files: tuple[str, str] | None


def _benchmark_files(roots: Sequence[str]) -> tuple[str, str] | None:
    """The first collection folder holding both `queries.csv` and `judgments.csv`."""
    for root in roots:
        queries, judgments = Path(root) / "queries.csv", Path(root) / "judgments.csv"
        if queries.is_file() and judgments.is_file():
            return str(queries), str(judgments)
    return None


def _sentence(line: str) -> str:
    """An engine note as a sentence of the window: capital first, full stop last."""
    line = line.strip()
    return f"{line[:1].upper()}{line[1:]}." if line else ""


def install(app: Application) -> None:
    """Tools › Benchmark…: runs methods over a benchmark's queries and judgments."""
    app.benchmark = BenchmarkController(app.runner, app.session)
    app.window.benchmarkRequested.connect(lambda: open_benchmark(app))


def open_benchmark(app: Application) -> BenchmarkDialog:
    """The benchmark dialog; in the demo, with the demo collection's benchmark files."""
    dialog = app.benchmark.open_dialog(app.window)
    if app.demo and not dialog.queries_edit.text():
        # The demo collection ships INQUIRE-style benchmark files: offer them.
        from app import paths

        root = paths.demo_collection_dir()
        if (root / "queries.csv").is_file():
            dialog.set_files(str(root / "queries.csv"), str(root / "judgments.csv"))
    return dialog
