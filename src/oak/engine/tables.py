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
        #: :attr:`goodput` and :attr:`rate` on the shapes of :meth:`use_columns` only (all shapes until it is called)
        self.goodput_cols: FloatArray = self.goodput
        self.rate_cols: FloatArray = self.rate

    def use_columns(self, columns: IntArray) -> None:
        """Also keep :attr:`goodput_cols` / :attr:`rate_cols`: the tables on these shapes only (a round reads the
        shapes of the cluster's configurations, a few dozen of thousands)."""
        self._columns = np.asarray(columns, dtype=np.int64)
        self.goodput_cols = self.goodput[:, self._columns]
        self.rate_cols = self.rate[:, self._columns]

    def epochs(self, idx: IntArray, progress: FloatArray) -> IntArray:
        """Completed epochs of jobs ``idx`` at ``progress`` (their progress values, aligned with idx), clipped
        to [0, epochs − 1] as :meth:`AppProfile.epoch_of`."""
        out = np.zeros(len(idx), dtype=np.int64)
        apps = self.job_app[idx]
        for a in np.unique(apps).tolist():
            m = apps == a
            done = np.searchsorted(self._thresholds[a], progress[m], side="right")
            out[m] = np.minimum(done, self._epochs[a] - 1)
        return out

    def rows(self, idx: IntArray, epochs: IntArray) -> IntArray:
        """Row of each job's (application, epoch) in :attr:`goodput` / :attr:`rate`, filling missing rows."""
        rows = self._offset[self.job_app[idx]] + epochs
        missing = rows[~self._filled[rows]]
        if len(missing):
            for r in np.unique(missing).tolist():
                ch = self._table.choices(self._profiles[self._row_app[r]].name, int(self._row_epoch[r]))
                self.goodput[r] = ch.goodput
                self.rate[r] = ch.progress_rate
                if self.goodput_cols is not self.goodput:
                    self.goodput_cols[r] = self.goodput[r, self._columns]
                    self.rate_cols[r] = self.rate[r, self._columns]
                self._filled[r] = True
        return rows
