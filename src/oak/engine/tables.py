"""Per-job vectorised views of the goodput table: epochs, goodput and progress rates of many jobs at once.

The simulator asks, every round, for the goodput and progress rate of every active job on every shape at its
current epoch. :class:`JobTables` stacks each application's rows (one per epoch) into one array, filled
lazily from :class:`oak.goodput.table.GoodputTable` the first time an (application, epoch) is needed, so a
round costs a few fancy-indexing operations instead of a Python loop over jobs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from oak.catalog.schema import AppProfile
from oak.goodput.table import GoodputTable
from oak.model.snapshot import FloatArray, IntArray


class JobTables:
    """Goodput (samples/s) and progress rate (base-batch iterations/s, uncalibrated) per (job, epoch, shape).

    ``apps``: the application profile of each job of the workload, in workload order.
    """

    def __init__(self, table: GoodputTable, apps: Sequence[AppProfile]) -> None:
        self._table = table
        names: dict[str, int] = {}
        first: dict[str, AppProfile] = {}
        for a in apps:
            names.setdefault(a.name, len(names))
            first.setdefault(a.name, a)
        self._profiles = [first[n] for n in names]
        self.job_app: IntArray = np.array([names[a.name] for a in apps], dtype=np.int64)
        epochs = np.array([len(p.validation.epoch_progress) for p in self._profiles], dtype=np.int64)
        self._offset: IntArray = np.concatenate([[0], np.cumsum(epochs)[:-1]]).astype(np.int64)
        self._epochs = epochs
        self._thresholds = [np.asarray(p.validation.epoch_progress, dtype=np.float64) for p in self._profiles]
        rows = int(epochs.sum())
        self.goodput: FloatArray = np.zeros((rows, table.size))
        self.rate: FloatArray = np.zeros((rows, table.size))
        self._filled = np.zeros(rows, dtype=bool)
        self._row_app = np.repeat(np.arange(len(self._profiles)), epochs)
        self._row_epoch = np.arange(rows) - np.repeat(self._offset, epochs)
        self._columns: IntArray = np.arange(table.size)
        # per job: its last epoch and the progress interval [lo, hi) over which it holds (empty: not looked up yet)
        self._epoch: IntArray = np.zeros(len(self.job_app), dtype=np.int64)
        self._epoch_lo: FloatArray = np.full(len(self.job_app), np.inf)
        self._epoch_hi: FloatArray = np.full(len(self.job_app), -np.inf)
        self._col_of: IntArray = self._columns
        self._col_table: GoodputTable | None = None  # until use_columns
        self._filled_cols = self._filled
        #: :attr:`goodput` and :attr:`rate` on the shapes of :meth:`use_columns` only (all shapes until it is called)
        self.goodput_cols: FloatArray = self.goodput
        self.rate_cols: FloatArray = self.rate

    def use_columns(self, columns: IntArray) -> None:
        """Also keep :attr:`goodput_cols` / :attr:`rate_cols`: the tables on these shapes only (a round reads the
        shapes of the cluster's configurations, a few dozen of thousands). Their rows are computed on these shapes
        alone (``GoodputTable.subset``: the same values); a row of the full tables is computed where one is read
        (``rows(full=True)``, ``rate_at`` on another shape)."""
        self._columns = np.asarray(columns, dtype=np.int64)
        self._col_of = np.full(self._table.size, -1, dtype=np.int64)
        self._col_of[self._columns] = np.arange(len(self._columns))
        self._col_table = self._table.subset(self._columns)
        self.goodput_cols = self.goodput[:, self._columns]
        self.rate_cols = self.rate[:, self._columns]
        self._filled_cols = self._filled.copy()

    def epochs(self, idx: IntArray, progress: FloatArray) -> IntArray:
        """Completed epochs of jobs ``idx`` at ``progress`` (their progress values, aligned with idx), clipped
        to [0, epochs − 1] as :meth:`AppProfile.epoch_of`. Each job's last answer is kept with the progress
        interval it holds over (between two epoch thresholds); only jobs whose progress left theirs are looked
        up again (most rounds: none)."""
        stale = ~((progress >= self._epoch_lo[idx]) & (progress < self._epoch_hi[idx]))
        if stale.any():
            jobs, prog = idx[stale], progress[stale]
            apps = self.job_app[jobs]
            for a in np.unique(apps).tolist():
                m = apps == a
                edges = self._thresholds[a]
                done = np.searchsorted(edges, prog[m], side="right")
                self._epoch[jobs[m]] = np.minimum(done, self._epochs[a] - 1)
                self._epoch_lo[jobs[m]] = np.where(done > 0, edges[np.maximum(done - 1, 0)], -np.inf)
                self._epoch_hi[jobs[m]] = np.where(done < len(edges), edges[np.minimum(done, len(edges) - 1)], np.inf)
        return self._epoch[idx].copy()

    def rows(self, idx: IntArray, epochs: IntArray, full: bool = False) -> IntArray:
        """Row of each job's (application, epoch) in :attr:`goodput_cols` / :attr:`rate_cols` — and, with ``full``,
        in :attr:`goodput` / :attr:`rate` — filling missing rows."""
        rows = self._offset[self.job_app[idx]] + epochs
        if full or self._col_table is None:
            self._fill(rows)
        else:
            missing = rows[~self._filled_cols[rows]]
            for r in np.unique(missing).tolist():
                ch = self._col_table.choices(self._profiles[self._row_app[r]].name, int(self._row_epoch[r]))
                self.goodput_cols[r] = ch.goodput
                self.rate_cols[r] = ch.progress_rate
                self._filled_cols[r] = True
        return rows

    def rate_at(self, rows: IntArray, shapes: IntArray) -> FloatArray:
        """Progress rate of each row (from ``rows``) on the shape beside it: from the columns where every shape is
        one, else from the full rows."""
        if self._col_table is not None:
            cols = self._col_of[shapes]
            if bool((cols >= 0).all()):
                return np.asarray(self.rate_cols[rows, cols])
        self._fill(rows)
        return np.asarray(self.rate[rows, shapes])

    def _fill(self, rows: IntArray) -> None:
        """Compute the full rows ``rows`` not yet computed (and their columns)."""
        missing = rows[~self._filled[rows]]
        for r in np.unique(missing).tolist():
            ch = self._table.choices(self._profiles[self._row_app[r]].name, int(self._row_epoch[r]))
            self.goodput[r] = ch.goodput
            self.rate[r] = ch.progress_rate
            if self._col_table is not None:
                self.goodput_cols[r] = self.goodput[r, self._columns]
                self.rate_cols[r] = self.rate[r, self._columns]
                self._filled_cols[r] = True
            self._filled[r] = True
